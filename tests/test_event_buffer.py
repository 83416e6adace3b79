"""`EventBuffer`: an activity's events in few transactions, within a bound, nothing lost."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Collection
from typing import Any

import pytest
import sqlalchemy.exc
from temporalio.testing import ActivityEnvironment

from otherone.activities.event_buffer import LATE_WRITE_SECONDS, EventBuffer
from otherone.activities.shared import ActivityContext
from otherone.contracts import RunRef
from otherone.store import EntryRow, Store
from otherone.workflows.outcomes import IF_MISSING
from tests.harness import scripted_config, wait_until

REF = RunRef(
    run_id="run-1",
    root_run_id="run-1",
    parent_run_id=None,
    agent_call_id=None,
    agent_id="agent",
    depth=0,
    partition_key="p",
    session_id="s1",
    snapshot_version="v1",
)


def types(store: Store) -> list[str]:
    return [str(record.event.get("type")) for record in store.read_events("run-1")]


def context_on(store: Store) -> ActivityContext:
    return ActivityContext(scripted_config({"agent": ["hi"]}), store)


async def test_queued_events_are_written_within_the_bound_while_the_activity_goes_on(
    store: Store,
) -> None:
    events = EventBuffer(context_on(store), REF)
    began = time.monotonic()
    events.add({"type": "tool_started"})
    assert types(store) == []  # not on the critical path
    await wait_until(lambda: types(store) == ["tool_started"], message="written late")
    # The bound, with room for a loaded machine (the timer fires after LATE_WRITE_SECONDS).
    assert time.monotonic() - began < LATE_WRITE_SECONDS + 5
    await events.close()


async def test_add_now_writes_everything_queued_in_order(store: Store) -> None:
    events = EventBuffer(context_on(store), REF)
    events.add({"type": "model_started"})
    await events.add_now({"type": "model_delta", "content": "a"})
    assert types(store) == ["model_started", "model_delta"]
    await events.close()


async def test_the_end_writes_entry_and_events_in_one_transaction(store: Store) -> None:
    events = EventBuffer(context_on(store), REF)
    events.add({"type": "model_started"}, {"type": "model_completed"})
    row = EntryRow(entry_key="run-1:t1:assistant", role="assistant", content="hi", run_id="run-1")
    written = await events.write_with(
        lambda bodies: store.append_entries_and_events("p", "s1", [row], REF, bodies)
    )
    assert written == 1
    assert types(store) == ["model_started", "model_completed"]
    assert [entry.entry_key for entry in store.load_entries("p", "s1")] == [row.entry_key]
    await events.close()
    assert types(store) == ["model_started", "model_completed"]  # nothing written twice


class FailingOnce(Store):
    """Refuses the first events append (as a database that is briefly gone would)."""

    failed = False

    def append_events(self, ref: RunRef, bodies: Any) -> list[int]:
        if not self.failed:
            self.failed = True
            raise OSError("database gone")
        return super().append_events(ref, bodies)


async def test_lost_events_are_counted_in_the_next_write(store: Store) -> None:
    failing = FailingOnce(store.engine)
    events = EventBuffer(context_on(failing), REF)
    await events.add_now({"type": "tool_started"}, {"type": "tool_completed"})
    assert types(store) == []
    await events.add_now({"type": "model_started"})
    stored = store.read_events("run-1")
    assert [r.event["type"] for r in stored] == ["events_lost", "model_started"]
    assert stored[0].event["count"] == 2
    await events.close()


@pytest.mark.parametrize("visibility", ["lifecycle_only"])
async def test_the_runs_visibility_applies(store: Store, visibility: str) -> None:
    child = REF.model_copy(update={"depth": 1, "event_visibility": visibility})
    events = EventBuffer(context_on(store), child)
    await events.add_now({"type": "model_delta", "content": "x"}, {"type": "run_started"})
    assert types(store) == ["run_started"]
    await events.close()


class BrieflyDownStore(Store):
    """A real store whose first lookup of events by call id meets a database that is down (the
    driver's error, as SQLAlchemy raises it): an outage, not a refusal."""

    lookups = 0

    def read_events_mentioning(self, root_run_id: str, values: Collection[str]) -> list[Any]:
        self.lookups += 1
        if self.lookups == 1:
            raise sqlalchemy.exc.OperationalError(
                "SELECT ...", {}, sqlite3.OperationalError("unable to open database file")
            )
        return super().read_events_mentioning(root_run_id, values)


async def test_the_lookup_of_owed_events_rides_out_a_database_outage(store: Store) -> None:
    """An `IF_MISSING` event is stored only if the run still lacks it: the store is asked which
    it holds, and an outage during that question is waited for like any store call
    (`ActivityContext.io`), instead of failing the activity's attempt."""
    down = BrieflyDownStore(store.engine)
    store.append_events(REF, [{"type": "tool_started", "tool_call_id": "c1"}])
    owed = [
        {"type": "tool_started", "tool_call_id": "c1", IF_MISSING: True},
        {"type": "tool_completed", "tool_call_id": "c1", IF_MISSING: True},
    ]
    context = context_on(down)
    bodies = await ActivityEnvironment().run(context.decided_bodies, REF, owed, once="end")
    assert down.lookups == 2
    assert [(body["type"], body["tool_call_id"]) for body in bodies] == [("tool_completed", "c1")]


async def test_an_owed_event_the_batch_itself_holds_is_not_stored_twice(store: Store) -> None:
    """A call answered in the workflow (a child's result: `tool_completed` decided) whose run
    then ends before the turn's entries were made: the end's `IF_MISSING` events for the same
    call come in the same batch, after it, and the store holds neither yet."""
    owed = [
        {"type": "tool_completed", "tool_call_id": "c1", "error": None},
        {"type": "tool_started", "tool_call_id": "c2", IF_MISSING: True},
        {"type": "tool_completed", "tool_call_id": "c1", "error": "ended", IF_MISSING: True},
    ]
    bodies = await ActivityEnvironment().run(context_on(store).decided_bodies, REF, owed, once="x")
    assert [(body["type"], body["tool_call_id"], body.get("error")) for body in bodies] == [
        ("tool_completed", "c1", None),
        ("tool_started", "c2", None),
    ]


def attempt(number: int) -> ActivityEnvironment:
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, attempt=number)
    return environment


async def test_decided_events_a_killed_attempt_did_not_store_are_stored_by_its_retry(
    store: Store,
) -> None:
    """An attempt killed before storing the events the workflow decided (a worker SIGKILLed
    in `prepare_call`) leaves them to its retry; a retry of an attempt that stored them adds
    nothing (found by a user: `tool_started` and `agent_call_started` lost for good)."""
    decided = [{"type": "tool_started", "tool_call_id": "c1", "tool_name": "agent.spawn"}]
    context = context_on(store)
    await attempt(2).run(context.emit_decided, REF, decided)
    await attempt(3).run(context.emit_decided, REF, decided)
    assert types(store) == ["tool_started"]
