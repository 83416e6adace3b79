"""One redaction layer: every secret this process resolved is removed from every text it sends.

Secrets are only ever *referenced* in configuration and resolved in the process that uses them
(a provider key at call time, an MCP server's ``env``/``headers_env`` at session start, the
database password, encryption keys, API tokens). Each resolution registers the value here
(`remember`), and every text that leaves the process goes through `redact` first:

* log records (`install_log_redaction`: the record factory, for every handler),
* Temporal payloads and failures (`otherone.payloads`: activity results, errors, stack traces),
* store writes (`otherone.store.engine`: every statement's parameters, so events, transcript,
  records and snapshots, hence the HTTP API, SSE and AG-UI streams that read them),
* activity errors before a span records them (`otherone.worker.redacting`),
* tool and MCP results and provider error bodies at their source, *before* they are truncated.

Why pieces, not just whole values: a text cut at a limit (a provider's error body at 500
characters) keeps the start of a secret, and an HTTP library may quote only part of a header.
Any run of `MIN_PIECE_CHARS` or more characters of a registered secret is replaced, wherever it
starts. Finding them is a handful of ``str.find`` calls per secret (C speed), not a scan per
character: a piece of at least ``2 * BLOCK - 1`` characters always contains one of the secret's
aligned ``BLOCK``-character blocks, so only where a block occurs is the match grown to its full
extent. Values shorter than `MIN_SECRET_CHARS` are not registered (they would redact words), and
one shorter than `MIN_PIECE_CHARS` is redacted whole and only where it stands alone. Pieces are
for values shaped like generated secrets (one unbroken word); a path or a phrase (a secrets-file
entry can be either) is redacted whole only, or every file beside it would lose its name.

This module does no I/O and imports nothing of ours: workflow code and the sandbox may load it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Iterable
from typing import Any

__all__ = [
    "MIN_PIECE_CHARS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "forget_all",
    "install_log_redaction",
    "redact",
    "redact_bytes",
    "redact_json",
    "redact_keeping_json",
    "redact_urls",
    "remember",
    "remember_header",
    "scrub_exception",
    "secret_count",
]

REDACTED = "<redacted>"
#: Shorter values are not secrets worth the false positives ("true", a port, a region).
MIN_SECRET_CHARS = 8
#: Any piece of a secret this long is redacted wherever it appears.
MIN_PIECE_CHARS = 12
#: Aligned blocks searched for; any piece of ``2 * BLOCK - 1`` = 11 characters holds one.
BLOCK = MIN_PIECE_CHARS // 2


class _Registry:
    """The secrets this process resolved, as the forms a text may carry them in."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forms: frozenset[str] = frozenset()
        #: block text -> [(form, offset of the block in the form, matched only whole)]
        self._blocks: dict[str, list[tuple[str, int, bool]]] = {}

    def add(self, value: str) -> None:
        forms = {form for form in _forms_of(value) if len(form) >= MIN_SECRET_CHARS}

        if forms <= self._forms:
            return
        # A path or a phrase is matched whole only: it shares its pieces with ordinary text
        # (every file under /home/user/project, every sentence with "the project").
        whole = not _token_like(value)
        with self._lock:
            new = forms - self._forms
            blocks = {key: list(places) for key, places in self._blocks.items()}
            for form in new:
                offsets = range(0, 1) if whole else _block_offsets(form)
                for offset in offsets:
                    place = (form, offset, whole)
                    blocks.setdefault(form[offset : offset + BLOCK], []).append(place)
            # Readers see either the old or the new tables, never half of them.
            self._blocks = blocks
            self._forms = self._forms | new

    def clear(self) -> None:
        with self._lock:
            self._forms = frozenset()
            self._blocks = {}

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where pieces of secrets are in ``text`` (start, end), merged."""
        found: list[tuple[int, int]] = []
        for block, places in self._blocks.items():
            start = text.find(block)
            while start >= 0:
                found += _grown(text, start, places)
                start = text.find(block, start + 1)
        return _merged(found)

    @property
    def empty(self) -> bool:
        return not self._forms

    @property
    def count(self) -> int:
        return len(self._forms)


def _token_like(value: str) -> bool:
    """A key, token or password as generated: one unbroken word, not a path or a URL. Such a
    value shares no 12-character piece with ordinary text, so any piece of it is redacted."""
    return (
        not any(character.isspace() for character in value)
        and not value.startswith(("/", "~", "."))
        and "://" not in value
        and not re.match(r"^[A-Za-z]:\\", value)
    )


def _forms_of(value: str) -> Iterable[str]:
    """The value as a text may quote it: plain, JSON-escaped, ``repr``-escaped, URL-encoded."""
    yield value
    yield json.dumps(value)[1:-1]
    yield repr(value)[1:-1]
    yield urllib.parse.quote(value, safe="")
    yield urllib.parse.quote_plus(value, safe="")


def _block_offsets(form: str) -> range:
    """Offsets of the aligned blocks; a form shorter than a piece is matched whole, from 0."""
    if len(form) < MIN_PIECE_CHARS:
        return range(0, 1)
    return range(0, len(form) - BLOCK + 1, BLOCK)


def _grown(text: str, at: int, places: list[tuple[str, int, bool]]) -> list[tuple[int, int]]:
    """The spans of ``text`` around a block found at ``at`` that match a secret long enough."""
    spans = []
    for form, offset, whole in places:
        left, right = at, at + BLOCK
        inner_left, inner_right = offset, offset + BLOCK
        while left > 0 and inner_left > 0 and text[left - 1] == form[inner_left - 1]:
            left, inner_left = left - 1, inner_left - 1
        while right < len(text) and inner_right < len(form) and text[right] == form[inner_right]:
            right, inner_right = right + 1, inner_right + 1
        if right - left == len(form):
            if len(form) >= MIN_PIECE_CHARS or _stands_alone(text, left, right):
                spans.append((left, right))
        elif right - left >= MIN_PIECE_CHARS and not whole:
            spans.append((left, right))
    return spans


def _stands_alone(text: str, start: int, end: int) -> bool:
    """A short secret (under `MIN_PIECE_CHARS`) counts only as a word of its own: a password
    ``postgres`` must not eat the ``postgres`` of ``postgresql``."""
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return not (before.isalnum() or after.isalnum())


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


_REGISTRY = _Registry()


def remember(value: str | None) -> None:
    """Register a secret this process resolved: from now on `redact` removes it (and any
    `MIN_PIECE_CHARS`-character piece of it) from every text. Short or empty values are
    ignored; registering twice costs nothing."""
    if value and len(value.strip()) >= MIN_SECRET_CHARS:
        _REGISTRY.add(value.strip())


_AUTH_SCHEME = re.compile(r"^\s*[A-Za-z][A-Za-z0-9_-]*\s+(\S.*)$")


def remember_header(value: str | None) -> None:
    """A header value (``Bearer abc…``): the whole value and, after an auth scheme, the token
    alone (a server echoing the token without its scheme)."""
    if not value:
        return
    remember(value)
    scheme = _AUTH_SCHEME.match(value)
    if scheme is not None:
        remember(scheme.group(1))


def forget_all() -> None:
    """Empty the registry (tests only: a process never un-learns a secret)."""
    _REGISTRY.clear()


def secret_count() -> int:
    """How many forms of secrets are registered (for diagnostics; never the values)."""
    return _REGISTRY.count


def redact(text: str) -> str:
    """``text`` with every piece of a registered secret replaced by ``<redacted>``."""
    if _REGISTRY.empty or not text:
        return text
    spans = _REGISTRY.spans(text)
    if not spans:
        return text
    parts, last = [], 0
    for start, end in spans:
        parts += [text[last:start], REDACTED]
        last = end
    parts.append(text[last:])
    return "".join(parts)


def redact_bytes(data: bytes) -> bytes:
    """`redact` for encoded text (payloads): bytes that are not UTF-8 pass through as they are."""
    if _REGISTRY.empty or not data:
        return data
    text = data.decode("utf-8", errors="surrogateescape")
    redacted = redact(text)
    return data if redacted is text else redacted.encode("utf-8", errors="surrogateescape")


def redact_json(value: Any) -> Any:
    """Every string inside a JSON-like value (dict keys included) redacted."""
    if _REGISTRY.empty:
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_json(key): redact_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_json(item) for item in value)
    return value


def redact_keeping_json(text: str) -> str:
    """`redact` for a text that may be JSON: when cutting a piece out of the text would break
    its JSON (a secret holding a quote or backslash, cut between escape and character), the
    strings inside the parsed value are redacted instead, so the result still parses."""
    redacted = redact(text)
    if redacted is text or text.lstrip()[:1] not in ("{", "[", '"'):
        return redacted
    try:
        json.loads(redacted)
    except ValueError:
        try:
            value = json.loads(text)
        except ValueError:
            return redacted  # it was no JSON to begin with
        return json.dumps(redact_json(value), ensure_ascii=False)
    return redacted


def scrub_exception(error: BaseException) -> BaseException:
    """``error`` and the exceptions chained to it, redacted in place (their ``args``, and a
    Temporal error's message and details), so whoever formats it next (a span recording it, a
    log line, Temporal's failure converter) sees no secret. Returns ``error``."""
    if _REGISTRY.empty:
        return error
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        _scrub_one(current)
        current = current.__cause__ or current.__context__
    return error


def _scrub_one(error: BaseException) -> None:
    try:
        error.args = tuple(redact_json(argument) for argument in error.args)
        message = getattr(error, "_message", None)
        if isinstance(message, str):
            error._message = redact(message)  # type: ignore[attr-defined]
        details = getattr(error, "_details", None)
        if isinstance(details, tuple | list):
            error._details = redact_json(tuple(details))  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type that refuses new attributes
        pass


#: A URL in free text: scheme, then anything up to a space, quote or bracket.
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{1,20})://([^\s'\"<>`]+)")


def redact_urls(text: str) -> str:
    """URLs in ``text`` without their user info and query string (either may hold a secret)."""
    if "://" not in text:
        return text
    return _URL.sub(_shown_url, text)


def _shown_url(match: re.Match[str]) -> str:
    scheme, rest = match.group(1), match.group(2)
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = authority.rsplit("@", 1)[1]
    path = path.split("?", 1)[0].split("#", 1)[0]
    if not slash:
        authority = authority.split("?", 1)[0].split("#", 1)[0]
    return f"{scheme}://{authority}{slash}{path}"


# --------------------------------------------------------------------------- logging

_installed = threading.Lock()
_factory_installed = False


def install_log_redaction() -> None:
    """Redact every log record of this process, whichever handler writes it: its message (with
    its arguments), its exception text, URLs without user info or query. Installed once."""
    global _factory_installed
    with _installed:
        if _factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            redact_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _factory_installed = True


def redact_record(record: logging.LogRecord) -> None:
    """``record`` with its message formatted, redacted, and its traceback text redacted."""
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: logging reports it itself later
        return
    shown = redact(redact_urls(message))
    if shown != message or record.args:
        record.msg, record.args = shown, None
    if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
        record.exc_text = redact(redact_urls(logging.Formatter().formatException(record.exc_info)))
