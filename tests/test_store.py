"""The store on SQLite and PostgreSQL: migrations, idempotent writes, leases, tenant isolation.

Why: every activity writes through the store and Temporal may run an activity twice, so each
write must be idempotent; several workers share one database, so migrations, session leases
and event sequences must hold under concurrency; and the partition key is the tenant boundary,
so no Store method may let one tenant see another's rows. Each test runs on both backends
(``store_url`` / ``store`` in ``conftest.py``), on an empty database of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, insert, inspect, select, text, update
from sqlalchemy.exc import IntegrityError

from otherone.activities.lost_attempts import LOST_ATTEMPT, model_completed_key
from otherone.contracts import EventRecord, RunRef
from otherone.errors import ConfigurationError
from otherone.examples import EXAMPLE_CONFIG
from otherone.runs import AgentFailure, AgentOutput, RunRecord, RunStatus, RunUsage
from otherone.store import EntryRow, SessionBusyError, Store, StoreError
from otherone.store.events import EVENT_APPEND_ATTEMPTS, EntryEvents
from otherone.store.migrate import BASELINE_REVISION, VERSION_TABLE, alembic_config, head_revision
from otherone.store.records import KeyedRun, aware
from otherone.store.schema import FLEET_TABLES, PARTITIONED_TABLES, events, memory_points, metadata
from otherone.toml_config import load_config
from otherone.worker.retention import prune_once

REPO_ROOT = Path(__file__).resolve().parent.parent
OUR_TABLES = {table.name for table in metadata.sorted_tables}
_T = TypeVar("_T")


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def _ref(root: str, run: str | None = None, *, partition: str = "tenant-a") -> RunRef:
    return RunRef(
        run_id=run or root,
        root_run_id=root,
        agent_id="assistant",
        partition_key=partition,
        session_id="s-1",
        snapshot_version="v1",
    )


def _record(run_id: str, **fields: Any) -> RunRecord:
    values: dict[str, Any] = {
        "run_id": run_id,
        "root_run_id": "root-1",
        "agent_id": "assistant",
        "partition_key": "tenant-a",
        "status": RunStatus.RUNNING,
    }
    values.update(fields)
    return RunRecord(**values)


def _in_threads(count: int, work: Callable[[int], _T]) -> list[_T]:
    """Run ``work(i)`` in ``count`` threads started together; re-raise the first error."""
    barrier = threading.Barrier(count)
    results: dict[int, _T] = {}
    errors: list[BaseException] = []

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work(index)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    return [results[index] for index in range(count)]


# --------------------------------------------------------------------------- migrations


def test_migrations_create_every_table_and_a_second_open_is_a_no_op(store_url: str) -> None:
    store = Store.open(store_url, migrate=False)
    try:
        assert _tables(store.engine) == set()
        first = store.upgrade()
        assert (first.before, first.after) == (None, head_revision()) and first.changed
        assert _tables(store.engine) == OUR_TABLES | {VERSION_TABLE}
        store.append_entries("p", "s", [EntryRow("k1", "user", "hello")])
    finally:
        store.close()

    again = Store.open(store_url)
    try:
        result = again.upgrade()
        assert (result.before, result.after) == (head_revision(), head_revision())
        assert not result.changed
        assert [row.content for row in again.load_entries("p", "s")] == ["hello"]
    finally:
        again.close()


def test_schema_module_matches_the_migrations(store: Store) -> None:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        assert compare_metadata(context, metadata) == []


def test_downgrade_to_base_and_upgrade_again(store: Store) -> None:
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "base")
    assert _tables(store.engine) <= {VERSION_TABLE}
    assert store.upgrade().after == head_revision()
    assert _tables(store.engine) == OUR_TABLES | {VERSION_TABLE}


def test_database_created_before_migrations_is_adopted(store_url: str) -> None:
    """A database made by the old ``create_all`` (the baseline schema, no version table)."""
    legacy = Store.open(store_url, migrate=False)
    try:
        with legacy.engine.begin() as conn:
            command.upgrade(alembic_config(conn), BASELINE_REVISION)
            conn.execute(text(f"DROP TABLE {VERSION_TABLE}"))
            conn.execute(
                text(
                    "INSERT INTO otherone_entries (partition_key, session_id, entry_key, role, "
                    "content, created_at) VALUES ('p', 's', 'old', 'user', 'from before', "
                    "CURRENT_TIMESTAMP)"
                )
            )
        result = legacy.upgrade()
        assert (result.before, result.after) == (BASELINE_REVISION, head_revision())
        [row] = legacy.load_entries("p", "s")
        assert (row.content, row.tokens, row.meta) == ("from before", None, None)
    finally:
        legacy.close()


def test_concurrent_opens_of_a_new_database_migrate_once(store_url: str) -> None:
    stores = _in_threads(4, lambda _: Store.open(store_url))
    try:
        assert _tables(stores[0].engine) == OUR_TABLES | {VERSION_TABLE}
        with stores[0].engine.connect() as conn:
            versions = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
        assert versions == [(head_revision(),)]
    finally:
        for opened in stores:
            opened.close()


def test_unsupported_urls_are_configuration_errors() -> None:
    for url in ("sqlite://", "sqlite:///:memory:", "mysql://u@localhost/db", "not a url"):
        with pytest.raises(ConfigurationError):
            Store.open(url)


def test_unreachable_postgresql_is_a_store_error() -> None:
    # Said as it is: any command opening the store reads it, not only migrations.
    with pytest.raises(StoreError, match="cannot reach the database"):
        Store.open("postgresql://postgres@127.0.0.1:1/nothing")


# --------------------------------------------------------------------------- entries


def test_appending_entries_again_with_the_same_keys_writes_nothing(store: Store) -> None:
    rows = [
        EntryRow("u1", "user", "What is the weather?"),
        EntryRow(
            "a1",
            "assistant",
            "",
            tool_calls=[{"id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}],
            usage={"input_tokens": 10},
            meta={"turn": 1},
        ),
        EntryRow("t1", "tool", "sunny", tool_call_id="c1", tool_name="get_weather", tokens=99),
    ]
    assert store.append_entries("p", "s", rows) == 3
    assert store.append_entries("p", "s", rows) == 0  # the activity retried
    assert store.append_entries("p", "s", [*rows, EntryRow("u2", "user", "And tomorrow?")]) == 1

    loaded = store.load_entries("p", "s")
    assert [row.entry_key for row in loaded] == ["u1", "a1", "t1", "u2"]
    ids = [row.id for row in loaded if row.id is not None]
    assert len(ids) == 4 and ids == sorted(set(ids))  # assigned, in append order
    first, call, result, _ = loaded
    assert first.tokens == len(b"What is the weather?") // 4
    assert call.tokens is not None and call.tokens > 1  # the tool call counts, not the ""
    assert call.tool_calls == rows[1].tool_calls and call.meta == {"turn": 1}
    assert call.usage == {"input_tokens": 10}
    assert result.tokens == 99 and result.tool_call_id == "c1"
    assert store.get_entry("p", "s", "t1") == result
    assert store.get_entry("p", "s", "missing") is None


def test_load_entries_after_an_id(store: Store) -> None:
    store.append_entries("p", "s", [EntryRow(f"k{i}", "user", f"m{i}") for i in range(5)])
    store.append_entries("p", "other", [EntryRow("x", "user", "elsewhere")])
    everything = store.load_entries("p", "s")
    cut = everything[2].id
    assert cut is not None
    after = store.load_entries("p", "s", after_id=cut)
    assert [row.content for row in after] == ["m3", "m4"]
    assert store.load_entries("p", "s", after_id=everything[-1].id) == []
    assert [row.content for row in store.load_entries("p", "s", after_id=0)] == [
        f"m{i}" for i in range(5)
    ]


def test_tool_results_are_replaced_by_a_retry(store: Store) -> None:
    store.put_tool_result("p", "run-1", "c1", tool_name="t", content="first", error_kind=None)
    store.put_tool_result("p", "run-1", "c1", tool_name="t", content="second", error_kind="fatal")
    store.put_tool_result("p", "run-1", "c2", tool_name="t", content="other", error_kind=None)
    assert store.get_tool_results("p", "run-1", ["c1", "c2", "c3"]) == {
        "c1": "second",
        "c2": "other",
    }
    assert store.get_tool_results("p", "run-1", []) == {}


def test_snapshots_are_saved_once_by_version(store: Store) -> None:
    snapshot = load_config(EXAMPLE_CONFIG).snapshot()
    store.save_snapshot(snapshot)
    store.save_snapshot(snapshot)
    assert store.load_snapshot(snapshot.version) == snapshot
    assert store.load_snapshot("unknown") is None


# --------------------------------------------------------------------------- sessions


def test_session_lease_is_exclusive_reentrant_expiring_and_released_by_holder(
    store: Store,
) -> None:
    soon = datetime.now(UTC) + timedelta(minutes=5)
    store.acquire_session("p", "s", "run-a", internal=False, lease_until=soon)
    store.acquire_session("p", "s", "run-a", internal=False, lease_until=soon)  # re-entrant
    with pytest.raises(SessionBusyError) as busy:
        store.acquire_session("p", "s", "run-b", internal=False, lease_until=soon)
    assert busy.value.holder == "run-a"

    store.release_session("p", "s", "run-b")  # not the holder: no effect
    with pytest.raises(SessionBusyError):
        store.acquire_session("p", "s", "run-b", internal=False, lease_until=soon)
    store.release_session("p", "s", "run-a")
    store.acquire_session("p", "s", "run-b", internal=False, lease_until=soon)

    # An expired lease is free for anyone (its run died without releasing it).
    past = datetime.now(UTC) - timedelta(seconds=1)
    store.acquire_session("p", "s2", "run-c", internal=False, lease_until=past)
    store.acquire_session("p", "s2", "run-d", internal=False, lease_until=soon)
    [info] = [info for info in store.session_infos("p") if info.session_id == "s2"]
    assert info.holder(datetime.now(UTC)) == "run-d"
    # A lease given in another time zone compares correctly (stored as UTC).
    other_zone = (datetime.now(UTC) + timedelta(minutes=5)).astimezone(
        datetime.now().astimezone().tzinfo
    )
    store.acquire_session("p", "s3", "run-e", internal=False, lease_until=other_zone)
    with pytest.raises(SessionBusyError):
        store.acquire_session("p", "s3", "run-f", internal=False, lease_until=soon)


def test_racing_runs_cannot_both_take_a_session(store: Store) -> None:
    soon = datetime.now(UTC) + timedelta(minutes=5)

    def take(index: int) -> bool:
        try:
            store.acquire_session(
                "p", "contested", f"run-{index}", internal=False, lease_until=soon
            )
        except SessionBusyError:
            return False
        return True

    assert sum(_in_threads(4, take)) == 1


def test_list_sessions_hides_internal_sessions_unless_asked(store: Store) -> None:
    soon = datetime.now(UTC) + timedelta(minutes=5)
    store.acquire_session("p", "chat", "run-1", internal=False, lease_until=soon)
    store.acquire_session("p", "child-session", "run-2", internal=True, lease_until=soon)
    assert store.list_sessions("p") == ["chat"]
    assert store.list_sessions("p", include_internal=True) == ["chat", "child-session"]
    infos = store.session_infos("p", include_internal=True)
    assert [(info.session_id, info.internal) for info in infos] == [
        ("chat", False),
        ("child-session", True),
    ]
    assert infos[0].lease_run_id == "run-1" and infos[0].lease_until is not None


# --------------------------------------------------------------------------- compactions


def test_latest_compaction_and_idempotent_adds(store: Store) -> None:
    assert store.latest_compaction("p", "s") is None
    store.add_compaction("p", "s", key="c-1", summary="first", up_to_entry_id=4, tokens=10)
    store.add_compaction("p", "s", key="c-1", summary="retry", up_to_entry_id=9, tokens=99)
    latest = store.latest_compaction("p", "s")
    assert latest is not None
    assert (latest.compaction_key, latest.summary, latest.up_to_entry_id, latest.tokens) == (
        "c-1",
        "first",
        4,
        10,
    )
    store.add_compaction("p", "s", key="c-2", summary="second", up_to_entry_id=12, tokens=20)
    latest = store.latest_compaction("p", "s")
    assert latest is not None and (latest.summary, latest.up_to_entry_id) == ("second", 12)
    assert latest.created_at.tzinfo is not None
    assert store.latest_compaction("p", "other") is None


# --------------------------------------------------------------------------- artifacts


def test_artifacts_round_trip_including_a_10_mb_blob(store: Store) -> None:
    big = os.urandom(1024) * (10 * 1024)  # 10 MiB
    store.put_artifact(
        "p",
        artifact_id="a-big",
        run_id="run-1",
        name="dump.bin",
        media_type="application/x",
        content=big,
    )
    store.put_artifact(  # a retry with the same id keeps the first
        "p",
        artifact_id="a-big",
        run_id="run-1",
        name="other",
        media_type="text/plain",
        content=b"x",
    )
    store.put_artifact(
        "p",
        artifact_id="a-small",
        run_id="run-1",
        name="n.txt",
        media_type="text/plain",
        content=b"",
    )
    artifact = store.get_artifact("p", "a-big")
    assert artifact is not None
    assert artifact.content == big and artifact.size_bytes == len(big) == 10 * 1024 * 1024
    assert (artifact.name, artifact.media_type, artifact.run_id) == (
        "dump.bin",
        "application/x",
        "run-1",
    )
    small = store.get_artifact("p", "a-small")
    assert small is not None and small.content == b"" and small.size_bytes == 0
    assert store.get_artifact("p", "missing") is None


# --------------------------------------------------------------------------- run records


def test_keyed_runs_keep_their_first_fingerprint_per_partition(store: Store) -> None:
    """What a keyed start asks before it starts (issue 46): the kept fingerprint, else whether
    the run's record exists; the first fingerprint kept stays; partitions are apart."""
    assert store.keyed_run("tenant-a", "key-1") is None
    store.upsert_run_record(_record("key-1", root_run_id="key-1"))
    assert store.keyed_run("tenant-a", "key-1") == KeyedRun(None)
    store.keep_idempotency_fingerprint("tenant-a", "key-1", "f" * 64)
    store.keep_idempotency_fingerprint("tenant-a", "key-1", "0" * 64)  # a late loser: ignored
    assert store.keyed_run("tenant-a", "key-1") == KeyedRun("f" * 64)
    assert store.keyed_run("tenant-b", "key-1") is None
    store.keep_idempotency_fingerprint("tenant-b", "key-2", "e" * 64)  # no record needed
    assert store.keyed_run("tenant-b", "key-2") == KeyedRun("e" * 64)


def test_a_run_record_is_found_by_run_id_alone(store: Store) -> None:
    record = _record("only-1", root_run_id="only-1", partition_key="tenant-b")
    store.upsert_run_record(record)
    assert store.find_run_record("only-1") == record
    assert store.find_run_record("only-1", "tenant-b") == record
    assert store.find_run_record("only-1", "tenant-a") is None
    assert store.find_run_record("missing") is None


def test_run_records_upsert_and_list_by_root(store: Store) -> None:
    started = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    root = _record("root-1", session_id="s", started_at=started, agent_definition_version=3)
    child = _record(
        "child-1",
        parent_run_id="root-1",
        agent_call_id="call-1",
        depth=1,
        started_at=started + timedelta(seconds=1),
    )
    other_tree = _record("root-2", root_run_id="root-2")
    for record in (child, root, other_tree):
        store.upsert_run_record(record)
    assert store.get_run_record("tenant-a", "root-1") == root

    done = root.model_copy(
        update={
            "status": RunStatus.COMPLETED,
            "iteration": 2,
            "finished_at": started + timedelta(seconds=5),
            "usage": RunUsage(model_calls=2, total_tokens=30),
            "output": AgentOutput(type="json", value={"answer": 42}),
            "metadata": {"source": "test"},
        }
    )
    store.upsert_run_record(done)
    assert store.get_run_record("tenant-a", "root-1") == done
    store.upsert_run_record(root)  # a late non-terminal write does not undo the end
    assert store.get_run_record("tenant-a", "root-1") == done

    failed = child.model_copy(
        update={
            "status": RunStatus.FAILED,
            "failure": AgentFailure(code="tool_error", message="boom", retryable=False),
        }
    )
    store.upsert_run_record(failed)
    assert store.list_run_records("tenant-a", "root-1") == [done, failed]
    assert store.list_run_records("tenant-a", "root-2") == [other_tree]
    assert store.get_run_record("tenant-a", "missing") is None


# --------------------------------------------------------------------------- events


def test_events_have_one_sequence_per_root(store: Store) -> None:
    assert store.append_events(_ref("root-1"), [{"type": "run_started"}]) == [1]
    assert store.append_events(_ref("root-1", "child"), [{"type": "a"}, {"type": "b"}]) == [2, 3]
    assert store.append_events(_ref("root-2"), [{"type": "run_started"}]) == [1]
    assert store.append_events(_ref("root-1"), []) == []

    records = store.read_events("root-1")
    assert [(r.sequence, r.run_id, r.event["type"]) for r in records] == [
        (1, "root-1", "run_started"),
        (2, "child", "a"),
        (3, "child", "b"),
    ]
    assert [r.sequence for r in store.read_events("root-1", after=1, limit=1)] == [2]
    assert [r.sequence for r in store.read_events("root-1", partition_key="tenant-a")] == [1, 2, 3]
    assert store.read_events("root-1", partition_key="tenant-b") == []


def test_an_event_is_stored_as_its_record_writes_itself(store: Store) -> None:
    """The store builds an event's JSON itself (not through `EventRecord`, for speed): it must
    be exactly what the record's own serialisation gives, every field of it."""
    body = {
        "type": "model_completed",
        "turn": 2,
        "usage": {"input_tokens": 7, "cost": 0.25},
        "text": 'héllo \u2713 "quoted"\n',
        "missing": None,
        "calls": [{"id": "c1", "arguments": "{}"}],
    }
    store.append_events(_ref("root-1", "child"), [body])
    with store.engine.connect() as conn:
        stored = conn.execute(select(events.c.body, events.c.created_at)).one()
    record = EventRecord.model_validate_json(stored.body)
    assert stored.body == record.model_dump_json()
    assert json.loads(stored.body).keys() == EventRecord.model_fields.keys()
    assert (record.run_id, record.root_run_id, record.depth, record.event) == (
        "child",
        "root-1",
        0,
        body,
    )
    assert record.timestamp == aware(stored.created_at)
    assert len({r.event_id for r in _many_events(store)}) == 50
    # Not JSON numbers: stored as null, as the record writes them.
    store.append_events(_ref("root-3"), [{"type": "x", "ratio": float("nan")}])
    assert store.read_events("root-3")[0].event == {"type": "x", "ratio": None}


def test_an_attempts_late_end_after_a_retry_closed_it_is_not_stored_again(store: Store) -> None:
    """A retry stores the end of an attempt that looked lost; when that attempt was alive after
    all (a stalled worker) and stores its own end late, the shared key keeps one end."""
    ref = _ref("root-lost")
    store.append_events(ref, [{"type": "model_started", "turn": 1, "attempt": 1}])
    for error in (LOST_ATTEMPT, "cancelled"):
        end = {"type": "model_completed", "turn": 1, "attempt": 1, "error": error}
        store.append_events(ref, [{**end, **model_completed_key(ref, 1, 1)}])
    # The next attempt's own end has a key of its own.
    store.append_events(ref, [{**end, "attempt": 2, **model_completed_key(ref, 1, 2)}])
    stored = [(e.event.get("attempt"), e.event.get("error")) for e in store.read_events(ref.run_id)]
    assert stored == [(1, None), (1, LOST_ATTEMPT), (2, "cancelled")]


def _many_events(store: Store) -> list[EventRecord]:
    store.append_events(_ref("root-2"), [{"type": "x"}] * 50)
    return store.read_events("root-2")


def test_events_mentioning_a_value_are_found_without_reading_the_tree(store: Store) -> None:
    """The question a run's end asks ("which events of these calls are stored?") is answered
    from the events that hold the call ids as JSON strings: not `call_1` inside `call_10`, not
    LIKE wildcards, not another tree; quotes and non-ASCII ids as stored."""
    odd = ["call_1", "a%b", "x_y", 'q"uote', "café"]
    store.append_events(
        _ref("root-1"),
        [
            {"type": "tool_started", "tool_call_id": "call_10"},
            {"type": "tool_started", "tool_call_id": "call_1"},
            {"type": "model_delta", "text": "call_1 without quotes"},
            {"type": "tool_started", "tool_call_id": "aXb"},
            {"type": "tool_started", "tool_call_id": "xzy"},
            *({"type": "tool_completed", "tool_call_id": call} for call in odd[1:]),
        ],
    )
    store.append_events(
        _ref("root-1", "child"), [{"type": "agent_call_started", "call_id": "call_1"}]
    )
    store.append_events(_ref("root-2"), [{"type": "tool_started", "tool_call_id": "call_1"}])

    found = store.read_events_mentioning("root-1", odd)
    assert [(r.sequence, r.run_id, r.event["type"]) for r in found] == [
        (2, "root-1", "tool_started"),
        (6, "root-1", "tool_completed"),
        (7, "root-1", "tool_completed"),
        (8, "root-1", "tool_completed"),
        (9, "root-1", "tool_completed"),
        (10, "child", "agent_call_started"),
    ]
    assert store.read_events_mentioning("root-1", []) == []
    assert store.read_events_mentioning("root-3", ["call_1"]) == []


def test_events_mentioning_many_values_are_asked_in_batches(store: Store) -> None:
    """A run that ends in a turn of many open calls (more than its tool-call budget: the run
    ends before any runs) asks about all of them at once: the question must not outgrow
    SQLite's expression depth (1000) or a statement's parameters. An event that mentions
    values of two batches comes back once."""
    calls = [f"call_{index}" for index in range(2500)]
    store.append_events(
        _ref("root-1"),
        [
            *({"type": "tool_started", "tool_call_id": call} for call in calls[::100]),
            {"type": "tool_completed", "tool_call_id": calls[0], "error": calls[-1]},
        ],
    )
    found = store.read_events_mentioning("root-1", calls)
    assert [(r.sequence, r.event["tool_call_id"]) for r in found] == [
        *((index + 1, call) for index, call in enumerate(calls[::100])),
        (26, calls[0]),
    ]


def test_retention_prunes_whole_quiet_trees_only(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    now = datetime.now(UTC)
    store.append_events(_ref("root-quiet"), [{"type": "run_started"}, {"type": "run_completed"}])
    store.append_events(_ref("root-live"), [{"type": "run_started"}])
    store.append_events(_ref("root-waiting"), [{"type": "run_started"}])
    # root-waiting has been quiet for days but has not ended (e.g. waits for a message).
    store.upsert_run_record(_record("root-waiting", root_run_id="root-waiting"))
    store.upsert_run_record(
        _record("root-quiet", root_run_id="root-quiet", status=RunStatus.COMPLETED)
    )
    with store.engine.begin() as conn:  # age all but the event root-live appends below
        conn.execute(
            update(events)
            .where(events.c.root_run_id.in_(["root-quiet", "root-live", "root-waiting"]))
            .values(created_at=now - timedelta(days=10))
        )
    store.append_events(_ref("root-live"), [{"type": "model_started"}])

    assert store.prune_events(now - timedelta(days=7)) == 2
    assert store.read_events("root-quiet") == []
    # A tree still active keeps its old events too: its sequence must never restart.
    assert [r.sequence for r in store.read_events("root-live")] == [1, 2]
    assert [r.sequence for r in store.read_events("root-waiting")] == [1]
    assert store.prune_events(now - timedelta(days=7)) == 0
    assert asyncio.run(prune_once(store, timedelta(days=7))) == 0  # what a worker runs hourly
    with caplog.at_level(logging.INFO, logger="otherone.worker.retention"):
        assert asyncio.run(prune_once(store, timedelta(0))) == 2  # root-live, quiet from now on
    assert "pruned 2 events of run trees quiet since" in caplog.text  # operators see it


def test_concurrent_appenders_leave_no_gaps_or_duplicates(store: Store) -> None:
    batches = 25

    def append(index: int) -> list[int]:
        ref = _ref("root-busy", f"run-{index}")
        written: list[int] = []
        for batch in range(batches):
            written += store.append_events(ref, [{"n": batch}, {"n": batch}])
        return written

    first, second = _in_threads(2, append)
    total = 2 * batches * 2
    assert sorted(first + second) == list(range(1, total + 1))
    records = store.read_events("root-busy", limit=total + 10)
    assert [record.sequence for record in records] == list(range(1, total + 1))
    assert {record.run_id for record in records} == {"run-0", "run-1"}


class _Refused:
    """A prepared statement the database refuses (as a unique constraint would), counted."""

    def __init__(self) -> None:
        self.calls = 0

    def run_many(self, conn: Any, rows: Any) -> None:
        self.rows(conn, rows)

    def rows(self, conn: Any, values: Any) -> list[Any]:
        self.calls += 1
        raise IntegrityError("INSERT", {}, Exception("refused"))


def test_event_writers_retry_a_taken_sequence_then_give_up_writing_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every writer that appends events runs its whole transaction again while another writer
    took its sequence numbers, then gives up naming the root; nothing of it is left."""
    taken = _Refused()
    monkeypatch.setattr(store._turn, "insert_event", taken)
    ref, rows = _ref("root-1"), [EntryRow("k1", "user", "hi", run_id="root-1")]
    gives_up = pytest.raises(StoreError, match="could not append events for root 'root-1'")
    with gives_up:
        store.append_events(ref, [{"type": "x"}])
    with gives_up:
        store.append_entries_and_events("tenant-a", "s-1", rows, ref, [{"type": "x"}])
    with gives_up:
        store.append_entries_with_their_events(
            "tenant-a", "s-1", rows, EntryEvents(ref, lambda written: [{"type": "x"}])
        )
    with gives_up:
        store.put_tool_result_and_events(
            ref, "c1", [{"type": "x"}], tool_name="t", content="r", error_kind=None
        )
    with gives_up:
        store.turn_context(
            "tenant-a", "s-1", "root-1:t1:assistant", "root-1", ["c1"], lambda _: rows,
            EntryEvents(ref, lambda written: [{"type": "x"}]),
        )  # fmt: skip
    assert taken.calls == 5 * EVENT_APPEND_ATTEMPTS
    assert store.load_entries("tenant-a", "s-1") == []
    assert store.get_tool_results("tenant-a", "root-1", ["c1"]) == {}
    assert store.contexts.get(("tenant-a", "s-1")) is None  # cached only once committed
    monkeypatch.undo()
    assert store.read_events("root-1") == []


def test_a_refusal_of_the_writers_own_rows_is_not_retried(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = _Refused()
    monkeypatch.setattr(store._turn, "upsert_tool_result", refused)
    with pytest.raises(IntegrityError):
        store.put_tool_result_and_events(
            _ref("root-1"), "c1", [{"type": "x"}], tool_name="t", content="r", error_kind=None
        )
    assert refused.calls == 1
    monkeypatch.undo()
    assert store.read_events("root-1") == []


# --------------------------------------------------------------------------- tenants


def _fill_tenant(store: Store, partition: str) -> None:
    """One row of every kind for ``partition``, all under the same ids as any other tenant."""
    soon = datetime.now(UTC) + timedelta(minutes=5)
    store.acquire_session(partition, "s", f"run-{partition}", internal=False, lease_until=soon)
    store.acquire_session(partition, "child", f"run-{partition}", internal=True, lease_until=soon)
    store.append_entries(partition, "s", [EntryRow("k1", "user", f"secret of {partition}")])
    store.put_tool_result(
        partition, "run-1", "c1", tool_name="t", content=f"result of {partition}", error_kind=None
    )
    store.add_compaction(
        partition, "s", key="c-1", summary=f"summary of {partition}", up_to_entry_id=1, tokens=5
    )
    store.put_artifact(
        partition,
        artifact_id="a-1",
        run_id="run-1",
        name="n",
        media_type="text/plain",
        content=partition.encode(),
    )
    store.upsert_run_record(_record("run-1", root_run_id="root-1", partition_key=partition))
    store.append_events(_ref(f"root-of-{partition}", partition=partition), [{"type": "x"}])
    with store.engine.begin() as conn:
        conn.execute(
            insert(memory_points).values(
                id=f"m-{partition}",
                partition_key=partition,
                scope="shared",
                types="fact",
                storage=f"memory of {partition}",
                created_at=datetime.now(UTC),
            )
        )


def test_a_tenant_cannot_read_list_recall_or_load_another_tenants_rows(store: Store) -> None:
    _fill_tenant(store, "tenant-b")
    a = "tenant-a"
    # Nothing of B's through any reading method, under the very same ids.
    assert store.list_sessions(a, include_internal=True) == []
    assert store.session_infos(a, include_internal=True) == []
    assert store.load_entries(a, "s") == [] and store.get_entry(a, "s", "k1") is None
    assert store.get_tool_results(a, "run-1", ["c1"]) == {}
    assert store.latest_compaction(a, "s") is None
    assert store.get_artifact(a, "a-1") is None
    assert store.get_run_record(a, "run-1") is None and store.list_run_records(a, "root-1") == []
    assert store.read_events("root-of-tenant-b", partition_key=a) == []
    with store.engine.connect() as conn:
        recalled = conn.execute(
            select(memory_points.c.storage).where(memory_points.c.partition_key == a)
        ).all()
    assert recalled == []

    # B's rows neither block nor absorb A's writes under the same keys.
    _fill_tenant(store, a)
    assert [row.content for row in store.load_entries(a, "s")] == ["secret of tenant-a"]
    assert store.get_tool_results(a, "run-1", ["c1"]) == {"c1": "result of tenant-a"}
    compaction = store.latest_compaction(a, "s")
    assert compaction is not None and compaction.summary == "summary of tenant-a"
    artifact = store.get_artifact(a, "a-1")
    assert artifact is not None and artifact.content == b"tenant-a"
    assert [record.partition_key for record in store.list_run_records(a, "root-1")] == [a]
    store.release_session(a, "s", "run-tenant-b")  # B's holder id means nothing in A
    with pytest.raises(SessionBusyError):
        store.acquire_session(
            a, "s", "run-x", internal=False, lease_until=datetime.now(UTC) + timedelta(minutes=1)
        )
    # ... and B still sees exactly its own.
    assert [row.content for row in store.load_entries("tenant-b", "s")] == ["secret of tenant-b"]
    assert store.list_sessions("tenant-b", include_internal=True) == ["s", "child"]


def test_every_tenant_table_is_keyed_by_partition() -> None:
    for table in PARTITIONED_TABLES:
        assert "partition_key" in table.c, table.name
    fleet = {table.name for table in FLEET_TABLES}  # capacity: compared across partitions
    partitioned = {table.name for table in PARTITIONED_TABLES}
    assert set(OUR_TABLES) - partitioned - fleet == {"otherone_snapshots"}


# --------------------------------------------------------------------------- CLI


async def _otherone(*args: str, url: str, tmp_path: Path) -> tuple[int, str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTHERONE_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        OTHERONE_DATABASE_URL=url,
        OTHERONE_DATA_DIR=str(tmp_path / "data"),
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "otherone.client.cli",
        *args,
        cwd=REPO_ROOT,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_cli_db_upgrade_on_a_new_file_then_sessions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    code, out, err = await _otherone("db", "upgrade", url=url, tmp_path=tmp_path)
    assert code == 0, out + err
    assert f"empty → {head_revision()}" in out, out + err

    store = Store.open(url)
    try:
        assert store.upgrade().before == head_revision()
        soon = datetime.now(UTC) + timedelta(minutes=5)
        store.acquire_session("local", "chat-1", "run-1", internal=False, lease_until=soon)
        store.acquire_session("local", "child-1", "run-2", internal=True, lease_until=soon)
        store.acquire_session("acme", "acme-chat", "run-3", internal=False, lease_until=soon)
    finally:
        store.close()

    table, everything, acme = await asyncio.gather(
        _otherone("sessions", url=url, tmp_path=tmp_path),
        _otherone("sessions", "--internal", "--json", url=url, tmp_path=tmp_path),
        _otherone("sessions", "--partition", "acme", "--json", url=url, tmp_path=tmp_path),
    )
    assert table[0] == 0, table
    assert "chat-1" in table[1] and "run-1" in table[1]  # the session and its lease holder
    assert "child-1" not in table[1]
    rows = json.loads(everything[1])
    assert [(row["session_id"], row["internal"], row["lease_run_id"]) for row in rows] == [
        ("chat-1", False, "run-1"),
        ("child-1", True, "run-2"),
    ]
    assert [row["session_id"] for row in json.loads(acme[1])] == ["acme-chat"]


async def test_cli_database_errors_and_absent_store(tmp_path: Path) -> None:
    """An unreachable database is exit 4 with one line; listing an absent file creates none."""
    absent = tmp_path / "absent.db"
    (code, out, err), listed = await asyncio.gather(
        _otherone("db", "upgrade", url="postgresql://postgres@127.0.0.1:1/x", tmp_path=tmp_path),
        _otherone("sessions", "--json", url=f"sqlite:///{absent}", tmp_path=tmp_path),
    )
    assert code == 4, out + err
    assert err.startswith("error: database:") and len(err.strip().splitlines()) == 1, err
    assert (listed[0], json.loads(listed[1])) == (0, []), listed
    assert not absent.exists()
