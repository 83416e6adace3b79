"""Approvals and questions: what waits for a person, what was decided, and the update payload."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Literal, Self

from pydantic import JsonValue, StringConstraints, model_validator

from otherone.contracts.refs import RunRef, _Contract
from otherone.runs import unstorable_part


class ApprovalNeed(_Contract):
    """One tool call of a turn that waits for a person: an approval, or a `human.ask` question."""

    call_id: str
    kind: Literal["approval", "question", "client_tool"] = "approval"
    #: The question of a `human.ask` call.
    question: str | None = None
    approvers: tuple[str, ...] = ()
    timeout: timedelta | None = None
    on_timeout: Literal["deny", "fail"] = "deny"


class ApprovalOutcome(_Contract):
    """What was decided, by whom and when (``timed_out``: nobody decided in time)."""

    decision: Literal["approved", "denied", "answered", "timed_out"]
    #: Edited arguments (JSON text) an approval replaced the model's with.
    arguments: str | None = None
    reason: str | None = None
    #: The answer to a question.
    text: str | None = None
    decided_by: str
    decided_at: datetime


class ApprovalRequest(_Contract):
    """A tool call waiting for (or decided by) a person; `decision` None while it is open."""

    run_id: str
    root_run_id: str
    agent_id: str
    partition_key: str
    call_id: str
    tool_name: str
    arguments: str
    kind: Literal["approval", "question", "client_tool"] = "approval"
    question: str | None = None
    approvers: tuple[str, ...] = ()
    requested_at: datetime
    timeout_at: datetime | None = None
    on_timeout: Literal["deny", "fail"] = "deny"
    decision: ApprovalOutcome | None = None

    @property
    def is_open(self) -> bool:
        return self.decision is None


_DecisionText = Annotated[str, StringConstraints(min_length=1, max_length=64 * 1024)]


class ApprovalDecision(_Contract):
    """Update payload of `decide_approval`: approve (optionally with edited arguments), deny
    with a reason, or answer a `human.ask` question. ``identity`` names who decides (the
    client's identity; recorded in events and the store)."""

    call_id: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    decision: Literal["approve", "deny", "answer"]
    arguments: dict[str, JsonValue] | None = None
    reason: _DecisionText | None = None
    text: _DecisionText | None = None
    identity: Annotated[str, StringConstraints(max_length=256)] = ""

    @model_validator(mode="after")
    def _fields_fit_decision(self) -> Self:
        found = unstorable_part(self)
        if found is not None:
            where, problem = found
            raise ValueError(f"{where}: {problem}")
        if self.arguments is not None and self.decision != "approve":
            raise ValueError("arguments: only an approval may edit the arguments")
        if self.decision == "deny" and (self.reason is None or not self.reason.strip()):
            raise ValueError("reason: a denial needs a reason")
        if self.decision == "answer" and (self.text is None or not self.text.strip()):
            raise ValueError("text: an answer needs text")
        if self.decision != "answer" and self.text is not None:
            raise ValueError("text: only an answer has text")
        return self


class RecordDecisionInput(_Contract):
    """Activity input: check edited arguments against the tool's schema, then record the
    decision (event `approval_decided`)."""

    ref: RunRef
    request: ApprovalRequest
    outcome: ApprovalOutcome
