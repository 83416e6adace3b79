"""`finish_run`: write the run's last entries, release its session, store its record (and, for a
child, the `agent.call` result its caller reads), and announce how it ended."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from temporalio import activity

from otherone.activities.decided_events import call_completed_events
from otherone.activities.lost_attempts import lost_model_attempts_at_end
from otherone.activities.prepare_run import run_started_body
from otherone.activities.run_hooks import on_run_end
from otherone.activities.shared import ActivityContext, pending_rows, tool_result_ids
from otherone.activities.store_calls import brief_write
from otherone.config import AGENT_CALL_TOOL
from otherone.contracts import FinishRunInput, RunRef
from otherone.run_types import plain_decimal
from otherone.runs import (
    AgentCallResult,
    AgentFailure,
    RunOutcome,
    RunRecord,
    RunStatus,
    RunUsage,
)
from otherone.store import Store
from otherone.store.errors import StoreError, describe_store_error
from otherone.store.events import EntryEvents
from otherone.store.lifecycle import CallerResult, EndStored, RunEnd
from otherone.store.records import EVENT_KEY, event_key

#: What finish_run's event keys begin with (after the run id).
FINISH = "finish"
OUTCOME_FOR_STATUS = {
    RunStatus.COMPLETED: RunOutcome.COMPLETED,
    RunStatus.FAILED: RunOutcome.FAILED,
    RunStatus.CANCELLED: RunOutcome.CANCELLED,
    RunStatus.TIMED_OUT: RunOutcome.TIMED_OUT,
    RunStatus.BUDGET_EXCEEDED: RunOutcome.BUDGET_EXCEEDED,
}


async def finish_run(context: ActivityContext, input: FinishRunInput) -> RunRecord | None:
    """Every write is idempotent and every event keyed (`EVENT_KEY`): as a local activity,
    finish_run runs again from the start when its workflow task fails (a worker killed or shut
    down before the task completed), and must then store nothing twice.

    Returns the run's record when a different end was stored before (kept: a run ends once;
    `RunEnd`), for the workflow to end the way the store says; else None."""
    ref, store = input.ref, context.store
    before = [run_started_body(ref)] if input.unprepared else []
    before += await context.decided_bodies(ref, input.events, once=FINISH)
    before += _keyed(ref, call_completed_events(input.pending))
    before += await on_run_end(context, input)
    if input.status is not RunStatus.COMPLETED:
        # Ended while a model attempt's worker was dead, before a retry could close it.
        before += await lost_model_attempts_at_end(context, ref)
    terminal = {**_terminal_event(input), EVENT_KEY: event_key(ref.run_id, FINISH)}
    after = context.visible(ref, [terminal])
    record = input.record
    call_result = None
    if record is not None and record.parent_run_id is not None:  # a child (no hop for a root)
        # A child's output kept as an artifact is read back here: large data, for a thread.
        big = record.output is not None and record.output.is_reference
        call_result = await (context.io if big else context.brief_io)(_caller_result, store, record)
    entry_events = context.deferred_events(ref, input.pending)
    set_aside: list[dict[str, Any]] = []  # the entries' events, when the store refused events

    def write(batch: list[dict[str, Any]] | None) -> EndStored:
        # ``batch``: the visible events of ``before`` then ``after`` (maybe led by a marker);
        # None: the store refused them, write the rest without any (`io_with_events`).
        events = entry_events
        if batch is None:
            events = None if entry_events is None else _set_aside(entry_events, set_aside)
            batch = []
        cut = len(batch) - len(after)
        return store.end_run(
            RunEnd(
                ref=ref,
                tool_call_ids=tool_result_ids(input.pending),
                pending_rows=lambda stored: pending_rows(ref, input.pending, stored),
                entry_events=events,
                release_session=input.release_session,
                record=record,
                call_result=call_result,
                events_before=batch[:cut],
                events_after=batch[cut:],
            )
        )

    # The last entries, the lease, the record, the caller's result and the events: one
    # transaction (`Store.end_run`).
    # Brief unless stored (oversized) tool results are copied into the transcript here, or the
    # output or the last entries are long texts.
    brief = not tool_result_ids(input.pending) and brief_write(*_written_texts(input))
    stored = await context.io_with_events(ref, [*before, *after], write, brief=brief)
    if set_aside:
        context.count_lost(ref, set_aside, StoreError("the run's events were refused"))
    if stored.earlier_end is not None:
        activity.logger.warning(
            "run %s ended %s before; that end is kept, not %s",
            ref.run_id,
            stored.earlier_end.status.value,
            input.status.value,
        )
        return stored.earlier_end
    if record is not None:
        await announce_to_caller(context, ref, record)
    return None


def _set_aside(events: EntryEvents, aside: list[dict[str, Any]]) -> EntryEvents:
    """``events``, kept in ``aside`` instead of being written (the last write's)."""

    def bodies_for(written: Collection[str]) -> list[dict[str, Any]]:
        aside[:] = events.bodies_for(written)
        return []

    return EntryEvents(events.ref, bodies_for)


async def announce_to_caller(context: ActivityContext, ref: RunRef, record: RunRecord) -> None:
    """`agent_call_completed` in the caller's name, the moment the child has ended (the
    caller itself may be waiting for other children, or be a trusted call's client)."""
    if record.parent_run_id is None or record.agent_call_id is None:
        return
    try:
        caller = await asyncio.to_thread(
            context.store.get_run_record, ref.partition_key, record.parent_run_id
        )
    except Exception as error:  # observation only
        activity.logger.warning("caller record read failed: %s", describe_store_error(error))
        return
    if caller is None:
        return
    caller_ref = ref.model_copy(
        update={
            "run_id": caller.run_id,
            "parent_run_id": caller.parent_run_id,
            "agent_call_id": caller.agent_call_id,
            "agent_id": caller.agent_id,
            "depth": caller.depth,
            "session_id": caller.session_id or "",
        }
    )
    await context.emit(
        caller_ref,
        {
            "type": "agent_call_completed",
            "call_id": record.agent_call_id,
            "target": record.agent_id,
            "outcome": OUTCOME_FOR_STATUS[record.status].value,
            "child_run_id": record.run_id,
            # The child's own duration, as its record and `otherone tree` give it: one figure
            # per run everywhere (not the caller's wait, which adds start-up and hand-over).
            "duration_millis": record.usage.duration_millis,
            EVENT_KEY: event_key(record.run_id, FINISH, "caller"),
        },
    )


def _caller_result(store: Store, record: RunRecord) -> CallerResult | None:
    """A child's `agent.call` result for its caller to read by reference (up to
    max_result_bytes), not through history; None for a root."""
    if record.parent_run_id is None or record.agent_call_id is None:
        return None
    result = AgentCallResult(
        call_id=record.agent_call_id,
        target=record.agent_id,
        run_id=record.run_id,
        outcome=OUTCOME_FOR_STATUS[record.status],
        failure=record.failure,
        # The caller's model reads the value (bounded by max_result_bytes), not a reference.
        output=store.resolve_output(record.output) if record.output else None,
        usage=record.usage,
    )
    return CallerResult(
        caller_run_id=record.parent_run_id,
        call_id=record.agent_call_id,
        tool_name=AGENT_CALL_TOOL,
        content=result.model_dump_json(exclude_none=True),
    )


def _keyed(ref: RunRef, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``bodies`` (one per agent call) keyed by their call, stored once whatever re-runs."""
    return [
        {**body, EVENT_KEY: event_key(ref.run_id, FINISH, "call", str(body.get("call_id")))}
        for body in bodies
    ]


def _written_texts(input: FinishRunInput) -> list[str | None]:
    """The long texts `Store.end_run` may write: the last entries and the run's output."""
    texts = [entry.content for entry in input.pending]
    output = input.record.output if input.record is not None else None
    if output is not None and not output.is_reference:
        texts.append(output.text)
    return texts


def _terminal_event(input: FinishRunInput) -> dict[str, Any]:
    return terminal_event(input.status, input.failure, input.usage)


def terminal_event(
    status: RunStatus, failure: AgentFailure | None, usage: RunUsage
) -> dict[str, Any]:
    """The event a run's end is announced with (unkeyed): `run_completed`, `run_cancelled` or
    `run_failed` (the ends streams stop at); also written by the reconciler
    (`otherone.worker.reconciler`) for a run whose own end was never stored."""
    # Every end carries the run's own duration, the one its record and `otherone tree` show,
    # and its cost when its calls were priced.
    duration: dict[str, Any] = {"duration_millis": usage.duration_millis}
    if usage.cost is not None:
        duration["cost"] = plain_decimal(usage.cost)
    if status is RunStatus.COMPLETED:
        return {"type": "run_completed", **duration}
    if status is RunStatus.CANCELLED:
        return {"type": "run_cancelled", **duration}
    return {
        "type": "run_failed",
        "status": status.value,
        "failure": failure.model_dump(mode="json") if failure else None,
        **duration,
    }
