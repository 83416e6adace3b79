"""`prepare_call`: check an `agent.call` in the seed's order (task, context size, target,
access, cycle, depth, then the authorizer) and build the child's input; a denial raises."""

from __future__ import annotations

import json

from temporalio.exceptions import ApplicationError

from otherone.activities.call_details import child_details
from otherone.activities.context import build_child_input, parent_excerpt
from otherone.activities.shared import ActivityContext, attempt_key, failure
from otherone.authorization import CallerView, decide
from otherone.config import ModelNotAllowedError, RuntimeSnapshot
from otherone.contracts import CallPlan, PrepareCallInput, RunRef
from otherone.definitions import AgentDefinition
from otherone.errors import FailureCode
from otherone.result_contracts import contract_problem
from otherone.store import EntryRow, Store
from otherone.store.records import EVENT_KEY, event_key


async def prepare_call(context: ActivityContext, input: PrepareCallInput) -> CallPlan:
    caller, request = input.caller, input.request
    await context.emit_decided(caller, input.events)  # e.g. the `agent.call` tool_started
    # Keyed: offered by every attempt (one killed before storing it leaves it to its retry),
    # stored once.
    started: dict[str, object] = {
        "type": "agent_call_started",
        "call_id": input.call_id,
        "target": request.target,
        EVENT_KEY: event_key(caller.run_id, attempt_key("started")),
    }
    if input.spawned:
        started["spawned"] = True  # the caller goes on; `agent.await` collects the result
    if input.child_run_id is not None:
        started["child_run_id"] = input.child_run_id
    await context.emit(caller, started)
    try:
        return await _check_call(context, input)
    except ApplicationError as error:
        await context.emit(
            caller,
            {
                "type": "agent_call_completed",
                "call_id": input.call_id,
                "target": request.target,
                "outcome": "failed",
                "code": error.type,
                EVENT_KEY: event_key(caller.run_id, attempt_key("refused")),
            },
        )
        raise


async def _check_call(context: ActivityContext, input: PrepareCallInput) -> CallPlan:
    caller, request, limits = input.caller, input.request, input.limits
    snapshot = await context.snapshot(caller.snapshot_version)
    caller_agent = snapshot.agent(caller.agent_id)
    if not request.task.strip():
        raise failure(FailureCode.INVALID_CONFIGURATION, "Agent call task is required")
    unusable = contract_problem(request.result_contract)
    if unusable is not None:  # trusted calls are checked by AgentClient.call_agent already
        raise failure(FailureCode.INVALID_REQUEST, f"result_contract.{unusable}")
    context_bytes = len(json.dumps(request.context).encode()) if request.context is not None else 0
    if context_bytes > limits.max_context_transfer_bytes:
        raise failure(
            FailureCode.BUDGET_EXCEEDED, "max_context_transfer_bytes: context is too large"
        )
    target = snapshot.agents.get(request.target)
    if target is None:
        raise failure(FailureCode.AGENT_NOT_FOUND, f"agent '{request.target}' is not defined")
    if not (
        caller_agent.callable_agents.allows(target.id)
        and snapshot.policy.callable_agents.allows(target.id)
    ):
        raise failure(
            FailureCode.AGENT_CALL_DENIED,
            f"agent '{caller.agent_id}' may not call '{target.id}'",
        )
    if not snapshot.policy.allow_recursive_calls and target.id in input.ancestry:
        chain = " -> ".join((*input.ancestry, target.id))
        raise failure(FailureCode.AGENT_CALL_CYCLE, f"agent call cycle: {chain}")
    _check_model(snapshot, target, input)
    if caller.depth + 1 > limits.max_depth:
        raise failure(
            FailureCode.MAX_DEPTH_EXCEEDED, f"max_depth ({limits.max_depth}) would be exceeded"
        )
    await _authorize(context, input, target)
    child_input = await _child_input(context, input, target)
    details = child_details(snapshot, target, input)
    return CallPlan(target_id=target.id, child_input=child_input, details=details)


def _check_model(
    snapshot: RuntimeSnapshot, target: AgentDefinition, input: PrepareCallInput
) -> None:
    """A call's ``model`` must be one the target allows (its own, or one of its ``models``)."""
    if input.request.model is None:
        return
    try:
        snapshot.resolve_model(target, input.caller_model_profile_id, input.request.model)
    except ModelNotAllowedError as error:
        raise failure(FailureCode.INVALID_REQUEST, f"model: {error}") from error


async def _authorize(
    context: ActivityContext, input: PrepareCallInput, target: AgentDefinition
) -> None:
    if context.authorizer is None:
        return
    caller = input.caller
    view = CallerView(
        run_id=caller.run_id,
        root_run_id=caller.root_run_id,
        agent_id=caller.agent_id,
        depth=caller.depth,
        partition_key=caller.partition_key,
        session_id=caller.session_id,
        ancestry=input.ancestry,
        action="spawn" if input.spawned else "call",
    )
    decision = await decide(context.authorizer, view, target, input.request)
    if not decision.allowed:
        raise failure(
            FailureCode.AGENT_CALL_DENIED,
            f"agent '{caller.agent_id}' may not call '{target.id}': {decision.reason}",
        )


def _parent_session(store: Store, caller: RunRef) -> tuple[list[EntryRow], str | None]:
    compaction = store.latest_compaction(caller.partition_key, caller.session_id)
    rows = store.load_entries(caller.partition_key, caller.session_id)
    return rows, compaction.summary if compaction else None


async def _child_input(
    context: ActivityContext, input: PrepareCallInput, target: AgentDefinition
) -> str:
    caller, limit = input.caller, input.limits.max_context_transfer_bytes
    excerpt = None
    if target.context.kind != "explicit_only":
        rows, summary = await context.io(_parent_session, context.store, caller)
        excerpt = parent_excerpt(rows, target.context, limit, summary)
    text = build_child_input(caller.agent_id, input.request.task, input.request.context, excerpt)
    if len(text.encode()) > limit:
        raise failure(
            FailureCode.BUDGET_EXCEEDED,
            f"max_context_transfer_bytes: the child's input is {len(text.encode())} bytes "
            f"(limit {limit})",
        )
    return text
