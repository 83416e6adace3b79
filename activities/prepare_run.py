"""`prepare_run`: pin the run's snapshot, take its session lease, record it as running and plan
it (model, limits, tools, reachable agents) for the workflow."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from otherone.activities.guardrail_plans import guardrail_plan
from otherone.activities.mcp_unavailable import unavailable_bodies, unavailable_servers
from otherone.activities.run_hooks import on_run_start
from otherone.activities.shared import ActivityContext, failure
from otherone.activities.spend import check_spend_limit
from otherone.config import AgentNotFoundError, ModelNotAllowedError, RuntimeSnapshot
from otherone.contracts import (
    PREPARE_DEADLINE_PASSED,
    RUN_ID_USED,
    PlannedModel,
    PrepareRunInput,
    RunPlan,
    RunRef,
    ToolSettings,
    WebhookPlan,
)
from otherone.definitions import AgentDefinition, ModelProfile, RuntimeLimits
from otherone.errors import FailureCode
from otherone.model_modalities import request_parts_problem
from otherone.result_contracts import contract_problem
from otherone.runs import RunRecord, RunStatus
from otherone.store import SessionBusyError
from otherone.store.errors import RunIdUsed
from otherone.store.lifecycle import SessionLease
from otherone.store.records import EVENT_KEY, event_key

LEASE_SLACK = timedelta(minutes=1)


async def prepare_run(context: ActivityContext, input: PrepareRunInput) -> RunPlan:
    if input.give_up_at is not None and datetime.now(UTC) >= input.give_up_at:
        raise ApplicationError(
            "the run's deadline passed while it was being prepared",
            type=PREPARE_DEADLINE_PASSED,
            non_retryable=True,
        )
    snapshot = await context.snapshot(input.ref.snapshot_version or None)
    try:
        agent = snapshot.agent(input.ref.agent_id)
        limits = snapshot.limits.tightened(input.request.limits)
    except AgentNotFoundError as error:
        raise failure(FailureCode.AGENT_NOT_FOUND, error.message) from error
    except ValueError as error:
        raise failure(FailureCode.INVALID_CONFIGURATION, str(error)) from error
    fetched = snapshot.mcp_instructions.get(agent.id)
    if fetched is not None and fetched.error is not None:  # see `otherone.mcp_prompts`
        raise failure(FailureCode.INVALID_CONFIGURATION, f"instructions_from: {fetched.error}")
    unusable = contract_problem(input.result_contract or input.request.result_contract)
    if unusable is not None:  # AgentClient refuses it; a plain Temporal client may not have
        raise failure(FailureCode.INVALID_REQUEST, f"result_contract.{unusable}")
    try:
        profile = snapshot.resolve_model(agent, input.caller_model_profile_id, input.request.model)
    except ModelNotAllowedError as error:
        raise failure(FailureCode.INVALID_REQUEST, f"model: {error}") from error
    parts_problem = request_parts_problem(input.request, profile)
    if parts_problem is not None:  # before any model call: not a provider's 400 later
        raise failure(FailureCode.INVALID_REQUEST, parts_problem)
    # A partition past its spend limit for the day starts nothing (children included).
    await check_spend_limit(context, input.ref.partition_key)
    # Before anything is stored: a refused run leaves no lease and no running record.
    await on_run_start(context, snapshot, agent, input.ref, input.request.metadata)
    timeout = _run_timeout(agent.limits.timeout_millis, limits, root=input.ref.depth == 0)
    # The lease expires with the run (plus slack for finishing), so a run terminated from
    # outside cannot lock its session for longer than it could have run.
    lease_until = datetime.now(UTC) + timeout + LEASE_SLACK
    if input.inherited_deadline is not None:
        lease_until = min(lease_until, input.inherited_deadline + LEASE_SLACK)
    ref = input.ref.model_copy(update={"snapshot_version": snapshot.version})
    started = run_started_body(ref)
    # Stored with the run's start: a person watching sees at once why tools are missing.
    unavailable = unavailable_servers(snapshot, agent)
    lease = SessionLease(
        ref.partition_key,
        ref.session_id,
        ref.run_id,
        lease_until,
        internal=input.internal_session,
    )
    record = _running_record(input, agent.version).model_copy(
        update={"mcp_unavailable": unavailable, "snapshot_version": snapshot.version}
    )
    announced = [started, *unavailable_bodies(ref.run_id, unavailable)]
    try:
        try:
            await _start(context, ref, lease, record, announced)
        except SessionBusyError as busy:
            if not await _ended_holder(context, busy.holder, ref):
                raise
            await _start(context, ref, lease, record, announced)  # its lease was released
    except SessionBusyError as error:
        raise failure(FailureCode.SESSION_BUSY, error.message) from error
    except RunIdUsed as error:
        # Not retryable, and the workflow ends without writing anything (the id's record,
        # events and transcript are the ended run's).
        raise ApplicationError(error.message, type=RUN_ID_USED, non_retryable=True) from None
    tools = {
        name: settings
        for name in snapshot.tool_names_for(agent)
        if (settings := _tool_settings(context, snapshot, name)) is not None
    }
    return RunPlan(
        snapshot_version=snapshot.version,
        agent_id=agent.id,
        agent_version=agent.version,
        **model_plan(snapshot, profile),
        limits=limits,
        max_iterations=min(
            _max_iterations(agent.limits.max_iterations, limits),
            input.max_iterations or limits.max_iterations_per_run,
        ),
        result_limit_bytes=min(
            agent.limits.max_result_bytes or limits.max_result_bytes, limits.max_result_bytes
        ),
        timeout=timeout,
        parallel_tool_calls=bool(agent.model_overrides.parallel_tool_calls),
        tools=tools,
        reachable_agents=tuple(target.id for target in snapshot.reachable_agents(agent)),
        # Only a root hands its conversation over (a caller awaits its child's own answer).
        handoff_targets=tuple(target.id for target in snapshot.handoff_targets(agent))
        if input.ref.depth == 0
        else (),
        handoff=agent.handoff if input.ref.depth == 0 else None,
        continue_as_new_after_turns=snapshot.policy.continue_as_new_after_turns,
        output_retries=_output_retries(input, snapshot.policy.output_retries),
        spawn=snapshot.may_spawn(agent),
        spawned_on_exit=agent.spawned_on_exit,
        sleep=snapshot.may_sleep(agent),
        mcp_unavailable=unavailable,
        guardrails=guardrail_plan(snapshot, agent, tools),
        webhook=webhook_plan(input, snapshot, agent),
    )


def webhook_plan(
    input: PrepareRunInput, snapshot: RuntimeSnapshot, agent: AgentDefinition
) -> WebhookPlan | None:
    """A root's webhook: its request's, else its agent's default (children send none)."""
    if input.ref.parent_run_id is not None:
        return None
    url = input.request.webhook or agent.webhook
    if url is None:
        return None
    policy = snapshot.policy
    return WebhookPlan(
        url=url, attempts=policy.webhook_attempts, first_retry=policy.webhook_first_retry
    )


def model_plan(snapshot: RuntimeSnapshot, profile: ModelProfile) -> dict[str, Any]:
    """A plan's model fields: the run's model, its attempts, and the profiles that answer a
    turn it could not (`RuntimeSnapshot.model_chain`)."""
    return {
        "model_profile_id": profile.id,
        "model_label": model_label(profile),
        "model_attempts": profile.max_attempts,
        "fallbacks": tuple(
            PlannedModel(
                profile_id=fallback.id, label=model_label(fallback), attempts=fallback.max_attempts
            )
            for fallback in snapshot.model_chain(profile)[1:]
        ),
    }


def model_label(profile: ModelProfile) -> str:
    return f"{profile.provider}/{profile.model}"


def _tool_settings(
    context: ActivityContext, snapshot: RuntimeSnapshot, name: str
) -> ToolSettings | None:
    """How the workflow runs a tool: a user tool's from the snapshot, or a built-in's."""
    source = snapshot.tools.get(name) or context.memory_tools.get(name)
    if source is None:
        return None
    return ToolSettings(timeout_seconds=source.timeout_seconds, max_attempts=source.max_attempts)


async def _ended_holder(context: ActivityContext, holder: str, ref: RunRef) -> bool:
    """Whether the session's lease holder has ended in Temporal (terminated from outside: its
    finish never gave the lease back, which then blocked the session until the lease
    expired); if so its lease is released. A holder Temporal does not know (retention) has
    ended too; a failed look says nothing (the session stays busy)."""
    try:
        description = await activity.client().get_workflow_handle(holder).describe()
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            return False
    except Exception:
        return False
    else:
        if description.status == WorkflowExecutionStatus.RUNNING:
            return False
    activity.logger.warning(
        "session %s: its holder %s has ended; lease released", ref.session_id, holder
    )
    await context.io(context.store.release_session, ref.partition_key, ref.session_id, holder)
    return True


async def _start(
    context: ActivityContext,
    ref: RunRef,
    lease: SessionLease,
    record: RunRecord,
    started: list[dict[str, Any]],
) -> None:
    """Take the session's lease, record the run as running and store ``started`` (its
    `run_started` and what else it announces): one transaction (`Store.start_run`). A
    cancellation does not leave the store call behind: the call goes on in its thread and
    could take the lease after the run has ended (and its finish released nothing), locking
    the session until the lease expires. So a cancelled prepare lets the call end, gives back
    whatever lease it took, and only then stops."""
    store = context.store
    starting = asyncio.ensure_future(
        context.io_with_events(
            ref,
            started,
            lambda bodies: store.start_run(lease, record, ref, bodies or []),
            brief=True,
        )
    )
    try:
        await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await starting
            if not _attempt_only_cut_short():
                await context.io(
                    store.release_session, ref.partition_key, ref.session_id, ref.run_id
                )
        raise


def _attempt_only_cut_short() -> bool:
    """Whether this attempt timed out or its worker shuts down, the run going on: Temporal runs
    prepare again for the same run, which takes the lease as its own (leases are held by run
    id), so giving it back here could free it under that attempt."""
    details = activity.cancellation_details()
    return details is not None and (details.timed_out or details.worker_shutdown)


def _running_record(input: PrepareRunInput, agent_version: int) -> RunRecord:
    ref = input.ref
    return RunRecord(
        run_id=ref.run_id,
        root_run_id=ref.root_run_id,
        parent_run_id=ref.parent_run_id,
        agent_call_id=ref.agent_call_id,
        agent_id=ref.agent_id,
        agent_definition_version=agent_version,
        session_id=ref.session_id,
        partition_key=ref.partition_key,
        status=RunStatus.RUNNING,
        depth=ref.depth,
        started_at=datetime.now(UTC),
        metadata=input.request.metadata,
        execution_id=input.execution_id,
        forked_from=input.forked_from,
    )


def _output_retries(input: PrepareRunInput, runtime_default: int) -> int:
    """The request's (a child's comes from its agent call), else the runtime policy's."""
    requested = input.request.output_retries
    return runtime_default if requested is None else requested


def _max_iterations(agent_limit: int | None, limits: RuntimeLimits) -> int:
    return min(agent_limit or limits.max_iterations_per_run, limits.max_iterations_per_run)


def _run_timeout(agent_millis: int | None, limits: RuntimeLimits, *, root: bool) -> timedelta:
    timeout = min(limits.run_timeout, limits.root_timeout) if root else limits.run_timeout
    if agent_millis is not None:
        timeout = min(timeout, timedelta(milliseconds=agent_millis))
    return timeout


def run_started_body(ref: RunRef) -> dict[str, Any]:
    """`run_started`, keyed: Temporal runs a local prepare_run again if its workflow task fails
    afterwards, and a run that ended before it was prepared stores it at its end
    (`finish_run`): one start whoever writes it."""
    started: dict[str, Any] = {"type": "run_started", EVENT_KEY: event_key(ref.run_id, "started")}
    if ref.agent_call_id is not None:
        started["agent_call_id"] = ref.agent_call_id  # links the child to its caller's call
    return started
