"""What the client makes of Temporal's answers about a run: a finished run's record, the
result of a run that did not return ours, and RPC errors as our error types.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from temporalio.client import WorkflowExecutionDescription, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from otherone import search_attributes as attrs
from otherone.errors import FailureCode, RunNotActiveError, RunNotFoundError, UnavailableError
from otherone.runs import (
    DEFAULT_PARTITION,
    STATUS_FOR_OUTCOME,
    AgentFailure,
    AgentRunResult,
    RunOutcome,
    RunRecord,
)

# The CLI imports this module: the store (and SQLAlchemy) only when a method needs one.
if TYPE_CHECKING:
    from otherone.store import Store


def not_found_or(error: RPCError, run_id: str, *, finished: bool = False) -> Exception:
    """Temporal's NOT_FOUND as our error (`RunNotActiveError` for a run that has ``finished``
    when that is what the server says); any other RPC error as it is."""
    if error.status == RPCStatusCode.NOT_FOUND:
        message = error.message.lower()
        # "workflow execution already completed", or an update the run's end cut short
        # ("workflow update was aborted by closing workflow"): the run exists, it has ended.
        if finished and ("completed" in message or "closing workflow" in message):
            return RunNotActiveError(run_id)
        return RunNotFoundError(run_id)
    return error


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
        started_at=description.start_time,
        finished_at=description.close_time,
        usage=result.usage,
        failure=result.failure,
        output=result.output,
        metadata=dict(result.metadata),
    )


async def stored_record(store: Store | None, ended: RunRecord) -> RunRecord | None:
    """The ended run's record in the store (None without a store, when it has none, or when
    the store is down: Temporal's account of the run is enough then)."""
    if store is None:
        return None
    from otherone.store.errors import StoreError, is_outage

    try:
        return await asyncio.to_thread(store.get_run_record, ended.partition_key, ended.run_id)
    except Exception as error:
        if is_outage(error) or isinstance(error, StoreError):
            return None
        raise


def with_stored_record(ended: RunRecord, stored: RunRecord | None) -> RunRecord:
    """A run that ended without returning our result (terminated from outside): what the store
    knows of it (agent, session, iteration, usage so far), with the end Temporal reports."""
    if stored is None or stored.status.is_terminal:
        return ended
    return stored.model_copy(
        update={"status": ended.status, "failure": ended.failure, "finished_at": ended.finished_at}
    )
