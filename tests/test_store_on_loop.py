"""Store calls made on the event loop (SQLite): never waiting there, never growing the WAL.

A model turn's store calls run on the worker's event loop when the store is a SQLite file
(`otherone.activities.store_calls.store_call`): there they take a fraction of a millisecond, less
than the hop to a thread and back. What must hold for that to be safe: a lock another
connection holds is never waited for on the loop (the call is made again in a thread, nothing
written twice), and since those calls never checkpoint the WAL themselves, the store does it
in a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.activities.store_calls import BRIEF_WRITE_CHARS, store_call
from otherone.client import build_request
from otherone.contracts import RunRef
from otherone.definitions import AgentDefinition
from otherone.runs import RunOutcome
from otherone.store import Store
from otherone.store.errors import DatabaseLocked
from otherone.store.store_base import CHECKPOINT_EVERY_CALLS
from otherone.tools import tool
from tests.harness import agent_env, scripted_config, wait_until

#: A body big enough that a checkpoint visibly grows the database file.
BIG = "x" * 4096


def _ref(root: str) -> RunRef:
    return RunRef(
        run_id=root,
        root_run_id=root,
        agent_id="assistant",
        partition_key="tenant-a",
        session_id="s-1",
        snapshot_version="v1",
    )


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[tuple[Store, Path]]:
    path = tmp_path / "store.db"
    store = Store.open(f"sqlite:///{path}")
    try:
        yield store, path
    finally:
        store.close()


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another process's writer, mid-transaction: the database's write lock is taken."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


@contextlib.contextmanager
def _write_lock_held(path: Path) -> Iterator[None]:
    """`_hold_write_lock` for the block; given back (rolled back) after it."""
    holder = _hold_write_lock(path)
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


def test_a_call_without_waiting_meets_a_held_lock_at_once_and_writes_nothing(
    sqlite_store: tuple[Store, Path],
) -> None:
    store, path = sqlite_store

    def settings() -> tuple[int, int]:
        with store.engine.connect() as conn:
            wait = conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one()
            checkpoints = conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one()
        return wait, checkpoints

    # Its connection neither waits for a lock nor checkpoints (the store's own ones do both).
    assert store.call_without_waiting(settings) == (0, 0)
    assert settings() == (30000, 1000)
    with _write_lock_held(path), pytest.raises(DatabaseLocked):
        store.call_without_waiting(store.append_events, _ref("root-1"), [{"type": "a"}])
    assert store.read_events("root-1") == []
    # Made again once the lock is free: written once, with the first sequence number.
    assert store.call_without_waiting(store.append_events, _ref("root-1"), [{"type": "a"}]) == [1]
    assert [record.event["type"] for record in store.read_events("root-1")] == ["a"]


async def test_a_held_lock_is_waited_for_in_a_thread_while_the_loop_goes_on(
    sqlite_store: tuple[Store, Path],
) -> None:
    store, path = sqlite_store
    holder = _hold_write_lock(path)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    ticker = asyncio.create_task(tick())
    call = asyncio.create_task(
        store_call(store, store.append_events, _ref("root-1"), [{"type": "a"}])
    )
    try:
        # The loop keeps running while the call waits for the lock (in its thread).
        await wait_until(lambda: ticks >= 20, within=10, message="the loop to go on")
        assert not call.done()
        holder.commit()
        assert await asyncio.wait_for(call, 30) == [1]
    finally:
        ticker.cancel()
        holder.close()
    assert [record.event["type"] for record in store.read_events("root-1")] == ["a"]


async def test_calls_without_waiting_have_the_wal_checkpointed_in_a_thread(
    sqlite_store: tuple[Store, Path],
) -> None:
    store, path = sqlite_store
    before = path.stat().st_size
    ref = _ref("root-1")
    for _ in range(CHECKPOINT_EVERY_CALLS - 1):
        await store_call(store, store.append_events, ref, [{"type": "big", "text": BIG}])
    # Those calls' connection never checkpoints: everything is still in the WAL.
    assert path.stat().st_size == before
    wal = path.with_name(f"{path.name}-wal")
    assert wal.stat().st_size > (CHECKPOINT_EVERY_CALLS - 1) * len(BIG)
    await store_call(store, store.append_events, ref, [{"type": "big", "text": BIG}])
    await wait_until(
        lambda: path.stat().st_size > before + (CHECKPOINT_EVERY_CALLS - 1) * len(BIG),
        within=30,
        message="the checkpoint to copy the WAL into the database file",
    )
    assert len(store.read_events("root-1")) == CHECKPOINT_EVERY_CALLS


async def test_postgresql_calls_are_made_in_a_thread(store: Store) -> None:
    on_sqlite = store.engine.dialect.name == "sqlite"
    assert store.calls_without_waiting is on_sqlite
    if not on_sqlite:
        with pytest.raises(ValueError, match="SQLite"):
            store.call_without_waiting(store.read_events, "root-1")
    # Either way `store_call` makes the call.
    assert await store_call(store, store.append_events, _ref("root-1"), [{"type": "a"}]) == [1]


def test_a_nested_call_without_waiting_leaves_the_outer_one_without_waiting(
    sqlite_store: tuple[Store, Path],
) -> None:
    store, _ = sqlite_store

    def outer() -> int:
        store.call_without_waiting(store.read_events, "root-1")
        with store.engine.connect() as conn:
            return int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one())

    assert store.call_without_waiting(outer) == 0


def test_a_thread_keeps_one_connection_for_its_transactions_without_waiting(
    sqlite_store: tuple[Store, Path],
) -> None:
    """Checking a connection out of a pool for each on-loop transaction cost more than the
    transaction's statements: a thread keeps one, which never waits, until the store closes."""
    store, path = sqlite_store

    def driver_connection() -> Any:
        with store._transaction() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == 0
            return conn.connection.dbapi_connection

    first = store.call_without_waiting(driver_connection)
    store.call_without_waiting(store.append_events, _ref("root-1"), [{"type": "a"}])
    with _write_lock_held(path), pytest.raises(DatabaseLocked):
        store.call_without_waiting(store.append_events, _ref("root-1"), [{"type": "b"}])
    # Rolled back, not lost: the same connection goes on.
    assert store.call_without_waiting(store.append_events, _ref("root-1"), [{"type": "b"}]) == [2]
    assert store.call_without_waiting(driver_connection) is first
    # Outside a call without waiting (and in another thread) transactions take pooled ones.
    with store._transaction() as conn:
        assert conn.connection.dbapi_connection is not first
    other = ThreadPoolExecutor(1)
    try:
        in_thread = other.submit(store.call_without_waiting, driver_connection).result(30)
    finally:
        other.shutdown()
    assert in_thread is not first
    # A connection SQLAlchemy gave up on (a lost file) is replaced.
    store.call_without_waiting(lambda: store._no_wait.held.invalidate())
    replacement = store.call_without_waiting(driver_connection)
    assert replacement is not first
    assert [e.event["type"] for e in store.read_events("root-1")] == ["a", "b"]
    store.close()
    for kept in (replacement, in_thread):
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            kept.execute("SELECT 1")


class WhereStore(Store):
    """A real store that records, for each of `RECORDED` (a turn's start and answer, a run's
    end, a stored tool result), whether a call was made on the event loop (True) or in a
    thread."""

    RECORDED = (
        "turn_context",
        "append_entries_and_events",
        "end_run",
        "put_tool_result_and_events",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_loop: dict[str, list[bool]] = {name: [] for name in self.RECORDED}
        for name in self.RECORDED:
            setattr(self, name, self._recording(name, getattr(self, name)))

    def _recording(self, name: str, method: Any) -> Any:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
                self.on_loop[name].append(True)
            except RuntimeError:
                self.on_loop[name].append(False)
            return method(*args, **kwargs)

        return recorded

    def taken(self) -> dict[str, list[bool]]:
        found = {name: list(calls) for name, calls in self.on_loop.items()}
        for calls in self.on_loop.values():
            calls.clear()
        return found


#: The runs of the first test call no tool.
NO_TOOL: dict[str, list[bool]] = {"put_tool_result_and_events": []}


async def test_large_texts_are_written_in_a_thread_and_small_ones_on_the_loop(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A write carrying more than `BRIEF_WRITE_CHARS` (a long answer, a long user message)
    would hold the worker's event loop, and every other run on it, for milliseconds: it goes
    through a thread (a long answer is also the run's output, written again by its end); a
    turn's usual writes stay on the loop. Either way all of it is stored."""
    long = "y" * (BRIEF_WRITE_CHARS + 1)
    config = scripted_config({"brief": ["ok"], "verbose": [long]})
    store = WhereStore.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
            runs = []
            for agent, text in (("brief", "hi"), ("verbose", "hi"), ("brief", long)):
                result = await env.agents.run(build_request(entry_agent=agent, input=text))
                runs.append((result, store.taken()))
        stored = [
            [entry.content for entry in store.load_entries("local", result.session_id)]
            for result, _ in runs
        ]
    finally:
        store.close()
    assert all(result.outcome is RunOutcome.COMPLETED for result, _ in runs)
    assert [calls for _, calls in runs] == [
        {**NO_TOOL, "turn_context": [True], "append_entries_and_events": [True], "end_run": [True]},
        {
            **NO_TOOL,
            "turn_context": [True],
            "append_entries_and_events": [False],
            "end_run": [False],
        },
        {
            **NO_TOOL,
            "turn_context": [False],
            "append_entries_and_events": [True],
            "end_run": [True],
        },
    ]
    assert runs[1][0].text == long
    assert stored == [["hi", "ok"], ["hi", long], [long, "ok"]]


async def test_a_session_this_worker_has_not_read_is_read_in_a_thread(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A turn of a session the worker holds no context of reads all its entries since the last
    compaction (milliseconds for a long session): in a thread. A session its run created is
    known to be empty, and a session read once is cached: their turns stay on the loop."""
    config = scripted_config({"agent": ["ok"]})
    store = WhereStore.open(f"sqlite:///{tmp_path / 'store.db'}")
    calls = []
    try:
        async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
            first = await env.agents.run(build_request(entry_agent="agent", input="one"))
            calls.append(store.taken()["turn_context"])
            key, again = ("local", first.session_id), {"session_id": first.session_id}
            store.contexts.discard(key)  # as after a restart, or evicted by other sessions
            for text in ("two", "three"):
                await env.agents.run(build_request(entry_agent="agent", input=text, session=again))
                calls.append(store.taken()["turn_context"])
        stored = [entry.content for entry in store.load_entries(*key)]
    finally:
        store.close()
    assert calls == [[True], [False], [True]]
    assert stored == ["one", "ok", "two", "ok", "three", "ok"]


async def test_a_large_tool_result_is_stored_in_a_thread(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A tool result too big to travel inline is stored by the tool activity: on the event loop
    up to `BRIEF_WRITE_CHARS`, in a thread beyond (results go up to `max_result_bytes`)."""

    @tool
    def bulky(size: int) -> str:
        """A result of ``size`` characters."""
        return "z" * size

    sizes = {"c1": 10_000, "c2": BRIEF_WRITE_CHARS + 1}  # both above the inline limit (2 KB)
    turns = [
        {"tool_calls": [{"name": "bulky", "arguments": {"size": size}, "id": call_id}]}
        for call_id, size in sizes.items()
    ]
    config = scripted_config(
        {"agent": [*turns, "done"]},
        agents=[AgentDefinition(id="agent", description="agent", tools=["bulky"])],
        tools=[bulky],
    )
    store = WhereStore.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
            result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        results = {
            entry.tool_call_id: entry.content
            for entry in store.load_entries("local", result.session_id)
            if entry.role == "tool"
        }
    finally:
        store.close()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    assert store.on_loop["put_tool_result_and_events"] == [True, False]
    assert {call_id: len(json.loads(content)) for call_id, content in results.items()} == sizes
