"""The request-body guard of the HTTP API: a size limit, and strict JSON.

Plain ASGI middleware (event streams pass untouched): a body over the limit is refused before
it is read when its Content-Length says so, else as soon as more has arrived; a JSON body that
is not strict JSON is refused naming the body.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from otherone.api.problems import problem

#: Largest request body accepted (inputs are bounded by `MAX_INPUT_BYTES` each).
MAX_BODY_BYTES = 4 * 1024 * 1024


class BodyLimit:
    """Refuse bodies over `MAX_BODY_BYTES` (a request holds at most a few inputs of
    `MAX_INPUT_BYTES`): before reading them when a Content-Length says so, else (a chunked
    body) as soon as more has arrived. A JSON body that is not strict JSON (NaN, Infinity,
    bytes that are not UTF-8, nesting deeper than a parser goes) is refused here, naming the
    body: the endpoints would take NaN as a number, and their parser gives 400s without a code.
    Plain ASGI, so event streams pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and not _at_most(length, MAX_BODY_BYTES):
            await _too_large(scope, receive, send)
            return
        try:
            body = await _read_body(receive, MAX_BODY_BYTES)
        except _ClientGone:
            return  # it left before sending its whole body: no one to answer
        if body is None:
            await _too_large(scope, receive, send)
            return
        refused = _not_strict_json(body) if _is_json(headers.get(b"content-type")) else None
        if refused is not None:
            await problem(422, "invalid_request", f"body: {refused}", field="body")(
                scope, receive, send
            )
            return
        await self.app(scope, replayed(body, receive), send)


class _ClientGone(Exception):
    """The client disconnected before the end of its request's body."""


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None once it passes ``limit`` bytes (`_ClientGone`: it left)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def replayed(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` giving ``body`` once, then what the connection says (a disconnect)."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _too_large(scope: Scope, receive: Receive, send: Send) -> None:
    answer = problem(413, "payload_too_large", f"the body must be at most {MAX_BODY_BYTES} bytes")
    await answer(scope, receive, send)


def _is_json(content_type: bytes | None) -> bool:
    media = (content_type or b"").split(b";")[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


def _not_strict_json(body: bytes) -> str | None:
    """Why ``body`` is not strict JSON (RFC 8259), or None when it is (or is empty: the
    endpoint says what is missing)."""
    if not body.strip():
        return None
    try:
        json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except RecursionError:
        return "nested too deeply"
    except json.JSONDecodeError as error:
        return f"not valid JSON ({error.msg} at character {error.pos})"
    except ValueError as error:  # `_refuse_constant`
        return str(error)
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"not valid JSON ({name} is not a JSON number)")


def _at_most(length: bytes, limit: int) -> bool:
    return length.isdigit() and int(length) <= limit
