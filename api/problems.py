"""Errors as RFC 9457 problem details (``application/problem+json``) with stable codes.

Every error answer has ``type`` (``urn:otherone:problem:<code>``), ``title``, ``status``,
``detail``, our stable ``code`` and, for bad input, the offending ``field`` (dotted path, as
`otherone.errors.InvalidRequestError` names it). No answer carries a traceback.

| code | status | when |
| --- | --- | --- |
| ``invalid_request`` | 422 | a body, query or header value is wrong (``field`` names it) |
| ``unauthorized`` | 401 | no or an unknown bearer token |
| ``run_not_found`` | 404 | no such run, or another partition's |
| ``not_found`` | 404 | no such endpoint |
| ``approval_not_found`` | 404 | the run has no approval request with that call id |
| ``approval_not_allowed`` | 403 | the request names approvers and the token's identity is not one |
| ``approval_conflict`` | 409 | the request was already decided otherwise |
| ``method_not_allowed`` | 405 | |
| ``idempotency_conflict`` | 409 | the Idempotency-Key was used for a different request |
| ``run_not_active`` | 409 | message or cancel for a run that has ended |
| ``payload_too_large`` | 413 | a body over 4 MiB |
| ``unavailable`` | 503 | Temporal or the store cannot be reached, or no worker answered |
| ``internal_error`` | 500 | a bug: logged on the server, never detailed in the answer |
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from temporalio.service import RPCError

from otherone.errors import (
    ApprovalConflictError,
    ApprovalNotAllowedError,
    ApprovalNotFoundError,
    IdempotencyConflictError,
    InvalidRequestError,
    OtheroneError,
    RunNotActiveError,
    RunNotFoundError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    UnavailableError,
)
from otherone.store import SessionBusyError, StoreError
from otherone.store.errors import describe_store_error, is_outage

__all__ = ["PROBLEM_RESPONSES", "ApiError", "Problem", "install_problem_handlers"]

MEDIA_TYPE = "application/problem+json"
_log = logging.getLogger("otherone.api")
#: Parts of a pydantic error location that name a union member (``str``, ``tuple[...]``).
_TYPE_TAG = re.compile(r"^(str|int|float|bool|dict|list|tuple|bytes|none)$|[][,]")
#: Where FastAPI says the value came from; the field name follows.
_SOURCES = {"body", "query", "path", "header", "cookie"}


class Problem(BaseModel):
    """An error answer (RFC 9457)."""

    type: str = Field(description="urn:otherone:problem:<code>")
    title: str
    status: int
    detail: str
    code: str = Field(description="Stable error code (see the README's table).")
    field: str | None = Field(None, description="The offending input, as a dotted path.")


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "content": {MEDIA_TYPE: {}}, "description": description}
    for status, description in (
        (401, "No or an unknown bearer token"),
        (404, "No such run (or another partition's)"),
        (413, "The request body is over 4 MiB (payload_too_large)"),
        (422, "Bad input; `field` names it"),
        (503, "Temporal or the store is unavailable"),
    )
}


class ApiError(Exception):
    """An error answer raised by an endpoint."""

    def __init__(self, status: int, code: str, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = Problem(
        type=f"urn:otherone:problem:{code}",
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        code=code,
        field=field,
    )
    return JSONResponse(
        body.model_dump(exclude_none=True),
        status_code=status,
        media_type=MEDIA_TYPE,
        headers=headers,
    )


#: Errors answered the same way each time: (type, status, code, field), first match wins (a
#: subclass before its base).
_ANSWERS: tuple[tuple[type[OtheroneError], int, str, str | None], ...] = (
    (RunNotFoundError, 404, "run_not_found", None),
    (RunNotActiveError, 409, "run_not_active", None),
    (ScheduleNotFoundError, 404, "schedule_not_found", None),
    (ScheduleExistsError, 409, "schedule_exists", "name"),
    (ApprovalNotFoundError, 404, "approval_not_found", None),
    (ApprovalNotAllowedError, 403, "approval_not_allowed", None),
    (ApprovalConflictError, 409, "approval_conflict", None),
    # another live run writes to the session
    (SessionBusyError, 409, "session_busy", "session.session_id"),
    (IdempotencyConflictError, 409, "idempotency_conflict", "Idempotency-Key"),
)


def from_error(error: Exception) -> JSONResponse:
    """The answer for anything an endpoint raised."""
    if isinstance(error, ApiError):
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
        return problem(error.status, error.code, error.detail, field=error.field, headers=headers)
    if isinstance(error, InvalidRequestError):
        return problem(422, "invalid_request", error.message, field=error.field)
    for kind, status, code, field in _ANSWERS:
        if isinstance(error, kind):
            return problem(status, code, error.message, field=field)
    if isinstance(error, UnavailableError | StoreError):
        return problem(503, "unavailable", error.message)
    if is_outage(error):  # the database down or restarting, met by an endpoint's own read
        _log.warning("store unavailable: %s", describe_store_error(error))
        return problem(503, "unavailable", f"the store: {describe_store_error(error)}")
    if isinstance(error, RPCError) and "blob data size exceeds limit" in error.message.lower():
        # The request (its input, its messages) over Temporal's payload limit: not an outage.
        return problem(413, "payload_too_large", f"Temporal refused it: {error.message}")
    if isinstance(error, RPCError):
        return problem(503, "unavailable", f"Temporal: {error.message}")
    if isinstance(error, OtheroneError):
        return problem(400, str(error.code), error.message)
    _log.exception("internal error", exc_info=error)
    return problem(500, "internal_error", "internal error (logged on the server)")


def validation_problem(errors: Sequence[Any]) -> JSONResponse:
    """FastAPI's validation errors, as one problem naming the most specific field."""
    found: dict[str, list[str]] = {}
    for error in errors:
        location = [str(part) for part in error.get("loc", ())]
        source = location[0] if location and location[0] in _SOURCES else None
        if source is not None:
            location = location[1:]
        path = ".".join(part for part in location if not _TYPE_TAG.search(part))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if source == "body" and (not path or error.get("type") == "json_invalid"):
            # The body as a whole (missing, not an object, not JSON): no field inside it. (A
            # JSON error's location is a character offset, not a field.)
            path, message = "body", _body_message(error, message)
        if message not in found.setdefault(path, []):
            found[path].append(message)
    if not found:
        return problem(422, "invalid_request", "invalid request")
    field = max(found, key=lambda path: path.count(".") + bool(path))
    detail = " or ".join(found[field])
    return problem(
        422, "invalid_request", f"{field}: {detail}" if field else detail, field=field or None
    )


def _body_message(error: Mapping[str, Any], message: str) -> str:
    kind = error.get("type")
    if kind == "missing":
        return "required: a JSON object"
    if kind == "json_invalid":
        return f"not valid JSON ({error.get('ctx', {}).get('error', message)})"
    if kind in ("model_attributes_type", "dict_type", "model_type"):
        return "must be a JSON object (sent as Content-Type: application/json)"
    return message


def install_problem_handlers(app: FastAPI) -> None:
    async def on_validation(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        return validation_problem(error.errors())

    async def on_http(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, HTTPException)
        if error.status_code == 400:  # the framework could not read the body
            return problem(422, "invalid_request", f"body: {error.detail}", field="body")
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "error")
        return problem(error.status_code, code, str(error.detail), headers=error.headers)

    async def on_error(request: Request, error: Exception) -> JSONResponse:
        return from_error(error)

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    for kind in (ApiError, OtheroneError, RPCError, Exception):
        app.add_exception_handler(kind, on_error)
