"""Pure helpers of the run loop: endings, transcript entries and decided events, failure mapping.

No Temporal calls and no I/O here, so each piece is testable on its own and safe in the sandbox.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import JsonValue
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

from otherone.config import AGENT_CALL_TOOL
from otherone.contracts import PendingEntry, RunInput, ToolCallSpec, ToolOutcome
from otherone.errors import FailureCode
from otherone.runs import (
    AgentCallResult,
    AgentFailure,
    AgentOutput,
    AgentRunResult,
    InputMessage,
    RunOutcome,
)
from otherone.shared_state import state_message
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
        # Not retried by Temporal does not mean not worth retrying for the caller: a busy
        # session frees itself (the seed marks it retryable); a 401 model error is final.
        retryable = code in _RETRYABLE and (
            not cause.non_retryable or code is FailureCode.SESSION_BUSY
        )
        return AgentFailure(code=code, message=cause.message, retryable=retryable)
    if isinstance(cause, TimeoutError):
        return AgentFailure(
            code=default,
            message=f"activity timed out ({cause.type.name if cause.type else 'timeout'})",
            retryable=True,
        )
    message = cause.message if isinstance(cause, ApplicationError) else str(cause or error)
    return AgentFailure(code=default, message=message, retryable=default in _RETRYABLE)


#: An event the activity stores only if the run's stored events lack it (see
#: `ended_before_result_events`).
IF_MISSING = "if_missing"
#: A decided "event" never stored as such: the call's tool activity failed for good, maybe with
#: an attempt its dead worker left open (a last attempt lost: no retry closes it); the activity
#: storing the decided events stores the missing ends instead (`lost_attempts`).
CLOSE_LOST_ATTEMPTS = "close_lost_tool_attempts"


class DecidedEvents:
    """Events decided in the workflow (a refused tool call, a refused agent call, refused
    messages), where no activity runs to store them: the run's next activity (prepare_call,
    call_model or finish_run) takes them and stores them before its own."""

    def __init__(self, carried: tuple[dict[str, JsonValue], ...] = ()) -> None:
        self.items: list[dict[str, JsonValue]] = list(carried)

    def add(self, *events: dict[str, JsonValue]) -> None:
        self.items.extend(events)

    def take(self) -> tuple[dict[str, JsonValue], ...]:
        taken, self.items = tuple(self.items), []
        return taken


#: Tool `started` events carry the arguments, cut to this size (events are for people).
EVENT_ARGUMENTS_CHARS = 2000


def tool_started_event(call: ToolCallSpec) -> dict[str, JsonValue]:
    """`tool_started` with the call's arguments (cut): watchers see what an `agent.spawn`, a
    handoff or a refused call asked for, as for a tool that ran."""
    return {
        "type": "tool_started",
        "tool_call_id": call.id,
        "tool_name": call.name,
        "arguments": call.arguments[:EVENT_ARGUMENTS_CHARS],
    }


def tool_completed_event(call: ToolCallSpec, error: str | None) -> dict[str, JsonValue]:
    return {
        "type": "tool_completed",
        "tool_call_id": call.id,
        "tool_name": call.name,
        "error": error,
    }


def close_lost_attempts(call: ToolCallSpec) -> dict[str, JsonValue]:
    """The `CLOSE_LOST_ATTEMPTS` marker of ``call``."""
    return {"type": CLOSE_LOST_ATTEMPTS, "tool_call_id": call.id, "tool_name": call.name}


def refused_tool_events(call: ToolCallSpec, entry: PendingEntry) -> list[dict[str, JsonValue]]:
    """Both events of a tool call answered without running (refused, invalid, not run)."""
    return [tool_started_event(call), tool_completed_event(call, entry_error(entry))]


def entry_error(entry: PendingEntry) -> str | None:
    """The error message a workflow-made tool entry carries (its content is ``{"error": …}``)."""
    try:
        content = json.loads(entry.content or "")
    except json.JSONDecodeError:
        return None
    if isinstance(content, dict) and isinstance(content.get("error"), str):
        return str(content["error"])
    failure = content.get("failure") if isinstance(content, dict) else None
    if isinstance(failure, dict) and isinstance(failure.get("message"), str):
        return str(failure["message"])
    return None


def call_result(call_id: str, target: str, result: AgentRunResult) -> AgentCallResult:
    """A child's run result, structured as the result of the agent call that started it."""
    return AgentCallResult(
        call_id=call_id,
        target=target,
        run_id=result.run_id,
        outcome=result.outcome,
        failure=result.failure,
        output=result.output,
        usage=result.usage,
        artifacts=result.artifacts,
    )


def call_refused_event(result: AgentCallResult) -> dict[str, JsonValue]:
    """`agent_call_completed` of a call refused after its check (budget, children limit)."""
    return {
        "type": "agent_call_completed",
        "call_id": result.call_id,
        "target": result.target,
        "outcome": result.outcome.value,
        "code": result.failure.code.value if result.failure else None,
    }


def unannounced_end_event(result: AgentCallResult) -> dict[str, JsonValue]:
    """`agent_call_completed` of a child that ended without announcing it (terminated from
    outside, its workflow failed): stored unless the child's own announcement is there."""
    return {
        "type": "agent_call_completed",
        "call_id": result.call_id,
        "target": result.target,
        "outcome": result.outcome.value,
        "child_run_id": result.run_id,
        "code": result.failure.code.value if result.failure else None,
        IF_MISSING: True,
    }


def ended_before_result_events(
    call: ToolCallSpec, entry: PendingEntry, *, agent_call: bool
) -> list[dict[str, JsonValue]]:
    """The events a call the run ended before still owes, each stored only if missing: its
    tool activity (or agent call check) may have stored some before the run ended."""
    events = [
        {**tool_started_event(call), IF_MISSING: True},
        {**tool_completed_event(call, entry_error(entry)), IF_MISSING: True},
    ]
    if agent_call:
        ended: dict[str, JsonValue] = {
            "type": "agent_call_completed",
            "call_id": call.id,
            "target": _call_target(call),
            "outcome": "cancelled",
            IF_MISSING: True,
        }
        events.insert(1, ended)
    return events


def _call_target(call: ToolCallSpec) -> str | None:
    try:
        arguments = json.loads(call.arguments or "{}")
    except (json.JSONDecodeError, RecursionError):
        return None
    target = arguments.get("agent") if isinstance(arguments, dict) else None
    return target if isinstance(target, str) else None


def input_entries(run_id: str, value: str | tuple[InputMessage, ...]) -> list[PendingEntry]:
    if isinstance(value, str):
        return [PendingEntry(key=f"{run_id}:input:0", role="user", content=value)]
    return [
        PendingEntry(
            key=f"{run_id}:input:{index}",
            role=message.role,
            content=message.text,
            parts=() if isinstance(message.content, str) else message.content,
        )
        for index, message in enumerate(value)
    ]


def shares_state(run: RunInput) -> bool:
    """Whether the run reads and may replace the front end's state (roots only)."""
    return run.depth == 0 and run.request.shared_state is not None


def shared_state_entry(run: RunInput) -> PendingEntry:
    """The front end's state as the model reads it, before the run's input."""
    state = run.request.shared_state or {}
    return PendingEntry(key=f"{run.run_id}:state", role="system", content=state_message(state))


def permission_denied_entry(key: str, call: ToolCallSpec) -> PendingEntry:
    message = f"tool '{call.name}' is not available to this agent; nothing was executed"
    return _tool_error_entry(key, call, ToolErrorKind.PERMISSION_DENIED, message)


def not_run_entry(call: ToolCallSpec) -> PendingEntry:
    """A later call of a sequential turn the run was cancelled before (the key is set by the
    caller, like every step's)."""
    message = "the run was cancelled; nothing was executed"
    return _tool_error_entry("", call, ToolErrorKind.CANCELLED, message)


def ended_before_result_entry(key: str, call: ToolCallSpec, outcome: str) -> PendingEntry:
    """The result of a tool call the run ended before (written by `finish_run`).

    A tool may have finished (and had its effect) just as the run ended, with its outcome lost
    to the cancellation: its stored result, when there is one, is what the session gets (the
    next run must not be told that a mail it sent was never sent); the message is the fallback.
    """
    message = f"the run ended ({outcome}) before this tool call had a result"
    return PendingEntry(
        key=key,
        role="tool",
        content=json.dumps({"error": message}),
        tool_call_id=call.id,
        tool_name=call.name,
        tool_result_of=None if call.name == AGENT_CALL_TOOL else call.id,
        error_kind=ToolErrorKind.CANCELLED,
    )


def tool_result_entry(key: str, call: ToolCallSpec, outcome: ToolOutcome) -> PendingEntry:
    if outcome.oversized:
        # Kept as an artifact, not as a tool result: the model is told so (the run ends).
        return PendingEntry(
            key=key,
            role="tool",
            content=json.dumps({"error": outcome.error}),
            tool_call_id=call.id,
            tool_name=call.name,
            error_kind=ToolErrorKind.FATAL,
        )
    if outcome.content is not None:
        # Inline: nothing was stored, the entry's writer stores the call's events with it.
        return PendingEntry(
            key=key,
            role="tool",
            content=outcome.content,
            tool_call_id=call.id,
            tool_name=call.name,
            error_kind=outcome.error_kind,
            tool_arguments=call.arguments,
        )
    if outcome.error_kind is not None and outcome.result_bytes == 0:
        # The tool activity never stored a result (e.g. it failed before running).
        return _tool_error_entry(key, call, outcome.error_kind, outcome.error)
    return PendingEntry(
        key=key,
        role="tool",
        tool_call_id=call.id,
        tool_name=call.name,
        tool_result_of=call.id,
        error_kind=outcome.error_kind,
    )


def invalid_arguments_entry(key: str, call: ToolCallSpec, message: str) -> PendingEntry:
    return _tool_error_entry(key, call, ToolErrorKind.INVALID_ARGUMENTS, message)


def _tool_error_entry(
    key: str, call: ToolCallSpec, kind: ToolErrorKind, error: str | None
) -> PendingEntry:
    """The tool entry of ``call`` that says, instead of a stored result, why it has none."""
    return PendingEntry(
        key=key,
        role="tool",
        content=json.dumps({"error": error}),
        tool_call_id=call.id,
        tool_name=call.name,
        error_kind=kind,
    )


def agent_call_entry(
    key: str, call: ToolCallSpec, result: AgentCallResult, *, stored_by_child: bool
) -> PendingEntry:
    """The child's structured result, as the `agent.call` tool result the model reads.

    A child that ended normally stored it (`finish_run`): reference it, so large outputs of
    many children never add up in one activity payload. Otherwise (refused calls, abnormal ends,
    results carried over continue-as-new) it is small or already in hand: inline it.
    """
    if stored_by_child:
        return PendingEntry(
            key=key, role="tool", tool_call_id=call.id, tool_name=call.name, tool_result_of=call.id
        )
    return PendingEntry(
        key=key,
        role="tool",
        content=result.model_dump_json(exclude_none=True),
        tool_call_id=call.id,
        tool_name=call.name,
    )
