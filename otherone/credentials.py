"""What counts as a credential in configuration, so that none is ever declared or stored.

Secrets are only ever *referenced*: ``api_key_env`` and an MCP server's ``headers_env`` name a
worker environment variable or secrets-file entry, and an MCP server's ``env``, ``headers`` and
``args`` hold ``${NAME}`` references to one, resolved on the worker at call time.
Everything else in a declaration is kept: a profile's and an override's ``other``, an agent's
``metadata`` and a model's ``base_url`` go into the runtime snapshot, which the store keeps
forever (``otherone_snapshots``), and URLs reach error messages. So a credential written there
would leak; these rules find one, and every layer refuses it: validation of `ModelProfile`,
`ModelOverrides`, `AgentDefinition` and `McpServer`, the TOML loader (naming file, table and
field), `RuntimeConfig`, the snapshot writer of the store, and the HTTP transport.

Errors name the field (``other.extra_headers.Authorization``, ``env.GITHUB_TOKEN``), never the
value: a secret pasted in the wrong place must not be copied into a log.

The rules (the table in ``tests/test_credential_rules.py`` lists examples of each):

* **Names of secrets** (``api_key_env``; the values of MCP ``headers_env``, the names in
  ``${…}`` references, the keys of MCP ``env``, ``headers`` and ``headers_env``)
  are refused when they look like a credential *value* (`is_credential_value`): a well-known key
  shape (``sk-…``, GitHub ``ghp_…``/``github_pat_…``, GitLab ``glpat-…``, Slack ``xox?-…``, AWS
  ``AKIA…``, Google ``AIza…``, Hugging Face ``hf_…``, Stripe ``sk_live_…``, a JSON web token, a
  PEM private key), a ``Bearer …`` token or an opaque run of 24+ letters and digits mixing both.
  ``OPENAI_API_KEY``, ``GITHUB_TOKEN``, ``MY_SERVICE_KEY_2`` are names and load.
* **Header names** (``other.extra_headers.<Name>``) are credentials when the name is one
  (`CREDENTIAL_HEADER_NAMES`: ``Authorization``, ``Cookie``, ``X-Api-Key``, ...) or any of its
  words (split on ``-``, ``_``, ``.``, spaces and camelCase) is one of `CREDENTIAL_NAME_WORDS`:
  ``auth``, ``key``, ``token``, ``secret``, ``password``, ``passphrase``, ``pwd``, ``pass``,
  ``session``, ``sid``, ``csrf``, ``jwt``, ``bearer``, ``signature``, ``private``, ``cred``, ...
  (``X-Goog-Api-Key``, ``X-Auth-Token``, ``X-Session-Id``, ``X-Passphrase``), however short the
  value. ``X-Title``, ``HTTP-Referer``, ``anthropic-beta``, ``OpenAI-Organization`` are not.
* **Header values** are credentials when they start with an HTTP auth scheme and credentials
  (``Bearer …``, ``Basic …``, ``Token …``, ``Digest …``) or are a credential value (above).
  Dashed words (``fine-grained-tool-streaming-2025-05-14``), UUIDs and OpenAI organization or
  project ids (``org-…``, ``proj_…``) are not.
* **Keys of body options and metadata** (``other`` outside ``extra_headers``, an agent's
  ``metadata``), at any depth, are credentials by `is_credential_key`: one of
  `CREDENTIAL_OPTION_KEYS` (``api_key``, ``token``, ``secret``, ``password``, ``access_token``,
  ``private_key``, ``credentials``, ...) or a key whose last word says so (``*_secret``,
  ``*_password``, ``*_credentials``, ``*_api_key``/``*_access_key``/``*_private_key``...,
  ``*_token`` except tokens of text such as ``eos_token`` or ``first_token``). ``max_tokens``,
  ``budget_tokens``, ``top_k``, ``prompt_cache_key``, ``session_id`` are not. Such a key is
  refused unless its value is a table (then checked entry by entry: a JSON schema's
  ``properties.password`` is fine), a boolean or null.
* **String values of body options and metadata**, at any depth, are credentials when they hold a
  bearer token (``Bearer`` and 8+ token characters) or a well-known key shape
  (`looks_like_credential`; not the other schemes nor opaque runs: "Token count" is a fine stop
  sequence, a hashed user id a fine ``user``).
* **URLs** (a model's ``base_url``, an MCP server's ``url``) are refused by
  `url_credential_parts` when they carry user information of any kind (``user@``,
  ``user:@``, ``user:password@``); a query or fragment parameter whose name is a credential
  name (the header-name rule, plus ``code`` and ``sig``) or whose value is a credential value;
  a path segment or ``;param`` holding a well-known key shape or named like a credential.
  ``?api-version=2024-10-21``, ports, IPv6 hosts and paths such as ``/v1`` or an account id are
  fine. The fix is a header: ``api_key_env`` for a model, ``headers`` with a ``${VAR}``
  reference for an MCP server.

`otherone.mcp_servers` applies these rules to the literal text of MCP ``env``, ``headers`` and
``args`` values (``is_credential_value``, URLs; for ``args`` only `looks_like_credential`, as a
commit hash is a fine argument), and refuses a credential-named ``env`` variable
(`is_credential_key`) or header (`is_credential_name`) whose value has no reference.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "CREDENTIAL_HEADER_NAMES",
    "CREDENTIAL_NAME_WORDS",
    "CREDENTIAL_OPTION_KEYS",
    "agent_credential_paths",
    "credential_paths",
    "is_credential_header",
    "is_credential_key",
    "is_credential_name",
    "is_credential_value",
    "looks_like_credential",
    "nested_credential_paths",
    "profile_credential_paths",
    "shown_name",
    "snapshot_credential_paths",
    "url_credential_parts",
]

#: Header names that carry credentials whatever their words.
CREDENTIAL_HEADER_NAMES = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "apikey"}
)
#: A header (or URL parameter) name with one of these words names a credential.
CREDENTIAL_NAME_WORDS = frozenset(
    {
        "accesstoken",
        "apikey",
        "auth",
        "authorization",
        "authtoken",
        "bearer",
        "cookie",
        "cred",
        "credential",
        "credentials",
        "csrf",
        "jsessionid",
        "jwt",
        "key",
        "pass",
        "passphrase",
        "passwd",
        "password",
        "privatekey",
        "private",
        "pwd",
        "secret",
        "session",
        "sessionid",
        "sid",
        "sig",
        "signature",
        "token",
        "xsrf",
    }
)
#: URL parameters that carry a key though their name says nothing (Azure Functions' ``code``).
_CREDENTIAL_PARAMETER_NAMES = frozenset({"code"})
#: Keys of body options and metadata (normalized: lowercase, words joined by ``_``) that can
#: only hold a credential.
CREDENTIAL_OPTION_KEYS = frozenset(
    {
        "access_key",
        "access_token",
        "api_key",
        "api_token",
        "apikey",
        "auth",
        "auth_token",
        "authorization",
        "bearer",
        "bearer_token",
        "client_secret",
        "cookie",
        "credential",
        "credentials",
        "id_token",
        "jwt",
        "pass",
        "passphrase",
        "passwd",
        "password",
        "private_key",
        "privatekey",
        "proxy_authorization",
        "pwd",
        "refresh_token",
        "secret",
        "secret_access_key",
        "secret_key",
        "session_token",
        "token",
        "x_api_key",
    }
)
#: A key whose last word is one of these holds a credential (``db_password``, ``aws_credentials``).
_SECRET_LAST_WORDS = frozenset(
    {
        "apikey",
        "authorization",
        "cookie",
        "credential",
        "credentials",
        "jwt",
        "passphrase",
        "passwd",
        "password",
        "privatekey",
        "pwd",
        "secret",
    }
)
#: ``<word>_key`` holds a credential after one of these (``openai_api_key``, ``secret_access_key``;
#: not ``prompt_cache_key`` or ``idempotency_key``).
_KEY_QUALIFIERS = frozenset(
    {"access", "account", "api", "auth", "client", "encryption", "license", "master", "private"}
    | {"secret", "service", "session", "signing", "subscription"}
)
#: ``<word>_token`` is a token of text, not a credential, after one of these (a tokenizer's
#: special tokens, ``first_token`` of a latency measure).
_TOKENIZER_WORDS = frozenset(
    {"audio", "begin", "bos", "cls", "end", "eos", "first", "image", "last", "mask", "next"}
    | {"pad", "sep", "special", "start", "stop", "unk", "video"}
)
#: A header value in the ``Authorization`` form: an HTTP auth scheme, then its credentials.
_AUTH_SCHEME = re.compile(r"^\s*(?:bearer|basic|token|digest|apikey|api-key)\s+\S", re.I)
#: A bearer token anywhere (in body options, where "token ..." or "basic ..." can be prose).
_BEARER = re.compile(r"\bbearer\s+[A-Za-z0-9._~+/=-]{8,}", re.I)
_KNOWN_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_-]{8,}"  # OpenAI, Anthropic, OpenRouter (sk-proj-, sk-ant-, sk-or-)
    r"|\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{8,}"  # Stripe-style keys
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"  # GitHub tokens
    r"|\bglpat-[A-Za-z0-9_-]{16,}"  # GitLab tokens
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bAIza[0-9A-Za-z_-]{30,}"  # Google API keys
    r"|\bhf_[A-Za-z0-9]{20,}"  # Hugging Face tokens
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\."  # JSON web tokens
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
_OPAQUE_RUN = re.compile(r"[A-Za-z0-9+/=]{24,}")
#: OpenAI organization and project ids: sent in headers, identifiers rather than secrets.
_PUBLIC_ID = re.compile(r"(?:org-|proj_)[A-Za-z0-9]{16,40}")
_NAME_SEPARATORS = re.compile(r"[-_.\s]+")
#: Where camelCase words meet (``apiKey``, ``XApiKey``, ``APIKey``).
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
#: How a path part whose name or text looks like a credential is shown (never as written).
_HIDDEN_PART = "<a name that looks like a credential>"


# --------------------------------------------------------------------------- names and values


def _words(name: str) -> list[str]:
    """The lowercase words of a name: split on ``-``, ``_``, ``.``, spaces and camelCase."""
    spaced = _CAMEL_BOUNDARY.sub("-", name.strip())
    return [word for word in _NAME_SEPARATORS.split(spaced.lower()) if word]


def is_credential_name(name: str) -> bool:
    """Whether a header or URL parameter of this name carries a credential, whatever its value."""
    if name.strip().lower() in CREDENTIAL_HEADER_NAMES:
        return True
    return any(word in CREDENTIAL_NAME_WORDS for word in _words(name))


def is_credential_header(name: str, value: object) -> bool:
    """Whether a header of this name, or with this value, carries a credential (a name that
    is a credential value itself is one pasted in the wrong place)."""
    return (
        is_credential_name(name)
        or is_credential_value(name)
        or (isinstance(value, str) and is_credential_value(value))
    )


def is_credential_value(value: str) -> bool:
    """A value that is a credential wherever it stands (a header's, a URL parameter's, or one
    written where the *name* of a secret belongs): an auth scheme and credentials, a bearer
    token, a well-known key shape or an opaque run of letters and digits."""
    return (
        _AUTH_SCHEME.match(value) is not None
        or looks_like_credential(value)
        or (_has_opaque_run(value) and _PUBLIC_ID.fullmatch(value.strip()) is None)
    )


def looks_like_credential(value: str) -> bool:
    """A bearer token or a well-known key shape anywhere in ``value`` (the rule for free text:
    body options, metadata, URL paths)."""
    return _BEARER.search(value) is not None or _KNOWN_SHAPES.search(value) is not None


def _has_opaque_run(value: str) -> bool:
    """24+ unbroken letters and digits with both kinds: a hex or base64 secret, not a word."""
    return any(
        re.search(r"[A-Za-z]", run) and re.search(r"[0-9]", run)
        for run in _OPAQUE_RUN.findall(value)
    )


def is_credential_key(key: str) -> bool:
    """Whether a body option or metadata key names a credential (see the module's rules)."""
    words = _words(key)
    if not words:
        return False
    if "_".join(words) in CREDENTIAL_OPTION_KEYS or words[-1] in _SECRET_LAST_WORDS:
        return True
    qualifier = words[-2] if len(words) > 1 else ""
    if words[-1] == "token":
        return qualifier not in _TOKENIZER_WORDS
    return words[-1] == "key" and qualifier in _KEY_QUALIFIERS


# --------------------------------------------------------------------------- declarations


def credential_paths(other: Mapping[str, Any]) -> list[str]:
    """Dotted paths (inside an ``other`` table) of entries that carry a credential: headers of
    ``extra_headers`` by the header rules, everything else by `nested_credential_paths`."""
    paths: list[str] = []
    for key, value in other.items():
        if key == "extra_headers" and isinstance(value, Mapping):
            paths += [
                f"extra_headers.{shown_name(str(name))}"
                for name, header_value in value.items()
                if is_credential_header(str(name), header_value)
            ]
        else:
            paths += nested_credential_paths({key: value})
    return paths


def nested_credential_paths(value: Any, path: str = "") -> list[str]:
    """Dotted paths (keys and list indexes) of the credentials inside a JSON value: every key
    at any depth by `is_credential_key`, every string by `looks_like_credential`."""
    return list(_walk(value, path))


def _walk(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, str):
        if looks_like_credential(value):
            yield path
    elif isinstance(value, Mapping):
        for key, item in value.items():
            name = str(key)
            child = _joined(path, shown_name(name))
            if is_credential_value(name) or (is_credential_key(name) and _holds_secret(item)):
                yield child
            else:
                yield from _walk(item, child)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _walk(item, _joined(path, str(index)))


def _holds_secret(value: Any) -> bool:
    """What a credential-named key may hold without being one: a table (its entries are
    checked in turn, e.g. a JSON schema's ``password`` property), a flag or nothing."""
    return not (isinstance(value, Mapping | bool) or value is None)


def shown_name(name: str) -> str:
    """A key or header name for messages: as written, unless it looks like a credential
    itself (then a placeholder: the secret must not be copied into the message)."""
    return _HIDDEN_PART if is_credential_value(name) else name


def _joined(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def profile_credential_paths(profile: Mapping[str, Any]) -> list[str]:
    """Fields of a model profile (its JSON form) that hold a credential: ``other.…`` entries,
    ``base_url`` and ``api_key_env`` (a key pasted in place of its name)."""
    found: list[str] = []
    other = profile.get("other")
    if isinstance(other, Mapping):
        found += [f"other.{path}" for path in credential_paths(other)]
    base_url = profile.get("base_url")
    if isinstance(base_url, str) and url_credential_parts(base_url):
        found.append("base_url")
    name = profile.get("api_key_env")
    if isinstance(name, str) and is_credential_value(name):
        found.append("api_key_env")
    return found


def agent_credential_paths(agent: Mapping[str, Any]) -> list[str]:
    """Fields of an agent definition (its JSON form) that hold a credential:
    ``model_overrides.other.…`` and ``metadata.…`` entries."""
    found: list[str] = []
    overrides = agent.get("model_overrides")
    other = overrides.get("other") if isinstance(overrides, Mapping) else None
    if isinstance(other, Mapping):
        found += [f"model_overrides.other.{path}" for path in credential_paths(other)]
    metadata = agent.get("metadata")
    if isinstance(metadata, Mapping):
        found += nested_credential_paths(metadata, "metadata")
    return found


def snapshot_credential_paths(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(table, field) of every credential in a runtime snapshot's JSON body (``models.<id>``
    and ``agents.<id>``, by `profile_credential_paths` and `agent_credential_paths`): what the
    store must never write."""
    found: list[tuple[str, str]] = []
    for model_id, model in (body.get("models") or {}).items():
        if isinstance(model, Mapping):
            found += [(f"models.{model_id}", path) for path in profile_credential_paths(model)]
    for agent_id, agent in (body.get("agents") or {}).items():
        if isinstance(agent, Mapping):
            found += [(f"agents.{agent_id}", path) for path in agent_credential_paths(agent)]
    return found


# --------------------------------------------------------------------------- URLs


def url_credential_parts(url: str) -> list[str]:
    """Where ``url`` carries a credential (``user information``, ``query parameter key``, ``a
    path segment``, ...), described without the secret; empty when it carries none."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not a URL at all: only its text can be judged
        return ["the URL"] if looks_like_credential(url) or "@" in url else []
    found: list[str] = []
    if "@" in parts.netloc:  # any user information: a user name alone can be the key
        found.append("user information (user@ or user:password@)")
    found += _parameter_parts(parts.query, "query parameter")
    found += _path_parts(parts.path)
    found += _parameter_parts(parts.fragment, "fragment parameter")
    return found


def _parameter_parts(text: str, kind: str) -> list[str]:
    """``name=value`` pairs (a query, a fragment) whose name or value is a credential."""
    found: list[str] = []
    for name, value in urllib.parse.parse_qsl(text, keep_blank_values=True):
        if is_credential_value(name):
            found.append(f"a {kind} whose name looks like a credential")
        elif _is_credential_parameter(name) or is_credential_value(value):
            found.append(f"{kind} {name}")
    return found


def _is_credential_parameter(name: str) -> bool:
    return is_credential_name(name) or name.strip().lower() in _CREDENTIAL_PARAMETER_NAMES


def _path_parts(path: str) -> list[str]:
    """Path segments holding a key shape, and ``;name=value`` parameters named like a
    credential. Only key shapes: an opaque id in a path is usually an account's, not a key."""
    found: set[str] = set()
    for segment in path.split("/"):
        first, *parameters = segment.split(";")
        if looks_like_credential(urllib.parse.unquote(first)):
            found.add("a path segment")
        if any(_is_credential_path_parameter(urllib.parse.unquote(p)) for p in parameters):
            found.add("a path parameter")
    return sorted(found)


def _is_credential_path_parameter(text: str) -> bool:
    """A ``;name=value`` (or bare ``;value``) path parameter carrying a credential."""
    name, _, value = text.partition("=")
    return (
        looks_like_credential(text)
        or _is_credential_parameter(name)
        or is_credential_value(value or name)
    )
