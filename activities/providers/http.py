"""What every HTTP provider shares: the client, the streaming request, and error classification.

Temporal owns retries, so nothing here retries: the transport has ``retries=0`` and every
failure becomes one classified `ProviderError`, which the model activity turns into a retryable
or non-retryable activity error (with ``next_retry_delay`` from ``retry_after``):

    ProviderError(retryable=True)
    ├── HTTP 408, 409, 429 and 5xx            honouring retry-after-ms / retry-after
    ├── connection refused/reset, stream cut  (httpx NetworkError, RemoteProtocolError)
    └── connect/read/write timeouts           (the read timeout is the longest silence allowed)
    ProviderError(retryable=False)
    ├── any other 4xx                         (401/403 name where the rejected key was read)
    └── an unusable URL or header             (UnsupportedProtocol, LocalProtocolError, ...)

The API key only lives in the headers of the one request; every message leaving this module is
scrubbed of its value.

``other`` keys of a profile (or an agent's overrides) that configure the transport, not the
request body: ``extra_headers`` (a table of extra HTTP headers, e.g. OpenRouter's
``HTTP-Referer`` and ``X-Title``) and ``timeout`` (the read timeout in seconds).
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import json
import re
import ssl
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import httpx

from otherone.activities.providers.base import ProviderError, StreamEvent
from otherone.activities.providers.secrets import ApiKey
from otherone.activities.providers.sse import ServerSentEvent, iter_sse
from otherone.credentials import is_credential_header, shown_name
from otherone.definitions import ModelProfile
from otherone.redaction import redact

CONNECT_TIMEOUT_SECONDS = 10.0
#: Longest silence inside a response. Reasoning models can think for minutes before their first
#: token; servers that send keep-alives (Anthropic pings, OpenRouter comments) reset it.
READ_TIMEOUT_SECONDS = 300.0
#: A Retry-After above this is capped, so a bogus header cannot park a run for a day.
MAX_RETRY_AFTER_SECONDS = 300.0
MAX_ERROR_BODY_BYTES = 64 * 1024
MAX_ERROR_DETAIL_CHARS = 500
RETRYABLE_STATUSES = frozenset({408, 409, 429})
#: `other` keys that configure the transport and are never sent in the body.
TRANSPORT_KEYS = frozenset({"extra_headers", "timeout"})
_NOT_RETRYABLE_TRANSPORT = (httpx.UnsupportedProtocol, httpx.LocalProtocolError)


@dataclass(frozen=True, repr=False)
class HttpCall:
    """One streaming POST: where, what, and how failures are described."""

    profile: ModelProfile
    label: str
    url: str
    headers: dict[str, str]
    body: dict[str, Any]
    key: ApiKey | None = None
    read_timeout: float = READ_TIMEOUT_SECONDS

    def error(
        self, message: str, *, retryable: bool, retry_after: float | None = None
    ) -> ProviderError:
        """A ProviderError prefixed with the call's label and scrubbed of the key."""
        text = redact(f"{self.label}: {message}")
        if self.key is not None:
            text = self.key.scrub(text)
        return ProviderError(text, retryable=retryable, retry_after=retry_after)


class StreamState(Protocol):
    """A provider's wire format: SSE events in, our stream events out."""

    done: bool

    def events(self, sse: ServerSentEvent) -> list[StreamEvent]: ...

    def finish(self) -> list[StreamEvent]: ...


@dataclass(frozen=True)
class TransportOptions:
    """The transport part of ``other``: extra headers and the read timeout."""

    headers: dict[str, str] = field(default_factory=dict)
    read_timeout: float = READ_TIMEOUT_SECONDS

    @classmethod
    def of(cls, other: Mapping[str, Any], label: str) -> TransportOptions:
        headers = other.get("extra_headers") or {}
        if not isinstance(headers, dict):
            raise ProviderError(f"{label}: other.extra_headers must be a table", retryable=False)
        # Configuration validation refuses these already; a request is the last line.
        refused = sorted(
            shown_name(name) for name, value in headers.items() if is_credential_header(name, value)
        )
        if refused:
            raise ProviderError(
                f"{label}: other.extra_headers must not carry credentials ({', '.join(refused)}); "
                "name the environment variable that holds the key in api_key_env",
                retryable=False,
            )
        timeout = other.get("timeout", READ_TIMEOUT_SECONDS)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ProviderError(f"{label}: other.timeout must be a number > 0", retryable=False)
        return cls({str(k): str(v) for k, v in headers.items()}, float(timeout))


def body_options(other: Mapping[str, Any]) -> dict[str, Any]:
    """The ``other`` keys that go into the request body."""
    return {key: value for key, value in other.items() if key not in TRANSPORT_KEYS}


def call_label(profile: ModelProfile, attempt: int) -> str:
    return f"model '{profile.id}' ({profile.provider}, attempt {attempt})"


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Built once: loading the CA bundle costs ~60 ms, too much to pay on every model call."""
    return httpx.create_ssl_context()


def new_client(read_timeout: float = READ_TIMEOUT_SECONDS) -> httpx.AsyncClient:
    """A client that never retries, never follows redirects, and bounds every wait.

    httpx's default transport makes no retries (``retries=0``); it is kept rather than passed
    explicitly so that proxy settings from the environment still apply. One client per model
    call: a call lasts seconds, pooling would save little, and nothing is left to close.
    """
    return httpx.AsyncClient(
        verify=_tls_context(),
        timeout=httpx.Timeout(read_timeout, connect=CONNECT_TIMEOUT_SECONDS),
        follow_redirects=False,
    )


async def run_stream(call: HttpCall, state: StreamState) -> AsyncIterator[StreamEvent]:
    """POST ``call``, translate its SSE events with ``state``; every failure is classified."""
    try:
        async with contextlib.aclosing(_sse_events(call)) as events:
            async for sse in events:
                for event in state.events(sse):
                    yield event
                if state.done:
                    break
        for event in state.finish():
            yield event
    except ProviderError as error:
        scrubbed = call.key.scrub(error.message) if call.key else error.message
        raise ProviderError(
            scrubbed, retryable=error.retryable, retry_after=error.retry_after
        ) from None


async def _sse_events(call: HttpCall) -> AsyncGenerator[ServerSentEvent, None]:
    try:
        async with (
            new_client(call.read_timeout) as client,
            client.stream("POST", call.url, headers=call.headers, json=call.body) as response,
        ):
            await _check_response(call, response)
            async for event in iter_sse(response.aiter_bytes()):
                yield event
    except httpx.HTTPError as error:
        raise transport_error(call, error) from None
    except httpx.InvalidURL as error:
        raise call.error(f"invalid URL {shown_url(call.url)!r}: {error}", retryable=False) from None
    except UnicodeEncodeError:
        # A header value (an `extra_headers` entry) with a non-ASCII character: httpx encodes
        # headers as ASCII; never retried, the same request fails the same way.
        raise call.error(
            "a request header holds a character HTTP headers cannot carry (non-ASCII): check "
            "other.extra_headers",
            retryable=False,
        ) from None


async def _check_response(call: HttpCall, response: httpx.Response) -> None:
    if response.status_code >= 400:
        body = await _read_limited(response)
        raise status_error(call, response.status_code, response.headers, body)
    if 300 <= response.status_code < 400:
        # Not followed: the request carries the key, and a redirect may leave the host.
        location = response.headers.get("location")
        target = f" to {shown_url(location)}" if location else ""
        raise call.error(
            f"HTTP {response.status_code}: the server redirects{target}; redirects are not "
            f"followed (the request carries the API key): set base_url of model "
            f"'{call.profile.id}' to the address it redirects to",
            retryable=False,
        )
    content_type = response.headers.get("content-type", "")
    for media, what in (("application/json", "JSON"), ("text/html", "an HTML page")):
        if content_type.startswith(media):
            body = await _read_limited(response)
            raise call.error(
                f"the server answered {what} instead of an event stream (is base_url the "
                f"API's address?): {error_detail(body)}",
                retryable=False,
            )


async def _read_limited(response: httpx.Response) -> str:
    data = b""
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= MAX_ERROR_BODY_BYTES:
            break
    return data[:MAX_ERROR_BODY_BYTES].decode("utf-8", errors="replace")


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def status_error(
    call: HttpCall, status: int, headers: Mapping[str, str], body: str
) -> ProviderError:
    """The classified error of an HTTP error response."""
    reason = httpx.codes.get_reason_phrase(status)
    head = f"HTTP {status} {reason}".rstrip()
    request_id = headers.get("x-request-id") or headers.get("request-id")
    tail = f" [request id {request_id}]" if request_id else ""
    if status in (401, 403):
        return call.error(_auth_message(call, status, body) + tail, retryable=False)
    detail = error_detail(body)
    message = f"{head}: {detail}{tail}" if detail else f"{head}{tail}"
    if not is_retryable_status(status):
        return call.error(message, retryable=False)
    return call.error(message, retryable=True, retry_after=retry_after(headers))


def _auth_message(call: HttpCall, status: int, body: str) -> str:
    """Names where the rejected key was read (env var, or secrets file and key name); never the
    key, nor a 401 body (it may echo it)."""
    if call.key is None:
        return (
            f"HTTP {status}: the server requires an API key; set api_key_env on model "
            f"'{call.profile.id}' to the name of the environment variable that holds it"
        )
    verb = "was rejected" if status == 401 else "is not allowed to do this"
    detail = error_detail(body) if status == 403 else ""
    return f"HTTP {status}: the API key from {call.key.origin} {verb}" + (
        f" ({detail})" if detail else ""
    )


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date),
    else from the rate-limit headers of an exhausted limit (OpenAI's
    ``x-ratelimit-reset-<limit>: 6m0s``, Anthropic's ``anthropic-ratelimit-<limit>-reset``:
    a time), which a 429 may send without a Retry-After."""
    seconds: float | None = None
    with contextlib.suppress(ValueError):
        if "retry-after-ms" in headers:
            seconds = float(headers["retry-after-ms"]) / 1000
        elif "retry-after" in headers:
            seconds = _seconds_or_date(headers["retry-after"])
        else:
            seconds = _limit_reset(headers)
    if seconds is None or seconds != seconds or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER_SECONDS)


#: OpenAI's reset durations: ``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``.
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _limit_reset(headers: Mapping[str, str]) -> float | None:
    """The latest reset among the limits whose remaining count is 0 (all of them when no
    remaining count is sent)."""
    resets: dict[str, float] = {}
    for name, value in headers.items():
        lowered = name.lower()
        if lowered.startswith("x-ratelimit-reset-"):
            limit, seconds = lowered.removeprefix("x-ratelimit-reset-"), _duration(value)
            remaining = headers.get(f"x-ratelimit-remaining-{limit}")
        elif lowered.startswith("anthropic-ratelimit-") and lowered.endswith("-reset"):
            limit = lowered.removeprefix("anthropic-ratelimit-").removesuffix("-reset")
            seconds = _until(value)
            remaining = headers.get(f"anthropic-ratelimit-{limit}-remaining")
        else:
            continue
        if seconds is not None and (remaining is None or remaining.strip() == "0"):
            resets[limit] = seconds
    return max(resets.values()) if resets else None


def _duration(value: str) -> float | None:
    text = value.strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def _until(value: str) -> float | None:
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _seconds_or_date(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_detail(body: str) -> str:
    """The provider's own error message from a JSON error body, else the body's start."""
    text = body.strip()
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        text = _message_of(data) or text
    # Redacted before it is cut: a key crossing the cut would survive without its end.
    return " ".join(redact(text).split())[:MAX_ERROR_DETAIL_CHARS]


def _message_of(data: Any) -> str | None:
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            return _message_of(error) or json.dumps(error)
        for key in ("message", "detail", "error"):
            if isinstance(data.get(key), str):
                return str(data[key])
    return None


def transport_error(call: HttpCall, error: httpx.HTTPError) -> ProviderError:
    """Timeouts and broken connections retry; a request that can never be sent does not."""
    detail = str(error) or "no details"
    where = f" ({shown_url(call.url)})"
    if isinstance(error, httpx.TimeoutException):
        return call.error(f"{type(error).__name__}: {detail}{where}", retryable=True)
    if isinstance(error, _NOT_RETRYABLE_TRANSPORT):
        return call.error(f"{type(error).__name__}: {detail}{where}", retryable=False)
    return call.error(f"connection failed: {type(error).__name__}: {detail}{where}", retryable=True)


def malformed_chunk(label: str, data: str, problem: str) -> ProviderError:
    """A chunk that is not the JSON it should be: retryable (a fresh attempt re-generates)."""
    return ProviderError(
        f"{label}: malformed stream chunk ({problem}): {redact(data)[:200]!r}", retryable=True
    )


def parse_chunk(label: str, data: str) -> dict[str, Any]:
    """One SSE data payload as a JSON object."""
    try:
        value = json.loads(data)
    except ValueError as error:
        raise malformed_chunk(label, data, f"invalid JSON: {error.args[0]}") from None
    if not isinstance(value, dict):
        raise malformed_chunk(label, data, "not a JSON object")
    return value


def endpoint(base_url: str, path: str) -> str:
    """``path`` added to ``base_url``'s path, its query kept after it (``?api-version=…``)."""
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))


def shown_url(url: str) -> str:
    """``url`` for messages and logs: without user info and query (they may hold secrets)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<unparsable URL>"
    if ":" in host:
        host = f"[{host}]"
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))
