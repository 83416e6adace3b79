"""The API's event streams under load, on SQLite (polled) and PostgreSQL (LISTEN/NOTIFY).

Bounded counts, not timings: 200 concurrent SSE clients on one server follow 50 runs, a fifth of
them dropping their connection mid-run and resuming with Last-Event-ID, and every client ends
with exactly its tree's stored events, in order. On PostgreSQL the listener is woken by the
store's ``pg_notify`` alone (it never polls), and the same streams work over it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from otherone.api.notify import EventNotifier, PostgresListener, notification_source
from otherone.contracts import RunRef
from otherone.definitions import RuntimeLimits
from otherone.store import Store
from tests.api_env import ApiEnv, api_env
from tests.harness import scripted_config
from tests.sse import read_stream
from tests.store_fixtures import TestDatabases

pytestmark = pytest.mark.timeout(120)

RUNS = 50
#: Streams under load, not queueing at the fleet's permits (tests/test_capacity.py does that).
UNQUEUED = RuntimeLimits(max_concurrent_model_calls=64, max_concurrent_tool_calls=64)
CLIENTS = 200
#: Every RESUMING-th client drops after a few frames and reconnects with Last-Event-ID.
RESUMING = 5
CHUNKS = [f"part {index} " for index in range(10)]
SCRIPT = {"talker": [{"chunks": CHUNKS, "chunk_delay_seconds": 0.06}]}


async def follow(api: ApiEnv, run_id: str, *, drop_after: int | None) -> list[int]:
    """Sequences one client received, reconnecting once when ``drop_after`` is set."""
    url = f"/v1/runs/{run_id}/events"
    _, frames = await read_stream(api.http, url, limit=drop_after)
    ids = [frame.id for frame in frames if frame.id is not None]
    if drop_after is not None and frames and frames[-1].event != "run_completed":
        _, rest = await read_stream(api.http, url, headers={"Last-Event-ID": str(ids[-1])})
        ids += [frame.id for frame in rest if frame.id is not None]
    return ids


async def many_clients_follow_many_runs(api: ApiEnv) -> None:
    run_ids = []
    for _ in range(RUNS):
        response = await api.http.post("/v1/runs", json={"entry_agent": "talker", "input": "go"})
        assert response.status_code == 201, response.text
        run_ids.append(response.json()["run_id"])
    started = time.monotonic()
    followers = [
        follow(api, run_ids[index % RUNS], drop_after=3 if index % RESUMING == 0 else None)
        for index in range(CLIENTS)
    ]
    received = await asyncio.wait_for(asyncio.gather(*followers), timeout=90)
    for index, ids in enumerate(received):
        run_id = run_ids[index % RUNS]
        stored = [event.sequence for event in api.env.store.read_events(run_id)]
        assert ids == stored, f"client {index} of {run_id}: {ids} != {stored}"
        assert api.env.store.read_events(run_id)[-1].event["type"] == "run_completed"
    print(f"{CLIENTS} clients x {RUNS} runs in {time.monotonic() - started:.1f}s")


async def test_200_clients_follow_50_runs_on_sqlite(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(
        client, task_queue, scripted_config(SCRIPT, limits=UNQUEUED), tmp_path
    ) as api:
        await many_clients_follow_many_runs(api)


async def test_200_clients_follow_50_runs_on_postgresql(
    client: Client, task_queue: str, tmp_path: Path, postgres_databases: TestDatabases
) -> None:
    with postgres_databases.database(migrated=True) as url:
        store = Store.open(url)
        try:
            config = scripted_config(SCRIPT, limits=UNQUEUED)
            async with api_env(client, task_queue, config, tmp_path, store=store) as api:
                await many_clients_follow_many_runs(api)
        finally:
            store.close()


async def test_postgresql_appends_wake_the_listener(postgres_databases: TestDatabases) -> None:
    with postgres_databases.database(migrated=True) as url:
        store = Store.open(url)
        notifier = EventNotifier()
        listener = notification_source(store, notifier)
        assert isinstance(listener, PostgresListener)
        task = asyncio.create_task(listener.run())
        try:
            await asyncio.wait_for(listener.connected.wait(), timeout=10)
            with notifier.subscribe("root-1") as woken, notifier.subscribe("root-2") as other:
                woken.clear()
                other.clear()
                ref = RunRef(
                    run_id="root-1",
                    root_run_id="root-1",
                    agent_id="a",
                    partition_key="p",
                    session_id="s",
                    snapshot_version="v",
                )
                await asyncio.to_thread(store.append_events, ref, [{"type": "run_started"}])
                await asyncio.wait_for(woken.wait(), timeout=10)
                assert not other.is_set()  # only the appended tree's streams wake up
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            store.close()


async def test_streams_share_reads_and_page_through_a_long_tree(tmp_path: Path) -> None:
    """Over 500 events (several store batches): concurrent streams from different cursors, one
    behind the shared cache's start, each get exactly the events after their cursor."""
    from otherone.api.streams import TreeReaders, TreeStream

    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    ref = RunRef(
        run_id="root",
        root_run_id="root",
        agent_id="a",
        partition_key="p",
        session_id="s",
        snapshot_version="v",
    )
    bodies = [{"type": "model_delta", "content": f"{index} "} for index in range(1_234)]
    store.append_events(ref, [*bodies, {"type": "run_completed"}])
    notifier = EventNotifier()
    readers = TreeReaders(store, notifier)

    async def stopped() -> bool:
        return False

    async def follow(after: int) -> list[int]:
        stream = TreeStream(readers, "root", "p", stopped, after=after, heartbeat_seconds=0.1)
        return [int(frame.split("\n")[0][4:]) async for frame in stream.frames()]

    try:
        cursors = [0, 700, 0, 1_200, 3]
        followed = await asyncio.wait_for(asyncio.gather(*map(follow, cursors)), timeout=30)
        for after, ids in zip(cursors, followed, strict=True):
            assert ids == list(range(after + 1, 1_236)), (after, ids[:3], len(ids))
    finally:
        store.close()


async def test_postgresql_listener_polls_while_it_cannot_listen(
    postgres_databases: TestDatabases,
) -> None:
    """No LISTEN connection (here: a refused one; in life a restart, or a pooler refusing
    LISTEN): appends still wake the streams, by polling."""
    with postgres_databases.database(migrated=True) as url:
        store = Store.open(url)
        notifier = EventNotifier()
        listener = PostgresListener(store, notifier)
        listener.conninfo = "postgresql://otherone@127.0.0.1:1/refused"
        task = asyncio.create_task(listener.run())
        try:
            with notifier.subscribe("root-1") as woken:
                ref = RunRef(
                    run_id="root-1",
                    root_run_id="root-1",
                    agent_id="a",
                    partition_key="p",
                    session_id="s",
                    snapshot_version="v",
                )
                # The poller's first look at the tree (empty) wakes it once; then an append.
                await asyncio.wait_for(woken.wait(), timeout=10)
                woken.clear()
                await asyncio.to_thread(store.append_events, ref, [{"type": "run_started"}])
                await asyncio.wait_for(woken.wait(), timeout=10)
                assert not listener.connected.is_set()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            store.close()
