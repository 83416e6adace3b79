"""Error tree and stable failure codes.

    OtheroneError                      every error we raise on purpose
    ├── ConfigurationError             a bad declaration (names file, table, field)
    ├── InvalidRequestError            a bad AgentRunRequest / AgentCallRequest (names the field)
    ├── IdempotencyConflictError       same idempotency key, different request
    ├── RunNotFoundError               no run with that id
    ├── RunNotActiveError              the run has finished
    ├── UnavailableError               Temporal or the store cannot be reached
    │   └── RunStuckError              a running run's workflow task keeps failing
    ├── ApprovalNotFoundError          no open or decided approval request with that call id
    ├── ApprovalConflictError          the request was already decided otherwise
    │   └── ApprovalNotAllowedError    this identity is not one of the request's approvers
    ├── RunFailedError                 a typed run (`output_type=`) did not complete
    └── OutputValidationError          its output does not validate as the output type

Failures that end a *run* are not exceptions: they are `AgentFailure` values with one of the stable
`FailureCode`s, carried in the run's result, because a run's end is data a caller inspects.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from otherone.runs import AgentRunResult


class FailureCode(StrEnum):
    """Stable failure codes (the seed's, plus ``idempotency_conflict`` for root starts)."""

    INVALID_CONFIGURATION = "invalid_configuration"
    AGENT_NOT_FOUND = "agent_not_found"
    AGENT_CALL_DENIED = "agent_call_denied"
    AGENT_CALL_CYCLE = "agent_call_cycle"
    MAX_DEPTH_EXCEEDED = "max_depth_exceeded"
    BUDGET_EXCEEDED = "budget_exceeded"
    SESSION_BUSY = "session_busy"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    MODEL_ERROR = "model_error"
    CONTEXT_ERROR = "context_error"
    TOOL_ERROR = "tool_error"
    STORAGE_ERROR = "storage_error"
    INVALID_AGENT_OUTPUT = "invalid_agent_output"
    INTERNAL_ERROR = "internal_error"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    #: Nobody decided an approval in time and its rule says the run fails.
    APPROVAL_TIMED_OUT = "approval_timed_out"
    #: A workflow started with input that is not a run request (e.g. by Temporal's own client).
    INVALID_REQUEST = "invalid_request"
    #: An input or output guardrail tripped (a tool guardrail's trip does when so configured).
    GUARDRAIL_TRIPPED = "guardrail_tripped"
    #: A guardrail could not decide: it kept raising past its attempts, timed out, returned
    #: the wrong type, or is not registered on the worker.
    GUARDRAIL_FAILED = "guardrail_failed"
    #: A ``before_model_call`` hook refused the model call (`otherone.hooks.HookRefusal`).
    HOOK_REFUSED = "hook_refused"
    #: A ``before_model_call`` hook raised, returned the wrong type or is not registered.
    HOOK_FAILED = "hook_failed"


class OtheroneError(Exception):
    """Root of every error Otherone raises on purpose."""

    code: FailureCode = FailureCode.INTERNAL_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigurationError(OtheroneError):
    """A declaration is wrong. The message says where: file, table and field when known."""

    code = FailureCode.INVALID_CONFIGURATION

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        table: str | None = None,
        field: str | None = None,
    ) -> None:
        self.file = file
        self.table = table
        self.field = field
        where = ", ".join(
            part
            for part in (
                f"file {file}" if file else "",
                f"table [{table}]" if table else "",
                f"field '{field}'" if field else "",
            )
            if part
        )
        super().__init__(f"{where}: {message}" if where else message)


class InvalidRequestError(OtheroneError):
    """A request is malformed; ``field`` names the offending field (dotted path)."""

    code = FailureCode.INVALID_CONFIGURATION

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class IdempotencyConflictError(OtheroneError):
    """The idempotency key was already used, within the partition, for a different request."""

    code = FailureCode.IDEMPOTENCY_CONFLICT

    def __init__(self, idempotency_key: str, run_id: str) -> None:
        self.idempotency_key = idempotency_key
        self.run_id = run_id
        super().__init__(
            f"idempotency_conflict: key '{idempotency_key}' was already used for run '{run_id}' "
            "with a different request"
        )


class RunNotFoundError(OtheroneError):
    """No run exists with this id (or Temporal no longer retains it)."""

    code = FailureCode.INTERNAL_ERROR

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run '{run_id}' not found")


class ScheduleNotFoundError(OtheroneError):
    """No schedule of this name in the partition (`otherone.client.schedules`)."""

    code = FailureCode.INVALID_CONFIGURATION

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"schedule '{name}' not found")


class ScheduleExistsError(OtheroneError):
    """A schedule of this name exists in the partition already (delete it, or pick a name)."""

    code = FailureCode.INVALID_CONFIGURATION

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"schedule '{name}' exists already (delete it first, or pick a name)")


class RunNotActiveError(OtheroneError):
    """The run exists but has finished, so it cannot take messages any more.

    ``status``: how it ended, when the store's record says so because Temporal no longer keeps
    the run (namespace retention: `AgentClient` then answers from the store)."""

    code = FailureCode.INVALID_CONFIGURATION

    def __init__(self, run_id: str, status: str | None = None) -> None:
        self.run_id = run_id
        self.status = status
        if status is None:
            super().__init__(f"run '{run_id}' is not running")
        else:
            super().__init__(
                f"run '{run_id}' has ended ({status}); Temporal no longer keeps it (namespace "
                "retention): it takes no messages, cancellation or decisions"
            )


class UnavailableError(OtheroneError):
    """Temporal (or the store) cannot be reached."""

    code = FailureCode.INTERNAL_ERROR


class RunStuckError(UnavailableError):
    """A running run cannot answer: its workflow task keeps failing (a worker whose code cannot
    replay it, during a deploy's overlap or after a rollback, or a bug). Temporal retries the
    task until code that can replay it takes it; nothing the run was sent meanwhile is taken."""


class ApprovalNotFoundError(OtheroneError):
    """The run has no approval request (or question) with this call id."""

    code = FailureCode.INVALID_CONFIGURATION

    def __init__(self, run_id: str, call_id: str, waiting_in: tuple[str, ...] = ()) -> None:
        self.run_id = run_id
        self.call_id = call_id
        #: Runs of the tree that wait on a call of this id (when more than one: which is meant?).
        self.waiting_in = waiting_in
        message = f"run '{run_id}' has no approval request for call '{call_id}'"
        if waiting_in:
            runs = ", ".join(f"'{run}'" for run in waiting_in)
            message += f"; runs {runs} of its tree wait on a call '{call_id}': decide it there"
        super().__init__(message)


class ApprovalConflictError(OtheroneError):
    """The request was already decided, differently (the same decision again is accepted)."""

    code = FailureCode.INVALID_CONFIGURATION


class ApprovalNotAllowedError(ApprovalConflictError):
    """The request names its approvers, and the client's identity is not one of them."""


class RunFailedError(OtheroneError):
    """A run asked for with ``output_type=`` did not complete, so it has no typed output:
    ``result`` is its `AgentRunResult` (outcome, failure code and message, usage)."""

    def __init__(self, result: AgentRunResult) -> None:
        self.result = result
        self.run_id = result.run_id
        failure = result.failure
        self.code = failure.code if failure is not None else FailureCode.INTERNAL_ERROR
        reason = f": {failure.code.value}: {failure.message}" if failure is not None else ""
        super().__init__(f"run '{result.run_id}' ended {result.outcome.value}{reason}")


class OutputValidationError(OtheroneError):
    """A completed run's output does not validate as the requested ``output_type`` (pydantic
    is the final word, after the run's JSON Schema check): ``output`` is the raw value."""

    code = FailureCode.INVALID_AGENT_OUTPUT

    def __init__(self, run_id: str, output: object, problem: str) -> None:
        self.run_id = run_id
        self.output = output
        self.problem = problem
        super().__init__(f"run '{run_id}': its output is not a valid output_type: {problem}")
