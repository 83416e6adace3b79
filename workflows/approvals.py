"""Approval requests of one run: tool calls (and `human.ask` questions) that wait for a person.

The model-call activity decides which calls of a turn need a person (`ModelTurn.approvals`), so
predicates over arguments never run here. The run opens one request per such call, waits on a
workflow condition (no activity runs, no worker slot is held), and a decision arrives by the
`decide_approval` update. This module keeps that state; `AgentRunWorkflow` wires it in.

Rules: an unknown call id, or a different decision on a request already decided, is refused by
the update's validator; the same decision again returns the recorded one (idempotent).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import (
        ApprovalDecision,
        ApprovalNeed,
        ApprovalOutcome,
        ApprovalRequest,
        PendingEntry,
        RunRef,
        ToolCallSpec,
    )
    from otherone.tools import ToolErrorKind

#: Error types of refused decisions (the `ApplicationError.type` a client sees).
APPROVAL_NOT_FOUND = "approval_not_found"
APPROVAL_CONFLICT = "approval_conflict"
APPROVAL_NOT_ALLOWED = "approval_not_allowed"
RUN_ENDED = "run_ended"
INVALID_ARGUMENTS = "invalid_arguments"
#: Decided requests carried over continue-as-new at most (older ones stay in the store's events).
MAX_CARRIED_DECISIONS = 256

_DECIDED = {"approve": "approved", "deny": "denied", "answer": "answered"}

#: The errors of a call a person did not let run (`denied_entry`): the activity that stores the
#: call's decided events knows a denial by them (`otherone.activities.decided_events`).
DENIED_ERROR = "a person denied this call; nothing was executed"
UNANSWERED_ERROR = "nobody answered in time; nothing was executed"
UNAPPROVED_ERROR = "nobody approved this call in time; nothing was executed"


def new_request(
    ref: RunRef, call: ToolCallSpec, need: ApprovalNeed, now: datetime
) -> ApprovalRequest:
    return ApprovalRequest(
        run_id=ref.run_id,
        root_run_id=ref.root_run_id,
        agent_id=ref.agent_id,
        partition_key=ref.partition_key,
        call_id=call.id,
        tool_name=call.name,
        arguments=call.arguments,
        kind=need.kind,
        question=need.question,
        approvers=need.approvers,
        requested_at=now,
        timeout_at=now + need.timeout if need.timeout is not None else None,
        on_timeout=need.on_timeout,
    )


def outcome_of(decision: ApprovalDecision, now: datetime) -> ApprovalOutcome:
    arguments = None
    if decision.arguments is not None:
        arguments = json.dumps(decision.arguments, ensure_ascii=False, sort_keys=True)
    return ApprovalOutcome(
        decision=_DECIDED[decision.decision],
        arguments=arguments,
        reason=decision.reason,
        text=decision.text,
        decided_by=decision.identity or "unknown",
        decided_at=now,
    )


def same_decision(recorded: ApprovalOutcome, decision: ApprovalDecision) -> bool:
    """Whether ``decision`` repeats what was recorded (who and when do not matter)."""
    again = outcome_of(decision, recorded.decided_at)
    return (again.decision, again.arguments, again.reason, again.text) == (
        recorded.decision,
        recorded.arguments,
        recorded.reason,
        recorded.text,
    )


class ApprovalGate:
    """The run's approval requests by call id, and the waits on them."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._requests: dict[str, ApprovalRequest] = {}
        #: Call ids whose decision is being recorded (an update handler awaits its activity).
        self._deciding: set[str] = set()
        self._on_change = on_change

    @property
    def waiting(self) -> bool:
        return any(request.is_open for request in self._requests.values())

    def details(self) -> str:
        """What waits, for the Web UI (Markdown): one line per open request."""
        lines = [
            f"**waiting for a person**: `{request.tool_name}` (call `{request.call_id}`)"
            + (f": {request.question}" if request.question else "")
            for request in self._requests.values()
            if request.is_open
        ]
        return "\n\n".join(lines)

    def requests(self) -> tuple[ApprovalRequest, ...]:
        return tuple(self._requests.values())

    def is_gated(self, call_id: str) -> bool:
        request = self._requests.get(call_id)
        return request is not None and request.is_open

    def restore(self, carried: Iterable[ApprovalRequest]) -> None:
        for request in carried:
            self._requests[request.call_id] = request

    def carry(self) -> tuple[ApprovalRequest, ...]:
        """What the next history keeps (the run only continues as new with none open)."""
        decided = [request for request in self._requests.values() if not request.is_open]
        return tuple(decided[-MAX_CARRIED_DECISIONS:])

    def open(self, requests: Iterable[ApprovalRequest]) -> None:
        for request in requests:
            self._requests[request.call_id] = request
        self._on_change()

    # deciding ----------------------------------------------------------------------------

    def check(self, decision: ApprovalDecision) -> None:
        """The update's validator: refuse what can never be applied (no history is written)."""
        request = self._requests.get(decision.call_id)
        if request is None:
            raise ApplicationError(
                f"no approval request for call '{decision.call_id}'",
                type=APPROVAL_NOT_FOUND,
                non_retryable=True,  # the same decision is refused again: retrying is no use
            )
        if request.approvers and decision.identity not in request.approvers:
            raise ApplicationError(
                f"'{decision.identity}' may not decide call '{decision.call_id}' "
                f"(approvers: {', '.join(request.approvers)})",
                type=APPROVAL_NOT_ALLOWED,
                non_retryable=True,
            )
        expected = "answer" if request.kind in ("question", "client_tool") else None
        if expected == "answer" and decision.decision == "approve":
            wanted = "asks a question" if request.kind == "question" else "runs in the client"
            raise ApplicationError(
                f"call '{decision.call_id}' {wanted}: answer it (or deny it)",
                type=INVALID_ARGUMENTS,
                non_retryable=True,
            )
        if request.kind == "approval" and decision.decision == "answer":
            raise ApplicationError(
                f"call '{decision.call_id}' needs an approval, not an answer",
                type=INVALID_ARGUMENTS,
                non_retryable=True,
            )
        if request.decision is not None and not same_decision(request.decision, decision):
            raise ApplicationError(
                f"call '{decision.call_id}' was already {request.decision.decision} by "
                f"{request.decision.decided_by} at {request.decision.decided_at.isoformat()}",
                type=APPROVAL_CONFLICT,
                non_retryable=True,
            )

    def request(self, call_id: str) -> ApprovalRequest:
        return self._requests[call_id]

    def deciding(self, call_id: str) -> bool:
        return call_id in self._deciding

    def begin(self, call_id: str) -> None:
        self._deciding.add(call_id)

    def abandon(self, call_id: str) -> None:
        """The decision could not be recorded (e.g. edited arguments failed the schema)."""
        self._deciding.discard(call_id)

    def settle(self, call_id: str, outcome: ApprovalOutcome) -> ApprovalRequest:
        self._deciding.discard(call_id)
        decided = self._requests[call_id].model_copy(update={"decision": outcome})
        self._requests[call_id] = decided
        self._on_change()
        return decided

    async def wait(self, call_id: str) -> ApprovalRequest | None:
        """The decided request, or None when its timeout passed first (a decision being
        recorded at that moment still wins)."""
        while True:
            request = self._requests[call_id]
            if request.decision is not None:
                return request
            if call_id in self._deciding:
                await workflow.wait_condition(lambda: not self.deciding(call_id))
                continue
            left = _time_left(request.timeout_at)
            if left is not None and left <= timedelta(0):
                return None
            try:
                await workflow.wait_condition(
                    lambda: self._requests[call_id].decision is not None or self.deciding(call_id),
                    timeout=left,
                )
            except TimeoutError:
                if not self.deciding(call_id) and self._requests[call_id].decision is None:
                    return None


def _time_left(timeout_at: datetime | None) -> timedelta | None:
    return None if timeout_at is None else timeout_at - workflow.now()


# entries the model reads ---------------------------------------------------------------------


def denied_entry(call: ToolCallSpec, request: ApprovalRequest) -> PendingEntry:
    """A denied (or unanswered) call as a structured tool result: nothing was executed."""
    outcome = request.decision
    assert outcome is not None
    if outcome.decision == "timed_out":
        body = {
            "status": "timed_out",
            "error": UNAPPROVED_ERROR if request.kind == "approval" else UNANSWERED_ERROR,
        }
    else:
        body = {
            "status": "denied",
            "error": DENIED_ERROR,
            "reason": outcome.reason or "",
        }
    return PendingEntry(
        key="",
        role="tool",
        content=json.dumps(body, ensure_ascii=False),
        tool_call_id=call.id,
        tool_name=call.name,
        error_kind=ToolErrorKind.PERMISSION_DENIED,
    )


def answer_entry(call: ToolCallSpec, request: ApprovalRequest) -> PendingEntry:
    """A `human.ask` answer as the tool result; a client tool's result as the client wrote
    it (it ran the tool: its answer is the result, not a person's words about it)."""
    outcome = request.decision
    assert outcome is not None
    if request.kind == "client_tool":
        content = outcome.text or ""
    else:
        body = {"answer": outcome.text or "", "answered_by": outcome.decided_by}
        content = json.dumps(body, ensure_ascii=False)
    return PendingEntry(
        key="",
        role="tool",
        content=content,
        tool_call_id=call.id,
        tool_name=call.name,
    )
