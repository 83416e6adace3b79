"""prepare_run and finish_run run again whole (Temporal re-runs a local activity from attempt 1
when the workflow task that ran it fails: a worker killed or shut down before the task
completed); the second run stores none of their events again (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy.exc
from pydantic import ValidationError
from temporalio.activity import ActivityCancellationDetails
from temporalio.testing import ActivityEnvironment

from otherone.activities.agent_activities import AgentActivities
from otherone.activities.prepare_run import _running_record
from otherone.activities.shared import ActivityContext
from otherone.client.agent_client import build_request
from otherone.config import AGENT_CALL_TOOL
from otherone.contracts import FinishRunInput, PendingEntry, PrepareRunInput, RunRef
from otherone.runs import AgentOutput, RunRecord, RunStatus, RunUsage
from otherone.store import EntryRow, SessionBusyError, Store
from otherone.store.errors import RunAlreadyEnded
from otherone.store.events import EntryEvents
from otherone.store.lifecycle import CallerResult, EndStored, RunEnd, SessionLease
from otherone.store.records import EVENT_KEY
from tests.edge_seams import GateStore
from tests.harness import scripted_config

CALLER = RunRef(
    run_id="root-1",
    root_run_id="root-1",
    agent_id="agent",
    partition_key="p",
    session_id="s-root",
    snapshot_version="",
)
CHILD = CALLER.model_copy(
    update={
        "run_id": "child-1",
        "parent_run_id": "root-1",
        "agent_call_id": "call-1",
        "depth": 1,
        "session_id": "s-child",
    }
)
HOUR = timedelta(hours=1)


def _local() -> ActivityEnvironment:
    """An activity context as Temporal gives a local activity's first attempt."""
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, is_local=True, attempt=1)
    return environment


def _events(store: Store) -> Counter[tuple[str, str]]:
    """(run id, event type) of every stored event of the tree, counted."""
    return Counter(
        (record.run_id, str(record.event.get("type"))) for record in store.read_events("root-1")
    )


def _prepare(ref: RunRef, *, internal_session: bool = True) -> PrepareRunInput:
    return PrepareRunInput(
        ref=ref,
        internal_session=internal_session,
        request=build_request(entry_agent="agent", input="hello"),
    )


def _record(ref: RunRef, status: RunStatus) -> RunRecord:
    """The record prepare_run stores for the run (`_running_record`), in ``status``."""
    return _running_record(_prepare(ref), agent_version=1).model_copy(update={"status": status})


def _finish_input(ref: RunRef) -> FinishRunInput:
    """A child's end with an event the workflow decided (a refused tool call's pair) and a
    result of its own child that reached it inline (announced `agent_call_completed`)."""
    inline = {"call_id": "grandchild-call", "target": "agent", "outcome": "completed"}
    inline["run_id"] = "grandchild-1"
    decided: list[dict[str, Any]] = [
        {"type": "tool_started", "tool_call_id": "t1", "tool_name": "x"},
        {"type": "tool_completed", "tool_call_id": "t1", "tool_name": "x", "error": "refused"},
    ]
    return FinishRunInput(
        ref=ref.model_copy(update={"snapshot_version": "v"}),
        pending=(
            PendingEntry(
                key="child-1:t1:tool",
                role="tool",
                content=json.dumps(inline),
                tool_call_id="grandchild-call",
                tool_name=AGENT_CALL_TOOL,
            ),
        ),
        status=RunStatus.COMPLETED,
        usage=RunUsage(duration_millis=5),
        events=tuple(decided),  # type: ignore[arg-type]
        record=_record(ref, RunStatus.COMPLETED),
    )


async def test_prepare_and_finish_run_twice_store_each_event_once(store: Store) -> None:
    activities = AgentActivities(ActivityContext(scripted_config({"agent": ["hi"]}), store))
    store.upsert_run_record(_record(CALLER, RunStatus.RUNNING))  # the caller announced to
    prepare = _prepare(CHILD)
    for _ in range(2):
        plan = await _local().run(activities.prepare_run, prepare)
    assert plan.agent_id == "agent"
    assert _events(store) == {("child-1", "run_started"): 1}

    for _ in range(2):
        await _local().run(activities.finish_run, _finish_input(CHILD))
    assert _events(store) == {
        ("child-1", "run_started"): 1,
        ("child-1", "tool_started"): 1,
        ("child-1", "tool_completed"): 1,
        ("child-1", "agent_call_completed"): 1,  # its grandchild's, reached inline
        ("child-1", "run_completed"): 1,
        ("root-1", "agent_call_completed"): 1,  # the announcement in its caller's name
    }
    stored = store.read_events("root-1")
    assert [record.sequence for record in stored] == list(range(1, len(stored) + 1))  # no gaps
    assert not any(EVENT_KEY in record.event for record in stored)  # the key is not shown


def test_a_keyed_event_is_stored_once_per_tree_and_unkeyed_ones_always(store: Store) -> None:
    ref = CALLER.model_copy(update={"snapshot_version": "v"})
    once = {"type": "run_started", EVENT_KEY: "k1"}
    assert store.append_events(ref, [once, {"type": "a"}, dict(once)]) == [1, 2]
    assert store.append_events(ref, [{"type": "a"}, once]) == [3]
    assert store.append_events(ref, [once]) == []
    other_tree = ref.model_copy(update={"run_id": "root-2", "root_run_id": "root-2"})
    assert store.append_events(other_tree, [once]) == [1]  # keys are per tree
    assert [record.event["type"] for record in store.read_events("root-1")] == [
        "run_started",
        "a",
        "a",
    ]


@pytest.mark.parametrize(
    ("reason", "kept"),
    [("cancel_requested", False), ("timed_out", True), ("worker_shutdown", True)],
)
async def test_a_prepare_cut_short_gives_the_lease_back_only_for_a_cancelled_run(
    tmp_path: Path, reason: str, kept: bool
) -> None:
    """A cancelled run gives back the lease its prepare took meanwhile (nobody else would); an
    attempt that timed out or whose worker shut down keeps it: Temporal runs prepare again for
    the same run, which takes the lease as its own, and a late release would free it under it."""
    store = GateStore(f"sqlite:///{tmp_path / 'store.db'}", held="start_run")
    activities = AgentActivities(ActivityContext(scripted_config({"agent": ["hi"]}), store))
    prepare = _prepare(CALLER, internal_session=False)
    environment = _local()
    try:
        preparing = asyncio.ensure_future(environment.run(activities.prepare_run, prepare))
        assert await asyncio.to_thread(store.entered.wait, 20)
        environment.cancel(ActivityCancellationDetails(**{reason: True}))
        store.release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(preparing, 20)
        holder = store.session_holder("p", "s-root")
    finally:
        store.release.set()
        store.close()
    assert holder == ("root-1" if kept else None)


def _lease(ref: RunRef) -> SessionLease:
    return SessionLease(ref.partition_key, ref.session_id, ref.run_id, datetime.now(UTC) + HOUR)


def test_a_run_start_on_a_busy_session_writes_nothing(store: Store) -> None:
    """`Store.start_run` is one transaction: refused the lease, it stores no record and no
    `run_started` (a session-busy run is not shown as running)."""
    other = CALLER.model_copy(update={"run_id": "root-2", "root_run_id": "root-2"})
    store.start_run(_lease(other), _record(other, RunStatus.RUNNING), other, [{"type": "x"}])
    started = {"type": "run_started", EVENT_KEY: "root-1:started"}
    with pytest.raises(SessionBusyError):
        store.start_run(_lease(CALLER), _record(CALLER, RunStatus.RUNNING), CALLER, [started])
    assert store.get_run_record("p", "root-1") is None
    assert store.read_events("root-1") == []
    assert store.session_holder("p", "s-root") == "root-2"


def test_a_run_end_is_one_transaction_written_once(store: Store) -> None:
    """`Store.end_run` writes the last entries, the lease, the record, the caller's result and
    the events together or not at all; run again (a local activity re-run), nothing twice."""
    store.start_run(_lease(CHILD), _record(CHILD, RunStatus.RUNNING), CHILD, [])
    answer = EntryRow(entry_key="child-1:t1:tool", role="tool", content="{}", run_id="child-1")
    result = CallerResult("root-1", "call-1", AGENT_CALL_TOOL, '{"outcome": "completed"}')

    def end(after: dict[str, Any]) -> RunEnd:
        return RunEnd(
            ref=CHILD,
            pending_rows=lambda _stored: [answer],
            entry_events=EntryEvents(CHILD, lambda keys: [{"type": "entry", "n": len(keys)}]),
            release_session=True,
            record=_record(CHILD, RunStatus.COMPLETED),
            call_result=result,
            events_before=[{"type": "decided", EVENT_KEY: "child-1:finish:0"}],
            events_after=[after],
        )

    with pytest.raises(ValidationError, match=r"event\.bad"):
        store.end_run(end({"type": "run_completed", "bad": object()}))  # the last part fails
    assert store.load_entries("p", "s-child") == []
    assert store.session_holder("p", "s-child") == "child-1"
    running = store.get_run_record("p", "child-1")
    assert running is not None and running.status is RunStatus.RUNNING
    assert store.get_tool_results("p", "root-1", ["call-1"]) == {}
    assert store.read_events("root-1") == []

    completed = {"type": "run_completed", EVENT_KEY: "child-1:finish"}
    assert store.end_run(end(completed)) == EndStored(1)
    assert store.end_run(end(completed)) == EndStored(0)
    assert [row.entry_key for row in store.load_entries("p", "s-child")] == ["child-1:t1:tool"]
    assert store.session_holder("p", "s-child") is None
    ended = store.get_run_record("p", "child-1")
    assert ended is not None and ended.status is RunStatus.COMPLETED
    assert store.get_tool_results("p", "root-1", ["call-1"]) == {"call-1": result.content}
    # In order, each once: the entry's events come with the entry written (none the 2nd time).
    assert [record.event for record in store.read_events("root-1")] == [
        {"type": "decided"},
        {"type": "entry", "n": 1},
        {"type": "run_completed"},
        {"type": "entry", "n": 0},
    ]


def test_a_run_ends_once_an_end_stored_before_is_kept(store: Store) -> None:
    """A second, different end (a finish taken again on another path after its workflow task
    failed) writes its entries but keeps the stored end: the record, the caller's result and
    the events stay; the stored record is returned."""
    store.start_run(_lease(CHILD), _record(CHILD, RunStatus.RUNNING), CHILD, [])
    done = CallerResult("root-1", "call-1", AGENT_CALL_TOOL, '{"outcome": "completed"}')
    late = EntryRow(entry_key="child-1:late", role="user", content="late", run_id="child-1")

    def end(status: RunStatus, result: CallerResult, kind: str) -> RunEnd:
        return RunEnd(
            ref=CHILD,
            pending_rows=lambda _stored: [late] if status is RunStatus.CANCELLED else [],
            release_session=True,
            record=_record(CHILD, status),
            call_result=result,
            events_before=[{"type": f"before_{kind}"}],
            events_after=[{"type": kind}],
        )

    assert store.end_run(end(RunStatus.COMPLETED, done, "run_completed")) == EndStored(0)
    cancelled = dataclasses.replace(done, content='{"outcome": "cancelled"}')
    again = store.end_run(end(RunStatus.CANCELLED, cancelled, "run_cancelled"))
    assert again.entries == 1
    assert again.earlier_end is not None and again.earlier_end.status is RunStatus.COMPLETED
    stored = store.get_run_record("p", "child-1")
    assert stored is not None and stored.status is RunStatus.COMPLETED
    assert store.get_tool_results("p", "root-1", ["call-1"]) == {"call-1": done.content}
    kinds = [record.event["type"] for record in store.read_events("root-1")]
    assert kinds == ["before_run_completed", "run_completed"]
    assert [row.entry_key for row in store.load_entries("p", "s-child")] == ["child-1:late"]
    # Completed again with another output (a late message answered after the stored end): the
    # stored end is kept too; the same end again is a re-run, not another end.
    output = AgentOutput(type="text", value="x")
    other = _record(CHILD, RunStatus.COMPLETED).model_copy(update={"output": output})
    later = dataclasses.replace(end(RunStatus.COMPLETED, done, "run_completed"), record=other)
    assert store.end_run(later).earlier_end == stored
    assert store.end_run(end(RunStatus.COMPLETED, done, "run_completed")).earlier_end is None


def test_a_turn_bringing_messages_after_the_stored_end_writes_nothing(store: Store) -> None:
    """A turn with user messages (``unless_ended``) whose run's end is already stored (a
    message came while the workflow task storing the end was open, which Temporal then
    refused) raises `RunAlreadyEnded` before writing anything: no entry, no event. While the
    run is live the same turn goes on; a turn without messages does not look."""
    store.start_run(_lease(CHILD), _record(CHILD, RunStatus.RUNNING), CHILD, [])
    late = EntryRow(entry_key="child-1:t2:user", role="user", content="late", run_id="child-1")
    entry_events = EntryEvents(CHILD, lambda keys: [{"type": "entry", "n": len(keys)}])

    def turn(key: str, *, unless_ended: bool = True) -> list[EntryRow]:
        existing, _, rows = store.turn_context(
            "p",
            "s-child",
            f"child-1:{key}:assistant",
            "child-1",
            [],
            lambda _stored: [dataclasses.replace(late, entry_key=f"child-1:{key}:user")],
            events=entry_events,
            unless_ended=unless_ended,
        )
        assert existing is None
        return rows

    assert [row.content for row in turn("t1")] == ["late"]  # live: written, then read
    store.end_run(
        RunEnd(ref=CHILD, pending_rows=lambda _: [], record=_record(CHILD, RunStatus.COMPLETED))
    )
    before = (store.load_entries("p", "s-child"), store.read_events("root-1"))
    with pytest.raises(RunAlreadyEnded, match="'child-1' had already ended \\(completed\\)"):
        turn("t2")
    assert (store.load_entries("p", "s-child"), store.read_events("root-1")) == before
    # A turn that brings no user message is not one the race can make: it reads no record.
    assert len(turn("t3", unless_ended=False)) == 2


class EventRefusingStore(Store):
    """A real store that refuses (a constraint violation: not an outage) every run end that
    carries events of its own."""

    def end_run(self, end: RunEnd) -> EndStored:
        if end.events_before or end.events_after:
            raise sqlalchemy.exc.IntegrityError("INSERT ...", {}, Exception("refused"))
        return super().end_run(end)


async def test_a_finish_whose_events_are_refused_still_stores_the_end(tmp_path: Path) -> None:
    """Events stay observation only in the run's one end transaction: refused, the end is
    written again without them (entries, lease, record) and they are counted lost."""
    store = EventRefusingStore(Store.open(f"sqlite:///{tmp_path / 'store.db'}").engine)
    context = ActivityContext(scripted_config({"agent": ["hi"]}), store)
    activities = AgentActivities(context)
    await _local().run(activities.prepare_run, _prepare(CALLER, internal_session=False))
    inline = PendingEntry(
        key="root-1:t1:tool",
        role="tool",
        content='{"ok": true}',
        tool_call_id="t1",
        tool_name="x",
        tool_arguments="{}",
    )
    finish = FinishRunInput(
        ref=CALLER.model_copy(update={"snapshot_version": "v"}),
        pending=(inline,),
        status=RunStatus.COMPLETED,
        usage=RunUsage(duration_millis=5),
        release_session=True,
        record=_record(CALLER, RunStatus.COMPLETED),
    )
    try:
        await _local().run(activities.finish_run, finish)
        record = store.get_run_record("p", "root-1")
        assert record is not None and record.status is RunStatus.COMPLETED
        assert store.session_holder("p", "s-root") is None
        assert [row.entry_key for row in store.load_entries("p", "s-root")] == ["root-1:t1:tool"]
        assert _events(store) == {("root-1", "run_started"): 1}
        # run_completed, and the inline result's tool_started / tool_completed.
        marker = context.with_lost_marker(CALLER, [{"type": "next"}])[0]
        assert marker == {"type": "events_lost", "count": 3}
    finally:
        store.close()
