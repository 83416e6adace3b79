"""What counts as a credential in configuration, so that none is ever declared or stored.

API keys are only ever *referenced* (``api_key_env``) and resolved on the worker at call time.
A profile's (or an agent's ``model_overrides``) ``other`` table is declaration: it goes into the
runtime snapshot, which the store keeps (``otherone_snapshots``). So a credential written there
would be persisted; these rules find one, and every layer refuses it: `ModelProfile` and
`ModelOverrides` validation, the TOML loader (naming file, table and field), `RuntimeConfig`, the
snapshot writer of the store, and the HTTP transport.

The rules (names and values are never echoed in errors, only the path of the entry):

* ``other.extra_headers.<Name>`` is refused when the header's **name** is a credential name
  (``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``X-Api-Key``, ``Api-Key``, ``ApiKey``)
  or any of its ``-``/``_``/``.``-separated words is one of `CREDENTIAL_NAME_WORDS` (``auth``,
  ``key``, ``token``, ``secret``, ``password``, ...; e.g. ``X-Goog-Api-Key``, ``X-Auth-Token``,
  ``Ocp-Apim-Subscription-Key``), or when its **value** starts with an HTTP auth scheme and
  credentials (``Bearer …``, ``Basic …``, ``Token …``, ``Digest …``), contains a well-known key
  shape (``sk-…``, GitHub ``ghp_…``/``github_pat_…``, GitLab ``glpat-…``, Slack ``xox?-…``, AWS
  ``AKIA…``, Google ``AIza…``, Hugging Face ``hf_…``, a JSON web token, a PEM private key) or an
  opaque run of 24+ letters and digits mixing both (a hex or base64 key; dashed words such as
  ``fine-grained-tool-streaming-2025-05-14`` or UUIDs are not such a run).
* Any other ``other`` entry (sent in the request body) is refused when its key is a credential
  name (``api_key``, ``authorization``, ``access_token``, ``client_secret``, ``password``, ...) or
  a string anywhere inside it holds a bearer token (``Bearer`` and 8+ token characters) or a
  well-known key shape (not the other schemes: "Token count" is a fine stop sequence).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "CREDENTIAL_NAME_WORDS",
    "credential_paths",
    "is_credential_header",
    "looks_like_credential",
    "snapshot_credential_paths",
]

#: Header names that carry credentials whatever their words.
CREDENTIAL_HEADER_NAMES = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "apikey"}
)
#: A header name with one of these words (split on ``-``, ``_``, ``.``) names a credential.
CREDENTIAL_NAME_WORDS = frozenset(
    {
        "auth",
        "authorization",
        "apikey",
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "credential",
        "credentials",
        "cookie",
    }
)
#: Body option keys (``other`` outside ``extra_headers``) that can only hold a credential.
CREDENTIAL_OPTION_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "x-api-key",
        "authorization",
        "proxy-authorization",
        "access_token",
        "auth_token",
        "bearer_token",
        "secret_key",
        "client_secret",
        "password",
    }
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
_NAME_SEPARATORS = re.compile(r"[-_.\s]+")


def is_credential_header(name: str, value: object) -> bool:
    """Whether a header of this name, or with this value, carries a credential."""
    lowered = name.strip().lower()
    if lowered in CREDENTIAL_HEADER_NAMES:
        return True
    if any(word in CREDENTIAL_NAME_WORDS for word in _NAME_SEPARATORS.split(lowered)):
        return True
    return isinstance(value, str) and (
        _AUTH_SCHEME.match(value) is not None
        or looks_like_credential(value)
        or _has_opaque_run(value)
    )


def looks_like_credential(value: str) -> bool:
    """A bearer token or a well-known key shape anywhere in ``value``."""
    return _BEARER.search(value) is not None or _KNOWN_SHAPES.search(value) is not None


def _has_opaque_run(value: str) -> bool:
    """24+ unbroken letters and digits with both kinds: a hex or base64 secret, not a word."""
    return any(
        re.search(r"[A-Za-z]", run) and re.search(r"[0-9]", run)
        for run in _OPAQUE_RUN.findall(value)
    )


def credential_paths(other: Mapping[str, Any]) -> list[str]:
    """Dotted paths (inside ``other``) of entries that carry a credential, by the rules above."""
    paths: list[str] = []
    for key, value in other.items():
        if key == "extra_headers" and isinstance(value, Mapping):
            paths += [
                f"extra_headers.{name}"
                for name, header_value in value.items()
                if is_credential_header(str(name), header_value)
            ]
        elif str(key).lower() in CREDENTIAL_OPTION_KEYS:
            paths.append(str(key))
        else:
            paths += [
                ".".join(part for part in (str(key), inner) if part)
                for inner, text in _strings(value)
                if looks_like_credential(text)
            ]
    return paths


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string inside a JSON value with its dotted path (keys and list indexes)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}.{index}" if path else str(index))


def snapshot_credential_paths(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(table, field) of every credential in a runtime snapshot's JSON body
    (``models.<id>`` / ``other.…`` and ``agents.<id>`` / ``model_overrides.other.…``): what
    the store must never write."""
    found: list[tuple[str, str]] = []
    for model_id, model in (body.get("models") or {}).items():
        other = model.get("other") if isinstance(model, Mapping) else None
        if isinstance(other, Mapping):
            found += [(f"models.{model_id}", f"other.{path}") for path in credential_paths(other)]
    for agent_id, agent in (body.get("agents") or {}).items():
        overrides = agent.get("model_overrides") if isinstance(agent, Mapping) else None
        other = overrides.get("other") if isinstance(overrides, Mapping) else None
        if isinstance(other, Mapping):
            found += [
                (f"agents.{agent_id}", f"model_overrides.other.{path}")
                for path in credential_paths(other)
            ]
    return found
