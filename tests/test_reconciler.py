"""The reconciler (issue 46, "the record tells the truth"): a run whose end was never stored
(terminated from outside, timed out by Temporal, its finish refused by the store) no longer
stays `running` in the store for ever; its session is free again and its events end."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from otherone.api.streams import TERMINAL_EVENTS
from otherone.client.agent_client import build_request
from otherone.contracts import WORKFLOW_NAME
from otherone.errors import FailureCode
from otherone.runs import AgentFailure, RunOutcome, RunRecord, RunStatus
from otherone.store import Store
from otherone.store.lifecycle import EndStored, RunEnd
from otherone.store.records import EVENT_KEY, event_key
from otherone.store.run_store import OpenRecord, open_records_query
from otherone.store.schema import run_records
from otherone.worker.app import build_worker
from otherone.worker.reconciler import Reconciler, reconcile_once, temporal_end
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider

NOW_GRACE = timedelta(0)  # the tests look at records written just now


def _record(run_id: str, **fields: Any) -> RunRecord:
    values: dict[str, Any] = {
        "run_id": run_id,
        "root_run_id": run_id,
        "agent_id": "a",
        "session_id": f"s-{run_id}",
        "status": RunStatus.RUNNING,
        "started_at": datetime.now(UTC),
        **fields,
    }
    return RunRecord(**values)


def _ended(record: RunRecord) -> RunRecord:
    failure = AgentFailure(code=FailureCode.INTERNAL_ERROR, message="terminated in Temporal: x")
    return record.model_copy(update={"status": RunStatus.FAILED, "failure": failure})


def _end_event() -> dict[str, Any]:
    return {"type": "run_failed", "status": "failed"}


def _later() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


# the store ---------------------------------------------------------------------------------


def test_open_records_are_listed_oldest_first_across_partitions_in_pages(store: Store) -> None:
    for index, partition in enumerate(("p1", "p2", "p1")):
        store.upsert_run_record(_record(f"run-{index}", partition_key=partition))
    store.upsert_run_record(_ended(_record("run-done")))
    first = store.open_run_records(_later(), limit=2)
    assert [found.record.run_id for found in first] == ["run-0", "run-1"]
    assert [found.record.partition_key for found in first] == ["p1", "p2"]
    rest = store.open_run_records(_later(), limit=2, after=first[-1])
    assert [found.record.run_id for found in rest] == ["run-2"]
    # Written after the cutoff (within the grace): not listed.
    assert store.open_run_records(datetime.now(UTC) - timedelta(minutes=1)) == []


def test_a_run_is_closed_once_its_lease_given_back_and_its_end_appended(store: Store) -> None:
    record = _record("run-x", partition_key="p1")
    store.upsert_run_record(record)
    soon = datetime.now(UTC) + timedelta(hours=1)
    store.acquire_session("p1", "s-run-x", "run-x", internal=False, lease_until=soon)
    store.acquire_session("p1", "other", "run-y", internal=False, lease_until=soon)
    key = {EVENT_KEY: event_key("run-x", "finish")}
    assert store.close_open_run(_ended(record), [{**_end_event(), **key}]) is True
    assert store.close_open_run(_ended(record), [{**_end_event(), **key}]) is False
    stored = store.get_run_record("p1", "run-x")
    assert stored is not None and stored.status is RunStatus.FAILED
    assert stored.failure is not None and "terminated" in stored.failure.message
    assert store.session_holder("p1", "s-run-x") is None
    assert store.session_holder("p1", "other") == "run-y"  # only the run's own lease
    events = [event.event["type"] for event in store.read_events("run-x")]
    assert events == ["run_failed"]
    # The same key as the run's own finish: an end written by either is written once.
    assert store.open_run_records(_later()) == []
    with pytest.raises(ValueError):
        store.close_open_run(_record("run-z"))


def test_a_stored_end_is_never_replaced(store: Store) -> None:
    record = _record("run-done")
    completed = record.model_copy(update={"status": RunStatus.COMPLETED})
    store.upsert_run_record(completed)
    assert store.close_open_run(_ended(record), [_end_event()]) is False
    stored = store.get_run_record(record.partition_key, "run-done")
    assert stored is not None and stored.status is RunStatus.COMPLETED
    assert store.read_events("run-done") == []


def test_a_childs_end_event_is_written_only_where_its_start_is(store: Store) -> None:
    """A tree that keeps no events of its descendants (``root_only``) gets no child's end."""
    quiet = _record("root/a.c1", root_run_id="root", parent_run_id="root", depth=1)
    started = _record("root/a.c2", root_run_id="root", parent_run_id="root", depth=1)
    for child in (quiet, started):
        store.upsert_run_record(child)
    ref_started = {"type": "run_started", EVENT_KEY: event_key(started.run_id, "started")}
    from otherone.contracts import RunRef

    ref = RunRef(
        run_id=started.run_id,
        root_run_id="root",
        parent_run_id="root",
        agent_id="a",
        depth=1,
        partition_key=started.partition_key,
        session_id="s",
        snapshot_version="",
    )
    store.append_events(ref, [ref_started])
    assert store.close_open_run(_ended(quiet), [_end_event()])
    assert store.close_open_run(_ended(started), [_end_event()])
    ends = [(e.run_id, e.event["type"]) for e in store.read_events("root")]
    assert ends == [(started.run_id, "run_started"), (started.run_id, "run_failed")]


def test_closers_racing_close_a_record_once(store: Store) -> None:
    records = [_record(f"run-{index}") for index in range(8)]
    for record in records:
        store.upsert_run_record(record)
    won: list[bool] = []
    barrier = threading.Barrier(2)

    def close_all() -> None:
        barrier.wait()
        for record in records:
            key = {EVENT_KEY: event_key(record.run_id, "finish")}
            won.append(store.close_open_run(_ended(record), [{**_end_event(), **key}]))

    threads = [threading.Thread(target=close_all) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert won.count(True) == len(records)
    for record in records:
        assert [e.event["type"] for e in store.read_events(record.run_id)] == ["run_failed"]


# with Temporal -----------------------------------------------------------------------------


def _config() -> Any:
    return scripted_config({"worker": ["first answer", "second answer", "third answer"]})


def _request(session_id: str, text: str = "go") -> Any:
    return build_request(entry_agent="worker", input=text, session={"session_id": session_id})


def _event_types(store: Store, run_id: str) -> list[str]:
    return [str(event.event.get("type")) for event in store.read_events(run_id)]


async def _stuck(client: Client, store: Store) -> list[str]:
    """Run ids the store says run whose runs Temporal reports ended: stuck for ever."""
    found = await asyncio.to_thread(store.open_run_records, _later(), limit=1000)
    return [f.record.run_id for f in found if await temporal_end(client, f.record) is not None]


async def test_a_run_terminated_from_outside_is_closed_and_its_session_freed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("worker", 1)
    session = f"chat-{uuid.uuid4().hex[:8]}"
    async with agent_env(
        client, task_queue, _config(), tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(_request(session))
        await wait_until(lambda: bool(provider.requests), message="the run's model call")
        await client.get_workflow_handle(handle.run_id).terminate(reason="by hand")
        stored = env.store.get_run_record("local", handle.run_id)
        assert stored is not None and stored.status is RunStatus.RUNNING  # stuck, so far
        assert await _stuck(client, env.store) == [handle.run_id]

        done = await reconcile_once(client, env.store, grace=NOW_GRACE)

        assert done.closed == {"failed": 1} and done.checked == 1
        record = env.store.get_run_record("local", handle.run_id)
        assert record is not None and record.status is RunStatus.FAILED
        assert record.failure is not None and record.failure.code is FailureCode.INTERNAL_ERROR
        assert record.failure.message == "terminated in Temporal: by hand"
        assert record.finished_at is not None and record.agent_id == "worker"
        assert env.store.session_holder("local", session) is None
        types = _event_types(env.store, handle.run_id)
        assert types[0] == "run_started" and types[-1] in TERMINAL_EVENTS, types
        assert types.count("run_failed") == 1
        assert await _stuck(client, env.store) == []
        # Nothing more to close; the session takes a new run (its lease was given back).
        again = await reconcile_once(client, env.store, grace=NOW_GRACE)
        assert again.closed_count == 0
        gate.set()
        result = await env.agents.run(_request(session, "again"))
        assert result.outcome is RunOutcome.COMPLETED, result.failure


async def test_a_run_timed_out_by_temporal_is_closed_timed_out(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("worker", 1)
    run_id = f"run-timeout-{uuid.uuid4().hex[:8]}"
    async with agent_env(
        client, task_queue, _config(), tmp_path, providers={"scripted": provider}
    ) as env:
        raw = {
            "run_id": run_id,
            "root_run_id": run_id,
            "request": {"entry_agent": "worker", "input": "go"},
        }
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            raw,
            id=run_id,
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=3),
        )
        with pytest.raises(WorkflowFailureError):
            await handle.result()  # Temporal's own timeout ends it
        done = await reconcile_once(client, env.store, grace=NOW_GRACE)
        record = env.store.get_run_record("local", run_id)
        types = _event_types(env.store, run_id)
    assert done.closed == {"timed_out": 1}
    assert record is not None and record.status is RunStatus.TIMED_OUT
    assert record.failure is not None and record.failure.code is FailureCode.TIMED_OUT
    # One end, and nothing of the run's after it; the model call Temporal cancelled with the
    # run may store its own end later (racing the reconciler), which is true and harmless.
    assert types.count("run_failed") == 1, types
    after_end = types[types.index("run_failed") + 1 :]
    assert all(not kind.startswith("run_") for kind in after_end), types


class EndRefusingStore(Store):
    """A real store that refuses every run's end (`end_run`) while ``refusing``."""

    refusing = True

    def end_run(self, end: RunEnd) -> EndStored:
        if self.refusing:
            # A statement the database refuses (not an outage): finish_run fails at once.
            raise IntegrityError("INSERT ...", None, Exception("the run's end was refused"))
        return super().end_run(end)


async def test_a_run_whose_end_the_store_refused_gets_temporals_outcome(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    store = EndRefusingStore(Store.open(f"sqlite:///{tmp_path / 'refusing.db'}").engine)
    try:
        async with agent_env(client, task_queue, _config(), tmp_path, store=store) as env:
            handle = await env.agents.start(_request(f"chat-{uuid.uuid4().hex[:8]}"))
            result = await handle.result()
            # Temporal has the run's end; the store still says it runs.
            assert result.outcome is RunOutcome.FAILED, result
            assert result.failure is not None
            assert result.failure.code is FailureCode.STORAGE_ERROR
            stored = store.get_run_record("local", handle.run_id)
            assert stored is not None and stored.status is RunStatus.RUNNING
            store.refusing = False  # the store is back

            done = await reconcile_once(client, store, grace=NOW_GRACE)

            record = store.get_run_record("local", handle.run_id)
            assert done.closed == {"failed": 1}
            assert record is not None and record.status is RunStatus.FAILED
            assert record.failure == result.failure  # the end Temporal has, as it has it
            assert record.usage == result.usage
            assert _event_types(store, handle.run_id)[-1] == "run_failed"
            assert store.session_holder("local", result.session_id) is None
            assert await _stuck(client, store) == []
    finally:
        store.close()


async def test_a_running_run_is_left_alone_and_racing_passes_close_each_run_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("worker", 1)
    async with agent_env(
        client, task_queue, _config(), tmp_path, providers={"scripted": provider}
    ) as env:
        live = await env.agents.start(_request(f"live-{uuid.uuid4().hex[:8]}"))
        ended = [await env.agents.start(_request(f"t-{uuid.uuid4().hex[:8]}")) for _ in range(2)]
        await wait_until(lambda: len(provider.requests) == 3, message="three model calls")
        for handle in ended:
            await client.get_workflow_handle(handle.run_id).terminate(reason="by hand")

        passes = await asyncio.gather(
            *(reconcile_once(client, env.store, grace=NOW_GRACE) for _ in range(2)),
            Reconciler(client, env.store, grace=NOW_GRACE, batch=1).reconcile_once(),
        )

        assert sum(done.closed_count for done in passes) == 2
        for handle in ended:
            types = _event_types(env.store, handle.run_id)
            assert [t for t in types if t in TERMINAL_EVENTS] == ["run_failed"], types
        record = env.store.get_run_record("local", live.run_id)
        assert record is not None and record.status is RunStatus.RUNNING
        assert await _stuck(client, env.store) == []
        gate.set()
        result = await live.result()
        assert result.outcome is RunOutcome.COMPLETED
        final = env.store.get_run_record("local", live.run_id)
        assert final is not None and final.status is RunStatus.COMPLETED


async def test_a_pass_goes_on_after_a_batch_of_runs_that_still_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Bounded passes walk on: runs still running at the head of the list do not hide an
    ended one behind them."""
    provider = RecordingProvider()
    gate = provider.gate("worker", 1)
    async with agent_env(
        client, task_queue, _config(), tmp_path, providers={"scripted": provider}
    ) as env:
        handles = [await env.agents.start(_request(f"p-{uuid.uuid4().hex[:8]}")) for _ in range(3)]
        await wait_until(lambda: len(provider.requests) == 3, message="three model calls")
        listed = env.store.open_run_records(_later())
        assert len(listed) == 3
        last = listed[-1].record.run_id  # behind the two others in every pass's order
        await client.get_workflow_handle(last).terminate(reason="by hand")
        reconciler = Reconciler(client, env.store, grace=NOW_GRACE, batch=2)
        first = await reconciler.reconcile_once()
        second = await reconciler.reconcile_once()
        assert (first.checked, first.closed_count) == (2, 0)
        assert (second.checked, second.closed_count) == (1, 1)
        gate.set()
        for handle in handles:
            if handle.run_id != last:
                assert (await handle.result()).outcome is RunOutcome.COMPLETED


async def test_a_worker_built_to_reconcile_closes_a_record_temporal_never_heard_of(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`build_worker(reconcile_every=...)` runs the reconciler while the worker runs; a record
    whose run Temporal does not know (past its retention) is closed as failed."""
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        record = _record(f"run-gone-{uuid.uuid4().hex[:8]}", partition_key="p1")
        store.upsert_run_record(record)
        store.acquire_session(
            "p1", "s-gone", record.run_id, internal=False, lease_until=_later() + timedelta(hours=1)
        )
        with store.engine.begin() as conn:  # written long ago: past the reconciler's grace
            conn.execute(
                update(run_records).values(updated_at=datetime.now(UTC) - timedelta(minutes=5))
            )
        worker = build_worker(
            client, _config(), store, task_queue=task_queue, reconcile_every=timedelta(seconds=0.1)
        )

        def closed() -> bool:
            stored = store.get_run_record("p1", record.run_id)
            return stored is not None and stored.status.is_terminal

        async with worker:
            await wait_until(closed, message="the record closed by the worker's reconciler")
        stored = store.get_run_record("p1", record.run_id)
        assert stored is not None and stored.status is RunStatus.FAILED
        assert stored.failure is not None and "not found in Temporal" in stored.failure.message
        assert _event_types(store, record.run_id) == ["run_failed"]
    finally:
        store.close()


@workflow.defn(name="otherone-test-broken-run")
class BrokenRun:
    """A run's workflow that fails (as a bug in workflow code would end it)."""

    @workflow.run
    async def run(self) -> None:
        raise ApplicationError("a bug", non_retryable=True)


async def test_a_run_whose_workflow_failed_is_closed_failed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        record = _record(f"run-broken-{uuid.uuid4().hex[:8]}")
        store.upsert_run_record(record)
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[BrokenRun],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            handle = await client.start_workflow(
                BrokenRun.run, id=record.run_id, task_queue=task_queue
            )
            with pytest.raises(WorkflowFailureError):
                await handle.result()
        done = await reconcile_once(client, store, grace=NOW_GRACE)
        stored = store.get_run_record(record.partition_key, record.run_id)
    finally:
        store.close()
    assert done.closed == {"failed": 1}
    assert stored is not None and stored.status is RunStatus.FAILED
    assert stored.failure is not None and stored.failure.message == "failed in Temporal: a bug"


@pytest.mark.parametrize("page", ["first", "next"])
def test_the_open_records_query_reads_by_its_index(store: Store, page: str) -> None:
    """A pass reads the open records by ``ix_otherone_run_records_open`` (status, time
    written), not the whole table of mostly ended runs. PostgreSQL is told to avoid a
    sequential scan where it can (on a table this small it would scan): the plan shows
    that it can."""
    record = _record(f"run-{uuid.uuid4().hex[:8]}")
    store.upsert_run_record(record)
    after = OpenRecord(record, datetime.now(UTC)) if page == "next" else None
    query = open_records_query(_later(), 100, after)
    compiled = query.compile(
        dialect=store.engine.dialect, compile_kwargs={"render_postcompile": True}
    )
    params: Any = compiled.params
    if compiled.positiontup:
        params = tuple(compiled.params[name] for name in compiled.positiontup)
    with store.engine.connect() as conn:
        if store.engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params).all()
            plan = "\n".join(str(row[-1]) for row in rows)
        else:
            conn.exec_driver_sql("SET enable_seqscan = off")
            plan = "\n".join(conn.exec_driver_sql(f"EXPLAIN {compiled}", params).scalars())
    assert "ix_otherone_run_records_open" in plan, plan
