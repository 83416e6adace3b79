"""The reconciler: a worker closes the store's records of runs whose end was never stored.

A run stores its end itself (`finish_run`). One that ends without running it stays ``running``
in the store for ever: terminated from outside (`temporal workflow terminate`, the Web UI),
timed out by Temporal's workflow execution timeout, failed by a bug (a workflow failure), or
ended while the store refused its finish. Its session lease stays held until it expires, its
events never get an end (streams wait) and are never pruned (`otherone.worker.retention`).

Every ``OTHERONE_RECONCILE_SECONDS`` a worker takes (at most `BATCH`, least recently written
first, walking on from where its last pass stopped) the open records not written for
`GRACE` (a run ending normally is never raced), asks Temporal about each run and closes those
Temporal reports closed, with the end Temporal reports (`temporal_end`): the record, its
session's lease given back and its end event (`run_failed`, `run_cancelled`,
`run_completed`), in one transaction that only closes a record still open
(`Store.close_open_run`): several workers may reconcile at once, and each record is closed
once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from otherone.activities.finish_run import FINISH, terminal_event
from otherone.errors import FailureCode
from otherone.runs import STATUS_FOR_OUTCOME, AgentFailure, AgentRunResult, RunRecord, RunStatus
from otherone.store import Store
from otherone.store.records import EVENT_KEY, event_key
from otherone.store.run_store import OpenRecord

log = logging.getLogger(__name__)

#: How often a worker reconciles by default (`OTHERONE_RECONCILE_SECONDS`).
RECONCILE_EVERY = timedelta(seconds=60)
#: How long a record must have gone unwritten before the reconciler looks at it: a run that
#: ends normally has stored its end long before (a margin, so it is never raced).
GRACE = timedelta(seconds=60)
#: Most records one pass asks Temporal about.
BATCH = 100

#: Temporal statuses of a run that goes on.
_GOING_ON = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)


@dataclass
class ReconcilePass:
    """What one pass did: records looked at, and those closed by the end they got."""

    checked: int = 0
    closed: Counter[str] = field(default_factory=Counter)
    #: Records Temporal could not be asked about (tried again next pass).
    unknown: int = 0

    @property
    def closed_count(self) -> int:
        return sum(self.closed.values())


class Reconciler:
    """Passes over the open records, each going on from where the last one stopped (a full
    batch of runs that are genuinely still running does not hide the records after it)."""

    def __init__(
        self, client: Client, store: Store, *, grace: timedelta = GRACE, batch: int = BATCH
    ) -> None:
        if batch <= 0:
            raise ValueError("batch: must be greater than 0")
        self.client, self.store, self.grace, self.batch = client, store, grace, batch
        self._after: OpenRecord | None = None

    async def reconcile_once(self) -> ReconcilePass:
        """One pass (`reconcile_once`); the next begins after this one's last record, or
        from the oldest again when this one reached the end."""
        done, last = await _reconcile(self.client, self.store, self.grace, self.batch, self._after)
        self._after = last
        return done


async def reconcile_once(
    client: Client,
    store: Store,
    *,
    grace: timedelta = GRACE,
    batch: int = BATCH,
) -> ReconcilePass:
    """Close (at most ``batch``, oldest first) the open records not written for ``grace``
    whose runs Temporal reports closed; logs one INFO line when it closed some."""
    done, _ = await _reconcile(client, store, grace, batch, None)
    return done


async def _reconcile(
    client: Client, store: Store, grace: timedelta, batch: int, after: OpenRecord | None
) -> tuple[ReconcilePass, OpenRecord | None]:
    cutoff = datetime.now(UTC) - grace
    found = await asyncio.to_thread(store.open_run_records, cutoff, limit=batch, after=after)
    done = ReconcilePass(checked=len(found))
    for open_record in found:
        record = open_record.record
        try:
            ended = await temporal_end(client, record)
        except Exception as error:  # Temporal unreachable for now: next pass asks again
            log.warning("reconciler: could not ask Temporal about run %s: %s", record.run_id, error)
            done.unknown += 1
            continue
        if ended is None:
            continue
        if await asyncio.to_thread(store.close_open_run, ended, [end_event(ended)]):
            done.closed[ended.status.value] += 1
    if done.closed:
        counts = ", ".join(f"{count} {status}" for status, count in sorted(done.closed.items()))
        log.info(
            "reconciled %d of %d open run records whose runs had ended in Temporal (%s)",
            done.closed_count,
            done.checked,
            counts,
        )
    return done, (found[-1] if len(found) == batch else None)


async def reconcile_periodically(
    client: Client,
    store: Store,
    every: timedelta = RECONCILE_EVERY,
    *,
    grace: timedelta = GRACE,
    batch: int = BATCH,
) -> None:
    """Reconcile now and then every ``every`` until cancelled; a failed pass is logged, not
    fatal (the store or Temporal may be down for a while)."""
    reconciler = Reconciler(client, store, grace=grace, batch=batch)
    while True:
        try:
            await reconciler.reconcile_once()
        except Exception as error:
            log.warning("reconciling run records failed: %s", error)
        await asyncio.sleep(every.total_seconds())


def end_event(record: RunRecord) -> dict[str, object]:
    """The end event of a run closed by the reconciler: the one its finish would have written,
    with the same key (a tree holds one end of a run whoever writes it)."""
    body = terminal_event(record.status, record.failure, record.usage)
    return {**body, EVENT_KEY: event_key(record.run_id, FINISH)}


async def temporal_end(client: Client, record: RunRecord) -> RunRecord | None:
    """``record`` closed with the end Temporal reports for its run; None while the run goes on.

    Completed: the run's own result (its outcome, output, failure and usage); a result that
    does not decode: completed, without output. Terminated: failed ("terminated in Temporal:
    <reason>"); failed (a workflow failure, e.g. a bug): failed; timed out (the workflow
    execution timeout): timed_out; canceled: cancelled; unknown to Temporal (past the
    namespace's retention): failed. A record of an execution other than the id's latest (a
    later one was refused: `run_id_used`) gets its own execution's end. Raises when Temporal
    cannot be asked."""
    handle = client.get_workflow_handle(record.run_id, result_type=AgentRunResult)
    try:
        description = await handle.describe()
        if _later_execution(record, description):
            handle, description = await _own_execution(client, record)
    except RPCError as error:
        if error.status is not RPCStatusCode.NOT_FOUND:
            raise
        message = "not found in Temporal (past the namespace's retention?): it has ended"
        return _closed(record, RunStatus.FAILED, FailureCode.INTERNAL_ERROR, message, None)
    status = description.status
    if status is None or status in _GOING_ON:
        return None
    closed_at = description.close_time
    if status is WorkflowExecutionStatus.COMPLETED:
        return await _completed(handle, record, description)
    if status is WorkflowExecutionStatus.TIMED_OUT:
        message = "timed out in Temporal: the workflow execution timeout passed"
        return _closed(record, RunStatus.TIMED_OUT, FailureCode.TIMED_OUT, message, closed_at)
    if status is WorkflowExecutionStatus.CANCELED:
        message = "cancelled in Temporal"
        return _closed(record, RunStatus.CANCELLED, FailureCode.CANCELLED, message, closed_at)
    how = "terminated" if status is WorkflowExecutionStatus.TERMINATED else "failed"
    reason = await _closing_reason(client, description)
    message = f"{how} in Temporal" + (f": {reason}" if reason else "")
    return _closed(record, RunStatus.FAILED, FailureCode.INTERNAL_ERROR, message, closed_at)


#: Most continue-as-new links followed to the last run of a record's own execution chain.
MAX_CHAIN_RUNS = 1000


def _later_execution(record: RunRecord, latest: WorkflowExecutionDescription) -> bool:
    """Whether ``latest`` (the newest execution of the record's workflow id) is not the one the
    record is of: a later execution of the id, started after the record's own was terminated
    (refused, `run_id_used`). The record's own has closed then (one execution of an id runs
    at a time), and its end, not the refusal, is what the record gets."""
    first = latest.raw_description.workflow_execution_info.first_run_id
    return record.execution_id is not None and first not in ("", record.execution_id)


async def _own_execution(
    client: Client, record: RunRecord
) -> tuple[WorkflowHandle[Any, AgentRunResult], WorkflowExecutionDescription]:
    """The last run of the record's own execution chain (its first run, then each run it
    continued as new into) and its description."""
    run_id = record.execution_id
    for _ in range(MAX_CHAIN_RUNS):
        handle = client.get_workflow_handle(
            record.run_id, run_id=run_id, result_type=AgentRunResult
        )
        description = await handle.describe()
        if description.status is not WorkflowExecutionStatus.CONTINUED_AS_NEW:
            return handle, description
        run_id = await _continued_into(client, description)
    raise RuntimeError(f"run {record.run_id}: more than {MAX_CHAIN_RUNS} continued runs")


async def _continued_into(client: Client, description: WorkflowExecutionDescription) -> str:
    """The run a run that continued as new continued into (its history's last event)."""
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=description.id, run_id=description.run_id),
        maximum_page_size=1,
    )
    response = await client.workflow_service.get_workflow_execution_history_reverse(request)
    for event in response.history.events[:1]:
        attributes = event.workflow_execution_continued_as_new_event_attributes
        if attributes.new_execution_run_id:
            return attributes.new_execution_run_id
    raise RuntimeError(f"run {description.run_id}: continued as new, into no run")


async def _closing_reason(client: Client, description: WorkflowExecutionDescription) -> str:
    """Why Temporal closed the run's execution: the termination's reason, or the workflow
    failure's message, as its history's last event says ("" when it says none)."""
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=description.id, run_id=description.run_id),
        maximum_page_size=1,
    )
    response = await client.workflow_service.get_workflow_execution_history_reverse(request)
    for event in response.history.events[:1]:
        if event.HasField("workflow_execution_terminated_event_attributes"):
            return event.workflow_execution_terminated_event_attributes.reason
        if event.HasField("workflow_execution_failed_event_attributes"):
            return event.workflow_execution_failed_event_attributes.failure.message
    return ""


async def _completed(
    handle: WorkflowHandle[Any, AgentRunResult],
    record: RunRecord,
    description: WorkflowExecutionDescription,
) -> RunRecord:
    try:
        ended = await handle.result(follow_runs=False)
    except Exception as error:  # completed, yet its result does not decode: say so
        log.warning("reconciler: result of run %s unreadable: %s", record.run_id, error)
        return record.model_copy(
            update={"status": RunStatus.COMPLETED, "finished_at": description.close_time}
        )
    update: dict[str, object] = {
        "status": STATUS_FOR_OUTCOME[ended.outcome],
        "failure": ended.failure,
        "output": ended.output,
        "usage": ended.usage,
        "finished_at": description.close_time,
        "iteration": max(ended.iteration, record.iteration),
    }
    if ended.handoffs:
        update["handoffs"] = ended.handoffs
        update["agent_id"] = ended.agent_id or record.agent_id
    if ended.mcp_unavailable:
        update["mcp_unavailable"] = ended.mcp_unavailable
    if ended.agent_definition_version is not None:
        update["agent_definition_version"] = ended.agent_definition_version
    return record.model_copy(update=update)


def _closed(
    record: RunRecord,
    status: RunStatus,
    code: FailureCode,
    message: str,
    finished_at: datetime | None,
) -> RunRecord:
    return record.model_copy(
        update={
            "status": status,
            "failure": AgentFailure(code=code, message=message),
            "finished_at": finished_at or datetime.now(UTC),
        }
    )
