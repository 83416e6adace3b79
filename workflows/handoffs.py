"""`agent.handoff` inside a run: the conversation passes to another agent.

A handoff is decided in the workflow (no activity: the plan says who may be handed to) and takes
effect once the turn that asked for it has all its tool results: the `hand_off` activity shapes
the session for the next agent and plans the run under it, then the run **continues as new**
under that agent. Same workflow id, run id, session, deadline and budget, so a client waiting on
the root gets the last agent's answer; Temporal links the histories (one per agent) as a
continue-as-new chain, and each history's input names its agent and the handoffs so far.

Rules (checked here, answered to the model as tool results, never crashes):

- only roots hand off (`RunPlan.handoff_targets` is empty for children: their caller waits for
  the answer of the agent it called);
- the target must be allowed by the agent's ``handoff.agents`` policy and the runtime policy's
  ``handoff_agents`` (`RuntimeSnapshot.handoff_targets`), never the agent itself;
- at most one handoff per turn, at most ``max_handoffs`` per run (the one past it is refused:
  the agent then answers itself, so a loop of handoffs always ends);
- the model may pick the context policy only when the agent's policy lets it;
- the worker's authorizer hook, consulted by the `hand_off` activity before it writes anything:
  its denial (`agent_call_denied`) becomes the handoff call's result and the agent goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import cast, get_args

from pydantic import JsonValue
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from otherone.config import HANDOFF_TOOL
    from otherone.contracts import PendingEntry, RunPlan, ToolCallSpec
    from otherone.definitions import HandoffContext, HandoffPolicy
    from otherone.errors import FailureCode
    from otherone.runs import HandoffStep
    from otherone.tools import ToolErrorKind
    from otherone.workflows.agent_calls import tool_arguments

#: Longest handoff message and reason the model may pass (they are stored in the session).
MAX_MESSAGE_CHARS = 16 * 1024
MAX_REASON_CHARS = 1024
_CONTEXTS: tuple[str, ...] = get_args(HandoffContext)


class HandoffArgumentsError(ValueError):
    """The model's `agent.handoff` arguments are malformed (goes back as invalid_arguments)."""


@dataclass(frozen=True)
class HandoffArguments:
    target: str
    message: str | None = None
    reason: str | None = None
    context: HandoffContext | None = None


def parse_handoff(arguments: str) -> HandoffArguments:
    """``agent`` (required), ``message``, ``reason``, ``context`` (when offered)."""
    allowed = {"agent", "message", "reason", "context"}
    raw = tool_arguments(arguments, allowed, HandoffArgumentsError)
    target = raw.get("agent")
    if not isinstance(target, str) or not target:
        raise HandoffArgumentsError("'agent' is a required string")
    message = _optional_text(raw, "message", MAX_MESSAGE_CHARS)
    reason = _optional_text(raw, "reason", MAX_REASON_CHARS)
    context = raw.get("context")
    if context is not None and context not in _CONTEXTS:
        raise HandoffArgumentsError(f"'context' must be one of {', '.join(_CONTEXTS)}")
    # Checked against `_CONTEXTS` just above.
    return HandoffArguments(target, message, reason, cast("HandoffContext | None", context))


def _optional_text(raw: dict[str, object], name: str, limit: int) -> str | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise HandoffArgumentsError(f"'{name}' must be a string")
    if len(value) > limit:
        raise HandoffArgumentsError(f"'{name}' must be at most {limit} characters")
    return value.strip() or None


@dataclass(frozen=True)
class AcceptedHandoff:
    step: HandoffStep
    message: str | None
    last_turns: int


class Handoffs:
    """The handoffs of one run: the chain so far (carried over continue-as-new) and the one the
    current turn asked for."""

    def __init__(self, chain: tuple[HandoffStep, ...] = ()) -> None:
        self.chain = chain
        self.accepted: AcceptedHandoff | None = None

    def left(self, plan: RunPlan) -> int:
        """How many more handoffs the run may make (``max_handoffs`` minus those made)."""
        return max(0, plan.limits.max_handoffs - len(self.chain))

    @staticmethod
    def is_handoff(plan: RunPlan, call: ToolCallSpec) -> bool:
        """A call this run answers as a handoff (else: refused like any unavailable tool)."""
        return call.name == HANDOFF_TOOL and bool(plan.handoff_targets)

    def decide(self, plan: RunPlan, key: str, call: ToolCallSpec, turn: int) -> PendingEntry:
        """Accept the call (it takes effect after the turn) or refuse it; its tool result."""
        try:
            arguments = parse_handoff(call.arguments)
        except HandoffArgumentsError as error:
            return _error_entry(key, call, ToolErrorKind.INVALID_ARGUMENTS, str(error))
        policy = plan.handoff or HandoffPolicy()
        refusal = self._refusal(plan, policy, arguments)
        if refusal is not None:
            kind, message = refusal
            return _error_entry(key, call, kind, message)
        context = arguments.context or policy.context
        step = HandoffStep(
            from_agent=plan.agent_id,
            to_agent=arguments.target,
            call_id=call.id,
            turn=turn,
            context=context,
            reason=arguments.reason,
        )
        self.accepted = AcceptedHandoff(step, arguments.message, policy.last_turns)
        content = {
            "handed_off_to": arguments.target,
            "context": context,
            "note": f"Agent '{arguments.target}' continues this conversation from here.",
        }
        return PendingEntry(
            key=key,
            role="tool",
            content=json.dumps(content),
            tool_call_id=call.id,
            tool_name=call.name,
        )

    def denied(
        self,
        pending: list[PendingEntry],
        events: tuple[dict[str, JsonValue], ...],
        message: str,
    ) -> tuple[list[PendingEntry], list[dict[str, JsonValue]]]:
        """The authorizer refused the accepted handoff: the entries and events of the turn,
        with the handoff call's result and end saying so. The agent then answers itself."""
        assert self.accepted is not None
        call_id = self.accepted.step.call_id
        self.accepted = None

        def is_handoff(tool_call_id: object, tool_name: object) -> bool:
            return tool_call_id == call_id and tool_name == HANDOFF_TOOL

        refusal = json.dumps({"error": message})
        entries = [
            entry.model_copy(
                update={"content": refusal, "error_kind": ToolErrorKind.PERMISSION_DENIED}
            )
            if is_handoff(entry.tool_call_id, entry.tool_name)
            else entry
            for entry in pending
        ]
        ended: list[dict[str, JsonValue]] = [
            {**event, "error": message}
            if event.get("type") == "tool_completed"
            and is_handoff(event.get("tool_call_id"), event.get("tool_name"))
            else event
            for event in events
        ]
        return entries, ended

    def _refusal(
        self, plan: RunPlan, policy: HandoffPolicy, arguments: HandoffArguments
    ) -> tuple[ToolErrorKind, str] | None:
        if arguments.target not in plan.handoff_targets:
            allowed = ", ".join(plan.handoff_targets)
            shown = arguments.target[:80]  # the model wrote it: any length
            return (
                ToolErrorKind.PERMISSION_DENIED,
                f"handoff to agent '{shown}' is not allowed (allowed: {allowed})",
            )
        if arguments.context is not None and not policy.model_may_choose_context:
            return (
                ToolErrorKind.INVALID_ARGUMENTS,
                "'context': this agent's policy does not let the model choose the context",
            )
        if self.accepted is not None:
            return (
                ToolErrorKind.PERMISSION_DENIED,
                "only one handoff per turn: this turn already hands the conversation to "
                f"'{self.accepted.step.to_agent}'",
            )
        limit = plan.limits.max_handoffs
        if self.left(plan) == 0:
            return (
                ToolErrorKind.PERMISSION_DENIED,
                f"max_handoffs ({limit}) reached: this run cannot hand off again; "
                "answer the user yourself",
            )
        return None


def denial_of(error: ActivityError) -> str | None:
    """The authorizer's refusal of a handoff (the `hand_off` activity's `agent_call_denied`)."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type == FailureCode.AGENT_CALL_DENIED.value:
        return cause.message
    return None


def _error_entry(key: str, call: ToolCallSpec, kind: ToolErrorKind, message: str) -> PendingEntry:
    return PendingEntry(
        key=key,
        role="tool",
        content=json.dumps({"error": message}),
        tool_call_id=call.id,
        tool_name=call.name,
        error_kind=kind,
    )
