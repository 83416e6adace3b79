"""Human in the loop, on the worker side: which tool calls wait for a person, and the audit.

Predicates over arguments are arbitrary Python, so they run here (in the model-call activity,
right after the model answered), never in the workflow: the turn carries the verdicts
(`ModelTurn.approvals`) and the workflow only waits. Decisions are recorded by
`record_decision` (activity `otherone.record_approval_decision`), which also checks edited
arguments against the tool's schema.

Precedence of rules for one call: the runtime policy forcing ``always`` > the agent's rule
(``always`` or ``never``) > a policy ``never`` > the tool's own (``@tool(approval=...)``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from otherone.activities.mcp_results import validate_arguments
from otherone.config import (
    AGENT_CALL_TOOL,
    AGENT_SPAWN_TOOL,
    HANDOFF_TOOL,
    HUMAN_ASK_TOOL,
    RuntimeSnapshot,
)
from otherone.contracts import (
    ApprovalNeed,
    ModelTurn,
    RecordDecisionInput,
    RunRef,
    ToolCallSpec,
)
from otherone.definitions import AgentDefinition, ApprovalRule
from otherone.mcp_servers import MCP_PREFIX
from otherone.tools import ToolError, ToolSpec
from otherone.workflows.agent_calls import AgentCallArgumentsError, parse_agent_call
from otherone.workflows.outcomes import EVENT_ARGUMENTS_CHARS

if TYPE_CHECKING:
    from otherone.activities.shared import ActivityContext

HUMAN_ASK_DEFINITION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": HUMAN_ASK_TOOL,
        "description": "Ask the user a question and wait for the answer (use it when you "
        "cannot go on without the user's input; the answer may take a while).",
        "parameters": {
            "type": "object",
            "properties": {"question": {"type": "string", "description": "The question."}},
            "required": ["question"],
            "additionalProperties": False,
        },
    },
}


def human_tools(agent: AgentDefinition) -> list[dict[str, Any]]:
    """`human.ask` when the agent's definition offers it."""
    return [HUMAN_ASK_DEFINITION] if agent.ask_human else []


class ToolLookup(Protocol):
    """The tools a worker has, by name: a `ToolRegistry`, or a plain dict of specs."""

    def get(self, name: str, /) -> ToolSpec | None: ...


def approval_needs(
    snapshot: RuntimeSnapshot,
    agent: AgentDefinition,
    tools: ToolLookup,
    calls: tuple[ToolCallSpec, ...],
    *,
    root: bool = True,
    client_tools: frozenset[str] = frozenset(),
) -> tuple[ApprovalNeed, ...]:
    """The calls of a turn that wait for a person (``tools``: the specs this worker has;
    ``root``: the run is a root, the only kind that hands off), and those of the client's own
    tools (``client_tools``), which wait for the client's result."""
    allowed = set(snapshot.tool_names_for(agent))
    handoff = root and bool(snapshot.handoff_targets(agent))
    needs = (
        _client_need(snapshot, agent, call)
        if call.name in client_tools and call.name not in allowed
        else _need(snapshot, agent, tools, call, allowed, handoff)
        for call in calls
    )
    return tuple(need for need in needs if need is not None)


def _client_need(
    snapshot: RuntimeSnapshot, agent: AgentDefinition, call: ToolCallSpec
) -> ApprovalNeed:
    """A client tool's call waits for the client's result, under the rules of ``human.ask``
    (its timeout: a front end gone for good does not hold the run for ever)."""
    rule = _first(agent.approval, [HUMAN_ASK_TOOL]) or _first(
        snapshot.policy.approval, [HUMAN_ASK_TOOL]
    )
    return _from_rule(call, rule or ApprovalRule(), kind="client_tool")


def _need(
    snapshot: RuntimeSnapshot,
    agent: AgentDefinition,
    tools: ToolLookup,
    call: ToolCallSpec,
    allowed: set[str],
    handoff: bool = True,
) -> ApprovalNeed | None:
    if call.name == HUMAN_ASK_TOOL:
        if not agent.ask_human:
            return None  # not offered: refused like any unavailable tool
        rule = _first(agent.approval, [HUMAN_ASK_TOOL]) or _first(
            snapshot.policy.approval, [HUMAN_ASK_TOOL]
        )
        return _from_rule(call, rule or ApprovalRule(), kind="question")
    keys = _rule_keys(call)
    if call.name == AGENT_SPAWN_TOOL:
        if not snapshot.may_spawn(agent):
            return None  # not offered: refused like any unavailable tool
    elif call.name == HANDOFF_TOOL:
        if not handoff:
            return None  # not offered (a child, or no target): refused, nobody need approve
    elif call.name != AGENT_CALL_TOOL and call.name not in allowed:
        return None  # refused anyway: nothing would run
    forced = _first(snapshot.policy.approval, keys)
    if forced is not None and forced.mode == "always":
        return _from_rule(call, forced)
    own = _first(agent.approval, keys)
    if own is not None:
        return _from_rule(call, own) if own.mode == "always" else None
    if forced is not None:
        return None  # the policy says never
    return _tool_need(snapshot, tools.get(call.name), call)


def _tool_need(
    snapshot: RuntimeSnapshot, spec: ToolSpec | None, call: ToolCallSpec
) -> ApprovalNeed | None:
    """The tool's own rule; a worker without the tool's code asks unless it says never."""
    schema = snapshot.tools.get(call.name)
    if spec is not None:
        required = spec.needs_approval(call.arguments)
        timeout, effect = spec.approval_timeout_seconds, spec.approval_on_timeout
    elif schema is not None:
        required = schema.approval != "never"
        timeout, effect = schema.approval_timeout_seconds, schema.approval_on_timeout
    else:
        return None
    if not required:
        return None
    rule = ApprovalRule.model_validate({"timeout": timeout, "on_timeout": effect})
    return _from_rule(call, rule)


def _rule_keys(call: ToolCallSpec) -> list[str]:
    """Rule keys for a call, most specific first (`agent.call:<target>` before `agent.call`).

    `agent.spawn` starts the same child as `agent.call`: the same rules apply to it."""
    if call.name not in (AGENT_CALL_TOOL, AGENT_SPAWN_TOOL):
        return [call.name]
    target = _argument(call.arguments, "agent")
    return ([f"{AGENT_CALL_TOOL}:{target}"] if target else []) + [AGENT_CALL_TOOL]


def _first(rules: dict[str, ApprovalRule], keys: list[str]) -> ApprovalRule | None:
    return next((rules[key] for key in keys if key in rules), None)


def _from_rule(call: ToolCallSpec, rule: ApprovalRule, kind: str = "approval") -> ApprovalNeed:
    question = None
    if kind == "question":
        question = _argument(call.arguments, "question") or call.arguments
    return ApprovalNeed.model_validate(
        {
            "call_id": call.id,
            "kind": kind,
            "question": question,
            "approvers": rule.approvers,
            "timeout": rule.timeout,
            "on_timeout": rule.on_timeout,
        }
    )


def _argument(arguments: str, name: str) -> str | None:
    try:
        parsed = json.loads(arguments or "{}")
    except (json.JSONDecodeError, RecursionError):
        return None
    value = parsed.get(name) if isinstance(parsed, dict) else None
    return value if isinstance(value, str) and value.strip() else None


def requested_events(turn: ModelTurn) -> list[dict[str, Any]]:
    """`approval_requested` per call that waits (run id, agent etc. are in the envelope)."""
    calls = {call.id: call for call in turn.tool_calls}
    return [
        {
            "type": "approval_requested",
            "call_id": need.call_id,
            "tool_name": calls[need.call_id].name,
            "arguments": calls[need.call_id].arguments[:EVENT_ARGUMENTS_CHARS],
            "kind": need.kind,
            "question": need.question,
            "approvers": list(need.approvers),
            "timeout_seconds": need.timeout.total_seconds() if need.timeout else None,
            "on_timeout": need.on_timeout,
        }
        for need in turn.approvals
        if need.call_id in calls
    ]


async def with_approvals(
    context: ActivityContext,
    ref: RunRef,
    turn: ModelTurn,
    client_tools: frozenset[str] = frozenset(),
) -> ModelTurn:
    """The turn with the calls that wait for a person (or, ``client_tools``, for the client
    that runs them), recorded as `approval_requested`."""
    if not turn.tool_calls:
        return turn
    snapshot = await context.snapshot(ref.snapshot_version)
    agent = snapshot.agent(ref.agent_id)
    needs = approval_needs(
        snapshot,
        agent,
        context.config.tools,
        turn.tool_calls,
        root=ref.depth == 0,
        client_tools=client_tools,
    )
    if not needs:
        return turn
    turn = turn.model_copy(update={"approvals": needs})
    # An audit record (and what `pending_approvals` reads): stored whatever the run's event
    # visibility, through the retrying store path. A retried model call writes it again; readers
    # key requests by (run, call id).
    await context.brief_io(context.store.append_events, ref, requested_events(turn))
    return turn


async def record_decision(context: ActivityContext, input: RecordDecisionInput) -> None:
    """Refuse edited arguments the tool would refuse; then record who decided what, when.

    The audit event is written through the store's retrying path (unlike observation events),
    and regardless of the run's event visibility.
    """
    request, outcome = input.request, input.outcome
    if outcome.arguments is not None:
        if request.tool_name.startswith(MCP_PREFIX):
            snapshot = await context.snapshot(input.ref.snapshot_version)
            _check_mcp_arguments(snapshot, request.tool_name, outcome.arguments)
        else:
            _check_arguments(context, request.tool_name, outcome.arguments)
    body: dict[str, Any] = {
        "type": "approval_decided",
        "call_id": request.call_id,
        "tool_name": request.tool_name,
        "kind": request.kind,
        "decision": outcome.decision,
        "decided_by": outcome.decided_by,
        "decided_at": outcome.decided_at.isoformat(),
    }
    if outcome.arguments is not None:
        body["arguments"] = outcome.arguments[:EVENT_ARGUMENTS_CHARS]
    if outcome.reason is not None:
        body["reason"] = outcome.reason
    if outcome.text is not None:
        body["text"] = outcome.text[:EVENT_ARGUMENTS_CHARS]
    await context.brief_io(context.store.append_events, input.ref, [body])


def _check_arguments(context: ActivityContext, tool_name: str, arguments: str) -> None:
    if tool_name == AGENT_CALL_TOOL:
        try:
            parse_agent_call(arguments)
        except AgentCallArgumentsError as error:
            raise _invalid(f"arguments: {error}") from None
        return
    spec = context.config.tools.get(tool_name) or context.memory_tools.get(tool_name)
    if spec is None:
        raise _invalid(f"arguments: tool '{tool_name}' is not registered on this worker")
    try:
        spec.validate_arguments(arguments)
    except ToolError as error:
        raise _invalid(f"arguments: {error.message}") from None


def _check_mcp_arguments(snapshot: RuntimeSnapshot, tool_name: str, arguments: str) -> None:
    """An MCP tool's schema is the one its server listed, frozen in the run's snapshot."""
    schema = snapshot.tools.get(tool_name)
    if schema is None or tool_name not in snapshot.mcp_tools:
        raise _invalid(f"arguments: tool '{tool_name}' is not among this run's MCP tools")
    try:
        validate_arguments(tool_name, schema.parameters, arguments)
    except ToolError as error:
        raise _invalid(f"arguments: {error.message}") from None


def _invalid(message: str) -> ApplicationError:
    # Benign: a person's mistake the decision's caller is told (422), not the worker's; the
    # worker logs it on one line at debug level instead of with a traceback.
    return ApplicationError(
        message,
        type="invalid_arguments",
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )
