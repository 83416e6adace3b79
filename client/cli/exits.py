"""Exit codes, the errors commands raise, and how any error becomes one line and a code."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, NoReturn

from pydantic import ValidationError

from otherone.errors import (
    ApprovalConflictError,
    ApprovalNotFoundError,
    ConfigurationError,
    IdempotencyConflictError,
    InvalidRequestError,
    OtheroneError,
    RunNotActiveError,
    RunNotFoundError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    UnavailableError,
)

if TYPE_CHECKING:
    from temporalio.service import RPCError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4
EXIT_CANCELLED = 5
EXIT_TIMED_OUT = 6
EXIT_BUDGET_EXCEEDED = 7
EXIT_IDEMPOTENCY_CONFLICT = 8
EXIT_DECISION_CONFLICT = 9
EXIT_INTERRUPTED = 130

#: By `RunOutcome` value (a `StrEnum`: its members look these up), so that this module, which
#: every command and ``--help`` imports, does not import the run models.
EXIT_FOR_OUTCOME: dict[str, int] = {
    "completed": EXIT_OK,
    "failed": EXIT_FAILED,
    "cancelled": EXIT_CANCELLED,
    "timed_out": EXIT_TIMED_OUT,
    "budget_exceeded": EXIT_BUDGET_EXCEEDED,
}

EXIT_CODES_HELP = """\
exit codes:
  0    success (run completed)
  1    run failed
  2    bad usage, input or configuration
  3    run not found, or not running
  4    Temporal or the database cannot be reached
  5    run cancelled
  6    run timed out
  7    run exceeded its budget
  8    idempotency conflict (same key, different request)
  9    decision refused: already decided otherwise, or not an approver
  130  interrupted (a started run keeps going)"""


class CliError(Exception):
    """An expected failure of a command: one line for stderr and an exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived while a command was working."""


def classify_error(error: BaseException, address: str | None = None) -> tuple[int, str]:
    """Exit code and message for an exception a command raised: one line, except for a dev
    server that failed to start (its log's last lines follow)."""
    from temporalio.service import RPCError

    from otherone.store import StoreError

    # Their modules are looked up, not imported: an error of a module the command never loaded
    # cannot have been raised (and `show` would load cryptography or the dev server to report
    # a missing run).
    payload_decryption_error = _loaded_error("otherone.worker.codec", "PayloadDecryptionError")
    dev_server_error = _loaded_error("otherone.worker.devserver", "DevServerError")
    unreachable = f"cannot reach Temporal at {address or '?'} (is `otherone dev` running?)"
    code: int
    match error:
        case CliError():
            code, message = error.code, error.message
        case IdempotencyConflictError():
            code, message = EXIT_IDEMPOTENCY_CONFLICT, error.message
        case ApprovalConflictError() | ScheduleExistsError():
            code, message = EXIT_DECISION_CONFLICT, error.message
        case (
            RunNotFoundError()
            | RunNotActiveError()
            | ApprovalNotFoundError()
            | ScheduleNotFoundError()
        ):
            code, message = EXIT_NOT_FOUND, error.message
        case InvalidRequestError() | ConfigurationError():
            code, message = EXIT_USAGE, error.message
        case UnavailableError():
            code, message = EXIT_UNAVAILABLE, error.message
        case OtheroneError() if isinstance(error, payload_decryption_error):
            code, message = EXIT_USAGE, error.message
        case KeyError() if "binary/encrypted" in str(error):  # the converter meets ciphertext
            code, message = (
                EXIT_USAGE,
                "the run's payloads are encrypted: set OTHERONE_ENCRYPTION_KEYS (or "
                "OTHERONE_ENCRYPTION_KEY_FILE) to the keys its workers use",
            )
        case StoreError():
            code, message = EXIT_UNAVAILABLE, f"database: {error.message}"
        case OtheroneError():
            code, message = EXIT_FAILED, error.message
        case ValidationError():
            code, message = EXIT_USAGE, _validation_message(error)
        case RPCError():
            code, message = _classify_rpc_error(error, unreachable)
        case _ if isinstance(error, dev_server_error):
            # Not one line: the last lines of the server's log say why it did not start.
            return EXIT_UNAVAILABLE, str(error)
        case _ if _is_database_error(error):
            code, message = EXIT_UNAVAILABLE, f"database: {error}"
        case _:
            code, message = EXIT_FAILED, f"unexpected {type(error).__name__}: {error}"
    return code, one_line(message)


class _NeverRaised(Exception):
    """Stands for the error class of a module that is not loaded (no instance exists)."""


def _loaded_error(module: str, name: str) -> type[BaseException]:
    loaded = sys.modules.get(module)
    error_class: type[BaseException] = getattr(loaded, name) if loaded else _NeverRaised
    return error_class


def _classify_rpc_error(error: RPCError, unreachable: str) -> tuple[int, str]:
    from temporalio.service import RPCStatusCode

    match error.status:
        case RPCStatusCode.UNAVAILABLE | RPCStatusCode.DEADLINE_EXCEEDED:
            return EXIT_UNAVAILABLE, unreachable
        case RPCStatusCode.NOT_FOUND:
            return EXIT_NOT_FOUND, f"not found: {error.message}"
        case RPCStatusCode.INVALID_ARGUMENT:
            return EXIT_USAGE, f"rejected by Temporal: {error.message}"
        case _:
            return EXIT_FAILED, f"Temporal error ({error.status.name}): {error.message}"


def _is_database_error(error: BaseException) -> bool:
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(error, SQLAlchemyError)


def _validation_message(error: ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    location = ".".join(str(part) for part in first["loc"]) or error.title
    return f"{location}: {first['msg']}"


def one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def exit_now(code: int) -> NoReturn:
    """Flush traces and output, then leave through ``os._exit`` (no interpreter teardown)."""
    # os._exit skips the tracing SDK's flush at exit. Tracing is only ever configured through
    # `otherone.worker.telemetry`; if no command imported it, there is nothing to flush (and
    # importing it here would load OpenTelemetry and Temporal just to exit).
    telemetry = sys.modules.get("otherone.worker.telemetry")
    if telemetry is not None:
        telemetry.shutdown_tracing()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
