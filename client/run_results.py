"""What the client makes of Temporal's answers about a run: a finished run's record, the
result of a run that did not return ours, the stored record of a run that cannot answer (its
workflow task keeps failing), and RPC errors as our error types.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from otherone import search_attributes as attrs
from otherone.client.store_answers import answered
from otherone.errors import (
    FailureCode,
    RunNotActiveError,
    RunNotFoundError,
    RunStuckError,
    UnavailableError,
)
from otherone.runs import (
    DEFAULT_PARTITION,
    STATUS_FOR_OUTCOME,
    AgentFailure,
    AgentRunResult,
    RunOutcome,
    RunRecord,
    RunStatus,
)
from otherone.workflow_names import MEMO_FINGERPRINT

# The CLI imports this module: the store (and SQLAlchemy) only when a method needs one.
if TYPE_CHECKING:
    from otherone.store import Store


def not_found_or(error: RPCError, run_id: str, *, finished: bool = False) -> Exception:
    """Temporal's NOT_FOUND as our error (`RunNotActiveError` for a run that has ``finished``
    when that is what the server says), a run whose workflow task fails (`stuck_run`) as
    `UnavailableError`; any other RPC error as it is."""
    if is_stuck(error):
        return stuck_run(run_id, error.message, "nothing was taken: send it again once it runs")
    if error.status == RPCStatusCode.NOT_FOUND:
        message = error.message.lower()
        # "workflow execution already completed", or an update the run's end cut short
        # ("workflow update was aborted by closing workflow"): the run exists, it has ended.
        if finished and ("completed" in message or "closing workflow" in message):
            return RunNotActiveError(run_id)
        return RunNotFoundError(run_id)
    return error


def is_stuck(error: RPCError) -> bool:
    """Temporal refusing a query or update because the run's workflow task keeps failing."""
    return (
        error.status == RPCStatusCode.FAILED_PRECONDITION
        and "workflow task in failed state" in error.message.lower()
    )


def stuck_run(run_id: str, reason: str, then: str) -> RunStuckError:
    """A running run that cannot answer: its workflow task fails, e.g. on a worker whose code
    cannot replay it (a rolling deploy's overlap, a rollback; Temporal retries it until code
    that can takes it) or by a bug; the worker's log says which."""
    return RunStuckError(
        f"run '{run_id}' is running but its workflow task keeps failing ({reason}): a worker "
        f"whose code cannot replay it (see docs/upgrading.md) or a bug, as the worker's log "
        f"says; {then}"
    )


def unanswered_update(message: str) -> BaseException:
    """An update that got no answer in time: `UnavailableError` (``message`` says what to do),
    or a cancellation when it is our caller that gave up (the update goes on in the run)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        return asyncio.CancelledError()
    return UnavailableError(message)


def result_of_broken_run(run_id: str, error: WorkflowFailureError) -> AgentRunResult:
    """A run that did not return our structured result (terminated, or failed by a bug)."""
    message = str(error.cause or error)
    return AgentRunResult(
        run_id=run_id,
        root_run_id=run_id,
        agent_id="",
        session_id="",
        outcome=RunOutcome.FAILED,
        failure=AgentFailure(
            code=FailureCode.INTERNAL_ERROR, message=f"workflow ended abnormally: {message}"
        ),
    )


def record_from_result(
    result: AgentRunResult, description: WorkflowExecutionDescription
) -> RunRecord:
    """The record of a finished run: its result, and what Temporal's description adds."""
    found = description.typed_search_attributes
    return RunRecord(
        run_id=result.run_id,
        # A run that did not return our result (terminated): its search attributes and
        # Temporal's tree say what it was.
        root_run_id=description.root_id or result.root_run_id,
        parent_run_id=description.parent_id,
        agent_call_id=found.get(attrs.CALL_ID),
        agent_id=result.agent_id or found.get(attrs.AGENT_ID) or "",
        session_id=result.session_id or found.get(attrs.SESSION_ID) or None,
        partition_key=found.get(attrs.PARTITION) or DEFAULT_PARTITION,
        status=STATUS_FOR_OUTCOME[result.outcome],
        depth=found.get(attrs.DEPTH) or 0,
        started_at=result.started_at or description.start_time,
        finished_at=description.close_time,
        usage=result.usage,
        failure=result.failure,
        output=result.output,
        metadata=dict(result.metadata),
        iteration=result.iteration,
        agent_definition_version=result.agent_definition_version,
        handoffs=result.handoffs,
        mcp_unavailable=result.mcp_unavailable,
        forked_from=result.forked_from,
        execution_id=execution_of(description),
    )


def execution_of(description: WorkflowExecutionDescription) -> str | None:
    """The execution (`RunRecord.execution_id`) ``description`` is of: its chain's first run
    id (None when the server does not say)."""
    info = description.raw_description.workflow_execution_info
    return info.first_run_id or None


async def stored_record(store: Store | None, partition_key: str, run_id: str) -> RunRecord | None:
    """The run's record in the store (None without a store, when it has none, or when the
    store is down: Temporal's account of the run is enough then)."""
    if store is None:
        return None
    from otherone.store.errors import StoreError, is_outage

    try:
        return await answered(store.get_run_record, partition_key, run_id)
    except Exception as error:
        if is_outage(error) or isinstance(error, StoreError):
            return None
        raise


async def forgotten_run(
    store: Store | None, partition_key: str | None, run_id: str
) -> RunRecord | None:
    """The record of a run Temporal does not know (any more: namespace retention, or deleted),
    as the store keeps it: None without a store or when it has none (``partition_key`` None:
    any partition's). A record that never got its end (the run was terminated from outside, and
    Temporal no longer says how it ended) is reported failed."""
    if store is None:
        return None
    from otherone.store.errors import StoreError, is_outage

    try:
        stored = await answered(store.find_run_record, run_id, partition_key)
    except Exception as error:
        if is_outage(error) or isinstance(error, StoreError):
            return None
        raise
    return None if stored is None else as_ended(stored)


def as_ended(stored: RunRecord) -> RunRecord:
    """The stored record of a run Temporal no longer keeps: as it is when it holds the run's
    end, else failed (terminated from outside: Temporal no longer says how it ended)."""
    if stored.status.is_terminal:
        return stored
    failure = AgentFailure(
        code=FailureCode.INTERNAL_ERROR,
        message="workflow ended abnormally: its end was not stored, and Temporal no longer "
        "keeps the run",
    )
    return stored.model_copy(update={"status": RunStatus.FAILED, "failure": failure})


def result_from_record(record: RunRecord) -> AgentRunResult:
    """A finished run's result as its record keeps it (the run's workflow is gone)."""
    outcome = OUTCOME_FOR_STATUS.get(record.status, RunOutcome.FAILED)
    return AgentRunResult(
        run_id=record.run_id,
        root_run_id=record.root_run_id,
        agent_id=record.agent_id,
        session_id=record.session_id or "",
        outcome=outcome,
        failure=record.failure,
        output=record.output,
        usage=record.usage,
        metadata=dict(record.metadata),
        iteration=record.iteration,
        started_at=record.started_at,
        agent_definition_version=record.agent_definition_version,
        handoffs=record.handoffs,
        mcp_unavailable=dict(record.mcp_unavailable),
    )


#: A terminal status's outcome (`STATUS_FOR_OUTCOME` the other way round).
OUTCOME_FOR_STATUS = {status: outcome for outcome, status in STATUS_FOR_OUTCOME.items()}


def with_stored_record(ended: RunRecord, stored: RunRecord | None) -> RunRecord:
    """A run that ended without returning our result (terminated from outside): what the store
    knows of it (agent, session, iteration, usage so far), with the end Temporal reports."""
    if stored is None or stored.status.is_terminal:
        return ended
    return stored.model_copy(
        update={"status": ended.status, "failure": ended.failure, "finished_at": ended.finished_at}
    )


async def stuck_record(
    store: Store | None, description: WorkflowExecutionDescription, run_id: str, reason: str
) -> RunRecord:
    """A running run whose workflow cannot answer a query (its task fails): its record as the
    store last has it, else `UnavailableError` saying why (a client without a store)."""
    found = description.typed_search_attributes
    stored = await stored_record(store, found.get(attrs.PARTITION) or DEFAULT_PARTITION, run_id)
    if stored is None:
        raise stuck_run(run_id, reason, "its record is in the store (`--database-url`)")
    # The store keeps `running` while a run waits; its search attribute says for what.
    status = found.get(attrs.STATUS) or ""
    if status in RunStatus._value2member_map_ and not stored.status.is_terminal:
        return stored.model_copy(update={"status": RunStatus(status)})
    return stored


def task_failing(description: WorkflowExecutionDescription) -> bool:
    """Whether the run's workflow task has failed and is being tried again (Temporal counts
    the attempts of the pending task): a query may then wait for a worker that keeps failing."""
    return description.raw_description.pending_workflow_task.attempt > 1


#: What an execution of an ended run's id ends with (`otherone.store.errors.RunIdUsed`).
REUSED_ID_REFUSAL = "has already run and ended"


def is_reused_id_refusal(result: AgentRunResult) -> bool:
    """Whether ``result`` is a later execution's refusal of an ended run's id (started again
    by `temporal workflow start` with Temporal's default reuse policy, or reset)."""
    failure = result.failure
    return failure is not None and REUSED_ID_REFUSAL in failure.message


async def original_execution(
    temporal: Client, run_id: str
) -> WorkflowHandle[Any, AgentRunResult] | None:
    """The run id's first execution: the run itself, when later ones were refused (None when
    there is only one). Readers report it, not the refusal its id's latest execution is."""
    found = [execution async for execution in temporal.list_workflows(f'WorkflowId = "{run_id}"')]
    if len(found) < 2:
        return None
    first = min(found, key=lambda execution: execution.start_time)
    return temporal.get_workflow_handle(run_id, run_id=first.run_id, result_type=AgentRunResult)


async def shown_execution(
    temporal: Client, run_id: str, latest: WorkflowExecutionDescription
) -> WorkflowExecutionDescription:
    """The description of the execution readers report for an ended run: ``latest``, or the
    run id's first execution's when ``latest`` is a refused later one (`original_result`)."""
    handle = temporal.get_workflow_handle(run_id, run_id=latest.run_id, result_type=AgentRunResult)
    try:
        if not is_reused_id_refusal(await handle.result(follow_runs=False)):
            return latest
    except WorkflowFailureError:  # terminated or failed: no refusal of ours
        return latest
    original = await original_execution(temporal, run_id)
    return await original.describe() if original is not None else latest


async def original_result(temporal: Client, run_id: str, latest: AgentRunResult) -> AgentRunResult:
    """``latest``, the run id's latest execution's result, or the run's own when that is a
    refused later execution (`is_reused_id_refusal`)."""
    if not is_reused_id_refusal(latest):
        return latest
    original = await original_execution(temporal, run_id)
    return await original.result() if original is not None else latest


async def original_memo(
    temporal: Client, run_id: str, latest: WorkflowExecutionDescription
) -> Mapping[str, Any]:
    """The run's memo (its idempotency fingerprint): ``latest``'s, or the first execution's
    when ``latest`` has none (a later execution of its id, started by a plain client)."""
    memo = await latest.memo()
    if MEMO_FINGERPRINT in memo:
        return memo
    original = await original_execution(temporal, run_id)
    return await (await original.describe()).memo() if original is not None else memo
