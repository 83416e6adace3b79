"""API keys, resolved on the worker at call time and never kept anywhere else.

A profile names its key (``api_key_env``); the value is looked up when a model call starts, so
it never enters a `ModelRequest`, a snapshot, workflow history, events, the store or a log line,
and a rotated key is picked up without restarting the worker. Lookup order:

1. the process environment variable of that name;
2. the secrets file named by ``OTHERONE_SECRETS_FILE``, if set: either ``.env`` style
   (``NAME=value`` lines; ``#`` comments, blank lines, ``export`` and quotes allowed) or, when
   the file name ends in ``.toml``, a TOML file of top-level ``NAME = "value"`` strings.

Profiles without ``api_key_env`` use the provider's conventional variable (``OPENAI_API_KEY``,
``ANTHROPIC_API_KEY``, ``OPENROUTER_API_KEY``); ``local`` servers have none and are called
without credentials.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from otherone.activities.providers.base import ProviderError
from otherone.credentials import is_credential_value
from otherone.definitions import ModelProfile
from otherone.redaction import remember

SECRETS_FILE_ENV = "OTHERONE_SECRETS_FILE"
DEFAULT_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
}


@dataclass(frozen=True, repr=False)
class ApiKey:
    """A resolved key, its name and where it was read (those may be shown, the value never).

    ``secrets_file`` is the file it came from, None when it came from the environment.
    """

    name: str
    value: str
    secrets_file: str | None = None

    def __repr__(self) -> str:
        return f"ApiKey(name={self.name!r}, value=<redacted>, origin={self.origin!r})"

    @property
    def origin(self) -> str:
        """Where the key was read, for messages: the operator must know which one to replace."""
        if self.secrets_file is None:
            return f"environment variable {shown_key_name(self.name)}"
        return (
            f"key {shown_key_name(self.name)} of the secrets file {self.secrets_file} "
            f"({SECRETS_FILE_ENV})"
        )

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of the key's value replaced, as it is and as a
        ``repr`` shows it (an HTTP library's error quotes a header escaped)."""
        if not self.value:
            return text
        for shown in {self.value, repr(self.value)[1:-1], repr(self.value.encode())[2:-1]}:
            text = text.replace(shown, "<redacted>")
        return text


def shown_key_name(name: str) -> str:
    """The name of a key's variable, for messages: the operator needs it, but a credential
    pasted in place of the name (refused at load; this is for a profile built around that) is
    only named by its field."""
    return "named by api_key_env" if is_credential_value(name) else name


def key_env_name(profile: ModelProfile) -> str | None:
    """The variable that holds the profile's key (explicit, else the provider's usual one)."""
    return profile.api_key_env or DEFAULT_KEY_ENV.get(profile.provider)


def resolve_api_key(profile: ModelProfile) -> ApiKey | None:
    """The profile's key, or None when it needs none; a missing key is a non-retryable error."""
    name = key_env_name(profile)
    if name is None:
        return None
    from_env = os.environ.get(name)
    if from_env and from_env.strip():
        return _checked(profile, ApiKey(name=name, value=from_env.strip()))
    from_file = read_secrets_file().get(name)
    source = os.environ.get(SECRETS_FILE_ENV)
    if source and from_file and from_file.strip():
        return _checked(profile, ApiKey(name=name, value=from_file.strip(), secrets_file=source))
    where = f"environment variable {shown_key_name(name)}" + (
        f" (nor in the secrets file {source})" if source else ""
    )
    raise ProviderError(
        f"model '{profile.id}' ({profile.provider}): no API key: {where} is not set",
        retryable=False,
    )


def _checked(profile: ModelProfile, key: ApiKey) -> ApiKey:
    """``key`` (registered for redaction: `otherone.redaction`), unless it holds what an HTTP
    header cannot carry (a line break of a two-line key file, a non-ASCII character pasted
    with it): refused before any request, naming where it was read and never its value (sent,
    the HTTP library's error quoted the header)."""
    remember(key.value)
    if all(" " < character < "\x7f" for character in key.value):
        return key
    raise ProviderError(
        f"model '{profile.id}' ({profile.provider}): the API key from {key.origin} holds "
        "characters an HTTP header cannot carry (a space, a line break or a non-ASCII "
        "character): check its value",
        retryable=False,
    )


def read_secrets_file() -> dict[str, str]:
    """The secrets file's entries (empty when none is configured)."""
    location = os.environ.get(SECRETS_FILE_ENV)
    if not location:
        return {}
    path = Path(location).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ProviderError(
            f"secrets file {path} ({SECRETS_FILE_ENV}) cannot be read: {error.strerror}",
            retryable=False,
        ) from None
    entries = _parse_toml(text, path) if path.suffix == ".toml" else parse_env_file(text)
    for value in entries.values():  # every entry of a secrets file is a secret
        remember(value)
    return entries


def _parse_toml(text: str, path: Path) -> dict[str, str]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        # The decoder's message names a line and column, never a value.
        raise ProviderError(
            f"secrets file {path} is not valid TOML: {error}", retryable=False
        ) from None
    return {name: value for name, value in data.items() if isinstance(value, str)}


def parse_env_file(text: str) -> dict[str, str]:
    """``NAME=value`` lines as a dict (the common ``.env`` dialect, no interpolation)."""
    entries: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.removeprefix("export ").partition("=")
        entries[name.strip()] = _unquote(value.strip())
    return entries


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value.split(" #", 1)[0].rstrip()
