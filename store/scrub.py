"""Credentials that reached stored configuration snapshots before the loader refused them.

Before 0.1.0 a secret pasted where a *name* belongs (``api_key_env = "sk-…"``, an MCP server's
``env = { TOKEN = "ghp_…" }``), in a URL (``http://sk-…@host``, ``?token=…``) or under an
option the checks missed (nested ``other`` keys, an agent's ``metadata``) was kept in
``otherone_snapshots`` (configuration, kept for ever) and in its MCP servers' error texts.
Migration 0007 rewrites such bodies with `scrubbed_snapshot_body`; a snapshot's version (its
content hash) is left as it is: runs in flight keep finding their snapshot, and the version
only names the configuration they started on.

Whatever was stored must still be rotated: a copy scrubbed here may have been read, logged or
backed up before (the README's security section says so).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from otherone.credentials import (
    CREDENTIAL_NAME_WORDS,
    CREDENTIAL_OPTION_KEYS,
    is_credential_header,
    looks_like_credential,
)

__all__ = ["REDACTED", "REDACTED_NAME", "scrubbed_snapshot_body"]

REDACTED = "<redacted>"
#: What replaces a credential found where a variable *name* belongs: still a valid name, so
#: the snapshot loads; a call that needs it says the variable is not set.
REDACTED_NAME = "REDACTED_CREDENTIAL"
_TOKEN = re.compile(r"[A-Za-z0-9_\-+/=.~:]{8,}")
_OPAQUE = re.compile(r"[A-Za-z0-9+/=_-]{24,}")
_WORD = re.compile(r"[-_.\s]+")


def scrubbed_snapshot_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a snapshot's JSON) with every credential-shaped value replaced."""
    scrubbed: dict[str, Any] = _walk(body, ())
    return scrubbed


def _walk(value: Any, path: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {
            key: _walk(item, (*path, str(key)))
            for key, item in value.items()
            if not _credential_entry(str(key), item, path)
        }
    if isinstance(value, list):
        return [_walk(item, path) for item in value]
    if isinstance(value, str):
        return _text(value, path)
    return value


def _credential_entry(key: str, value: Any, path: tuple[str, ...]) -> bool:
    """An option or header that carries a credential: left out (a placeholder would still be
    refused when the snapshot loads, and a run in flight must load it; a request without the
    credential fails with the provider's own "unauthorized")."""
    if path[-1:] == ("extra_headers",):
        return is_credential_header(key, value)
    return any(part in ("other", "metadata") for part in path) and _credential_key(key)


def _credential_key(key: str) -> bool:
    return key.lower() in CREDENTIAL_OPTION_KEYS


def _credential_query(name: str) -> bool:
    lowered = name.lower()
    return lowered in CREDENTIAL_OPTION_KEYS or any(
        word in CREDENTIAL_NAME_WORDS for word in _WORD.split(lowered)
    )


def _text(value: str, path: tuple[str, ...]) -> str:
    key = path[-1] if path else ""
    if key.endswith("_env") or (len(path) >= 2 and path[-2] in ("env", "headers_env")):
        return REDACTED_NAME if _credential_shaped(value) else value
    if "://" in value:
        value = _clean_url(value) if key in ("base_url", "url") else value
    return _TOKEN.sub(lambda match: _token(match.group(0), opaque=key == "error"), value)


def _token(token: str, *, opaque: bool) -> str:
    if looks_like_credential(token) or (opaque and _credential_shaped(token)):
        return REDACTED
    return token


def _credential_shaped(value: str) -> bool:
    """A known key shape, or an opaque run of letters and digits (a name has no such run)."""
    return looks_like_credential(value) or any(
        re.search(r"[A-Za-z]", run) and re.search(r"[0-9]", run) for run in _OPAQUE.findall(value)
    )


def _clean_url(url: str) -> str:
    """``url`` without user info and without query parameters that name a credential."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return REDACTED
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = [
        (name, item)
        for name, item in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if not _credential_query(name) and not looks_like_credential(item)
    ]
    return urllib.parse.urlunsplit(
        parts._replace(netloc=netloc, query=urllib.parse.urlencode(query))
    )
