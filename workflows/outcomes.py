"""Pure helpers of the run loop: endings, usage and budgets, transcript entries, failure mapping.

No Temporal calls and no I/O here, so each piece is testable on its own and safe in the sandbox.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

from otherone.contracts import ModelTurn, PendingEntry, ToolCallSpec, ToolOutcome
from otherone.definitions import RuntimeLimits
from otherone.errors import FailureCode
from otherone.runs import AgentFailure, AgentOutput, InputMessage, RunOutcome, RunUsage
from otherone.tools import ToolErrorKind

_KNOWN_CODES = {code.value for code in FailureCode}
#: Failures a caller may reasonably retry (the seed's rule).
_RETRYABLE = {FailureCode.TIMED_OUT, FailureCode.MODEL_ERROR, FailureCode.SESSION_BUSY}


@dataclass(frozen=True)
class Ending:
    """How a run ends: an outcome, and a failure or an output."""

    outcome: RunOutcome
    failure: AgentFailure | None = None
    output: AgentOutput | None = None

    @classmethod
    def completed(cls, output: AgentOutput) -> Ending:
        return cls(RunOutcome.COMPLETED, output=output)

    @classmethod
    def failed(cls, failure: AgentFailure) -> Ending:
        return cls(outcome_for_failure(failure.code), failure=failure)

    @classmethod
    def of(cls, outcome: RunOutcome, failure: AgentFailure | None = None) -> Ending:
        return cls(outcome, failure=failure)


class RunEnded(Exception):
    """Raised inside the loop to end the run with a given ending (never leaves the workflow)."""

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.outcome.value)
        self.ending = ending


def outcome_for_failure(code: FailureCode) -> RunOutcome:
    if code is FailureCode.BUDGET_EXCEEDED:
        return RunOutcome.BUDGET_EXCEEDED
    if code is FailureCode.TIMED_OUT:
        return RunOutcome.TIMED_OUT
    if code is FailureCode.CANCELLED:
        return RunOutcome.CANCELLED
    return RunOutcome.FAILED


def failure_from_activity_error(
    error: ActivityError, *, default: FailureCode = FailureCode.INTERNAL_ERROR
) -> AgentFailure:
    """Map an activity's classified error (ApplicationError.type = failure code) to a failure."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type in _KNOWN_CODES:
        code = FailureCode(cause.type)
        return AgentFailure(code=code, message=cause.message, retryable=code in _RETRYABLE)
    if isinstance(cause, TimeoutError):
        return AgentFailure(
            code=default,
            message=f"activity timed out ({cause.type.name if cause.type else 'timeout'})",
            retryable=True,
        )
    message = cause.message if isinstance(cause, ApplicationError) else str(cause or error)
    return AgentFailure(code=default, message=message, retryable=default in _RETRYABLE)


class UsageCounter:
    """Usage of one run, and the budget checks that go with it."""

    def __init__(self) -> None:
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.total_tokens: int | None = None
        self.model_calls = 0
        self.tool_calls = 0
        self.agent_calls = 0

    def reserve_model_call(self, limits: RuntimeLimits) -> None:
        _check(self.model_calls + 1, limits.max_model_calls, "max_model_calls")
        self.model_calls += 1

    def reserve_tool_calls(self, count: int, limits: RuntimeLimits) -> None:
        _check(self.tool_calls + count, limits.max_tool_calls, "max_tool_calls")
        self.tool_calls += count

    def add_model_turn(self, turn: ModelTurn, limits: RuntimeLimits) -> None:
        self.input_tokens = _add(self.input_tokens, turn.input_tokens)
        self.output_tokens = _add(self.output_tokens, turn.output_tokens)
        self.total_tokens = _add(self.total_tokens, turn.total_tokens)
        if limits.token_budget is not None and self.total_tokens is not None:
            _check(self.total_tokens, limits.token_budget, "token_budget")

    def snapshot(self, duration_millis: int) -> RunUsage:
        return RunUsage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.total_tokens,
            model_calls=self.model_calls,
            tool_calls=self.tool_calls,
            agent_calls=self.agent_calls,
            duration_millis=duration_millis,
        )


def _add(left: int | None, right: int | None) -> int | None:
    if left is None:
        return right
    return left if right is None else left + right


def _check(value: int, limit: int, name: str) -> None:
    if value > limit:
        failure = AgentFailure(
            code=FailureCode.BUDGET_EXCEEDED, message=f"{name} ({limit}) exceeded"
        )
        raise RunEnded(Ending.failed(failure))


def input_entries(run_id: str, value: str | tuple[InputMessage, ...]) -> list[PendingEntry]:
    if isinstance(value, str):
        return [PendingEntry(key=f"{run_id}:input:0", role="user", content=value)]
    return [
        PendingEntry(key=f"{run_id}:input:{index}", role=message.role, content=message.content)
        for index, message in enumerate(value)
    ]


def permission_denied_entry(key: str, call: ToolCallSpec) -> PendingEntry:
    message = f"tool '{call.name}' is not available to this agent; nothing was executed"
    return PendingEntry(
        key=key,
        role="tool",
        content=json.dumps({"error": message}),
        tool_call_id=call.id,
        tool_name=call.name,
        error_kind=ToolErrorKind.PERMISSION_DENIED,
    )


def tool_result_entry(key: str, call: ToolCallSpec, outcome: ToolOutcome) -> PendingEntry:
    if outcome.error_kind is not None and outcome.result_bytes == 0:
        # The tool activity never stored a result (e.g. it failed before running).
        return PendingEntry(
            key=key,
            role="tool",
            content=json.dumps({"error": outcome.error}),
            tool_call_id=call.id,
            tool_name=call.name,
            error_kind=outcome.error_kind,
        )
    return PendingEntry(
        key=key,
        role="tool",
        tool_call_id=call.id,
        tool_name=call.name,
        tool_result_of=call.id,
        error_kind=outcome.error_kind,
    )
