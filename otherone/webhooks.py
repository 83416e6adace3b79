"""Completion webhooks: the URL a root run names, how its POST is signed, and how a receiver
verifies it (issue 47).

When a root run that names a webhook ends (any outcome), a POST carries the run's record (the
JSON of ``GET /v1/runs/{id}``) with these headers:

- ``Otherone-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>``: the HMAC, keyed by the
  partition's webhook secret (``otherone webhook-secret``), of ``<t>.<body bytes>``; a receiver
  recomputes it over the raw body and rejects a timestamp older than its tolerance (replays).
- ``Otherone-Delivery-Id``: the same for every attempt of one delivery (at-least-once: a
  receiver that keeps the ids it has handled does each delivery once).
- ``Otherone-Event: run.ended``, ``Otherone-Run-Id``, ``Content-Type: application/json``.

This module is pure (no I/O; pydantic for the URL type, the standard library for the rest): the
run request's and agent definition's ``webhook`` field are validated with `WebhookUrl`, and a
receiver needs only `verify_signature`.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import urllib.parse
from typing import Annotated, Final

from pydantic import AfterValidator

#: Longest webhook URL accepted (bytes of its text).
MAX_URL_LENGTH: Final = 2048
SIGNATURE_HEADER: Final = "Otherone-Signature"
DELIVERY_ID_HEADER: Final = "Otherone-Delivery-Id"
EVENT_HEADER: Final = "Otherone-Event"
RUN_ID_HEADER: Final = "Otherone-Run-Id"
#: The event a completion webhook announces.
RUN_ENDED: Final = "run.ended"
#: How old a signature's timestamp may be by default (and how far in the future).
DEFAULT_TOLERANCE_SECONDS: Final = 300


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a webhook (None: it can): http(s), a host, no user information,
    no whitespace or control characters, at most `MAX_URL_LENGTH` characters."""
    if len(url) > MAX_URL_LENGTH:
        return f"must be at most {MAX_URL_LENGTH} characters"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return "must not contain whitespace or control characters"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises on a port that is not a number
    except ValueError as error:
        return f"is not a URL ({error})"
    del port
    if parts.scheme.lower() not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if "@" in parts.netloc:
        return "must not carry credentials (user:password@): sign-in goes by the signature"
    if not parts.hostname:
        return "must name a host"
    return None


def _checked_url(url: str) -> str:
    problem = url_problem(url)
    if problem is not None:
        raise ValueError(problem)
    return url


#: A webhook URL, checked where it enters (a request, an agent definition, a schedule).
WebhookUrl = Annotated[str, AfterValidator(_checked_url)]


def shown_url(url: str) -> str:
    """``url`` as events and logs show it: scheme, host, port and path; no query or fragment
    (either may hold a receiver's token)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    hidden = "?…" if parts.query else ""
    return f"{parts.scheme}://{host}{port}{parts.path}{hidden}"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256, keyed by ``secret``, of ``<timestamp>.<body>``."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    """The `SIGNATURE_HEADER` value: ``t=<timestamp>,v1=<signature>``."""
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify_signature(
    body: bytes,
    header: str,
    secret: str | list[str],
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """Whether ``header`` (the `SIGNATURE_HEADER` value) signs ``body`` (the raw request body,
    as received) with ``secret`` (or any of a list: the current and, during a rotation's grace
    period, the previous one), at a timestamp within ``tolerance_seconds`` of ``now``.

    False for a missing or malformed header, a wrong signature, or a timestamp out of bounds.
    """
    fields = dict(part.strip().split("=", 1) for part in header.split(",") if "=" in part.strip())
    try:
        timestamp = int(fields.get("t", ""))
    except ValueError:
        return False
    given = fields.get("v1", "")
    moment = time.time() if now is None else now
    if abs(moment - timestamp) > tolerance_seconds:
        return False
    secrets = [secret] if isinstance(secret, str) else secret
    return any(hmac.compare_digest(signature(key, timestamp, body), given) for key in secrets)


__all__ = [
    "DELIVERY_ID_HEADER",
    "EVENT_HEADER",
    "MAX_URL_LENGTH",
    "RUN_ENDED",
    "RUN_ID_HEADER",
    "SIGNATURE_HEADER",
    "WebhookUrl",
    "shown_url",
    "signature_header",
    "url_problem",
    "verify_signature",
]
