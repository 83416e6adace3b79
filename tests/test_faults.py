"""Faults a production run must survive: a worker killed mid-stream, mid-tool and while a child
runs; the Temporal server restarted mid-run. Each would lose work or repeat a side effect if the
runtime's durability promises did not hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.activities.lost_attempts import LOST_ATTEMPT
from otherone.client.agent_client import build_request
from otherone.contracts import EventRecord
from otherone.definitions import AgentDefinition
from otherone.runs import DEFAULT_PARTITION, RunOutcome, RunStatus
from otherone.store import Store
from otherone.tools import tool
from otherone.worker.app import connect
from otherone.worker.devserver import DevServer, free_port
from tests.fault_worker import SLOW_CHUNKS, effect_file, fault_config
from tests.harness import agent_env, scripted_config, wait_until
from tests.processes import BackgroundProcess, shared_store, worker_module
from tests.store_fixtures import ThrowawayCluster, postgres_bindir, running_in_ci

pytestmark = pytest.mark.timeout(240)
#: How long the database stays down: longer than the stream has left, so a write hits it.
OUTAGE_SECONDS = 6.0


def worker_process(
    address: str, task_queue: str, store_url: str, workdir: Path
) -> contextlib.AbstractAsyncContextManager[BackgroundProcess]:
    """`tests.fault_worker` in its own process, ready to poll; killed when the block ends."""
    return worker_module("tests.fault_worker", address, task_queue, store_url, workdir)


async def release_the_retried_tool(tmp_path: Path) -> Path:
    """Once the fault worker's tool runs again (its second attempt, on the new worker), let
    it finish (`tests.fault_worker`); the file its attempts are logged in."""
    attempts = tmp_path / "attempts.log"
    await wait_until(
        lambda: len(attempts.read_text().splitlines()) >= 2,
        within=60,
        message="the tool's retry on the new worker",
    )
    (tmp_path / "release").touch()
    return attempts


def has_event(store: Store, root: str, run_id: str, kind: str) -> bool:
    return any(
        e.run_id == run_id and e.event["type"] == kind
        for e in store.read_events(root, limit=10_000)
    )


def unpaired_attempts(events: list[EventRecord]) -> list[str]:
    """Each model attempt (run, turn, attempt) has one `model_started` then one
    `model_completed`; each tool call's events alternate `tool_started`, `tool_completed` (one
    pair per attempt), beginning with a start and ending with an end."""
    models: dict[tuple[str, object, object], list[str]] = {}
    tools: dict[tuple[str, object], list[str]] = {}
    for record in events:
        body = record.event
        if body["type"] in ("model_started", "model_completed"):
            key = (record.run_id, body.get("turn"), body.get("attempt"))
            models.setdefault(key, []).append(body["type"])
        elif body["type"] in ("tool_started", "tool_completed"):
            tools.setdefault((record.run_id, body.get("tool_call_id")), []).append(body["type"])
    wrong = [f"{key}: {kinds}" for key, kinds in models.items() if kinds != MODEL_PAIR]
    return wrong + [
        f"{key}: {kinds}" for key, kinds in tools.items() if kinds != TOOL_PAIR * (len(kinds) // 2)
    ]


MODEL_PAIR = ["model_started", "model_completed"]
TOOL_PAIR = ["tool_started", "tool_completed"]


def lost_ends(events: list[EventRecord], run_id: str) -> list[tuple[str, object]]:
    """The ends a retry stored for the attempts its killed worker left open."""
    return [
        (e.event["type"], e.event.get("attempt"))
        for e in events
        if e.run_id == run_id and e.event.get("error") == LOST_ATTEMPT
    ]


async def test_sigkill_mid_stream_mid_tool_and_mid_child_loses_and_repeats_nothing(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    with shared_store(temporal_env, client, task_queue, tmp_path) as shared:
        address, store_url, store, agents = shared.address, shared.url, shared.store, shared.agents
        async with worker_process(address, task_queue, store_url, tmp_path) as first:
            streamer = await agents.start(build_request(entry_agent="streamer", input="talk"))
            buyer = await agents.start(build_request(entry_agent="buyer", input="buy A"))
            boss = await agents.start(build_request(entry_agent="boss", input="delegate"))
            child = f"{boss.run_id}/slowchild.delegate"
            await wait_until(
                lambda: (
                    has_event(store, streamer.run_id, streamer.run_id, "model_delta")
                    and has_event(store, boss.run_id, child, "model_delta")
                    and any((tmp_path / "effects").iterdir())
                ),
                within=60,
                message="a stream, a child's stream and a tool in flight",
            )
            await streamer.send_message("message before the crash")
            first.send_signal(signal.SIGKILL)
            await first.exit_code()
        await streamer.send_message("message while no worker runs")

        async with worker_process(address, task_queue, store_url, tmp_path):
            attempts = await release_the_retried_tool(tmp_path)
            results = await asyncio.wait_for(
                asyncio.gather(streamer.result(), buyer.result(), boss.result()), 120
            )
            tree = await agents.list_run_tree(boss.run_id)
        streamed, bought, delegated = results

        assert all(r.outcome is RunOutcome.COMPLETED for r in results), results
        # The stream: its turn was retried whole; both messages reached the session once.
        assert streamed.text == "heard you"
        session = store.load_entries(DEFAULT_PARTITION, streamed.session_id)
        users = [row.content for row in session if row.role == "user"]
        assert users == ["talk", "message before the crash", "message while no worker runs"]
        assistant_keys = [row.entry_key for row in session if row.role == "assistant"]
        assert len(assistant_keys) == len(set(assistant_keys)) == 2
        assert session[1].content == "".join(SLOW_CHUNKS)
        # The tool: attempted twice (the crash), its side effect happened once.
        key = f"{buyer.run_id}:pay"
        assert [line.split()[0] for line in attempts.read_text().splitlines()] == [key, key]
        assert effect_file(tmp_path, key).read_text() == "A"
        assert len(list((tmp_path / "effects").iterdir())) == 1
        assert bought.text == "bought"
        # The child: one child run, completed, its text whole.
        assert delegated.text == "boss done"
        assert [r.run_id for r in tree] == [boss.run_id, child]
        assert tree[1].status is RunStatus.COMPLETED
        assert tree[1].output is not None and tree[1].output.value == "".join(SLOW_CHUNKS)
        # The events: every attempt the kill cut off got its end from the retry.
        streamed_events = store.read_events(streamer.run_id, limit=10_000)
        bought_events = store.read_events(buyer.run_id, limit=10_000)
        tree_events = store.read_events(boss.run_id, limit=10_000)
        for events in (streamed_events, bought_events, tree_events):
            assert unpaired_attempts(events) == []
        assert lost_ends(streamed_events, streamer.run_id) == [("model_completed", 1)]
        assert lost_ends(bought_events, buyer.run_id) == [("tool_completed", 1)]
        assert lost_ends(tree_events, child) == [("model_completed", 1)]


async def test_a_run_cancelled_while_its_streams_worker_is_dead_ends_the_lost_attempt(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """No retry closes the killed attempt here (the run is cancelled first): the run's end
    does."""
    with shared_store(temporal_env, client, task_queue, tmp_path) as shared:
        address, store_url, store, agents = shared.address, shared.url, shared.store, shared.agents
        async with worker_process(address, task_queue, store_url, tmp_path) as first:
            streamer = await agents.start(build_request(entry_agent="streamer", input="talk"))
            await wait_until(
                lambda: has_event(store, streamer.run_id, streamer.run_id, "model_delta"),
                within=60,
                message="the stream has begun",
            )
            first.send_signal(signal.SIGKILL)
            await first.exit_code()
        await streamer.cancel()
        async with worker_process(address, task_queue, store_url, tmp_path):
            result = await asyncio.wait_for(streamer.result(), 120)
        assert result.outcome is RunOutcome.CANCELLED
        events = store.read_events(streamer.run_id, limit=10_000)
        assert unpaired_attempts(events) == []
        assert lost_ends(events, streamer.run_id) == [("model_completed", 1)]
        assert events[-1].event["type"] == "run_cancelled"


async def test_a_lost_last_attempt_of_a_tool_gets_its_end(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A tool that is never retried (`max_attempts=1`), its worker killed mid-call: no retry
    closes the attempt, so the run's next activity does (found by a user: a `tool_started`
    without its `tool_completed`). The tool does not run again."""
    with shared_store(temporal_env, client, task_queue, tmp_path) as shared:
        address, store_url, store, agents = shared.address, shared.url, shared.store, shared.agents
        async with worker_process(address, task_queue, store_url, tmp_path) as first:
            payer = await agents.start(build_request(entry_agent="payer", input="pay B"))
            await wait_until(
                lambda: has_event(store, payer.run_id, payer.run_id, "tool_started"),
                within=60,
                message="the charge, announced",
            )
            first.send_signal(signal.SIGKILL)
            await first.exit_code()
        async with worker_process(address, task_queue, store_url, tmp_path):
            # Temporal gives the attempt up after its heartbeat timeout (10 s).
            result = await asyncio.wait_for(payer.result(), 120)
        events = store.read_events(payer.run_id, limit=10_000)
    assert result.outcome is RunOutcome.FAILED  # the seed's rule: a tool failing for good
    assert unpaired_attempts(events) == []
    assert lost_ends(events, payer.run_id) == [("tool_completed", 1)]
    assert len((tmp_path / "attempts.log").read_text().splitlines()) == 1


async def test_a_run_survives_a_temporal_server_restart(tmp_path: Path, task_queue: str) -> None:
    db_file, port = tmp_path / "temporal.db", free_port()
    config = fault_config()
    server = DevServer(db_file=db_file, port=port, headless=True)
    await server.start()
    try:
        client = await connect(server.address)
        async with agent_env(client, task_queue, config, tmp_path) as env:
            handle = await env.agents.start(build_request(entry_agent="streamer", input="talk"))
            await wait_until(
                lambda: has_event(env.store, handle.run_id, handle.run_id, "model_delta"),
                within=30,
                message="the stream has begun",
            )
            await handle.send_message("during the stream")  # must survive the restart too
            await server.stop()
            server = DevServer(db_file=db_file, port=port, headless=True)
            await server.start()  # same file, same port: the run's history is still there
            result = await asyncio.wait_for(handle.result(), 120)
            session = env.store.load_entries(DEFAULT_PARTITION, result.session_id)
    finally:
        await server.stop()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "heard you"
    assert [row.content for row in session if row.role == "user"] == ["talk", "during the stream"]
    assert session[1].content == "".join(SLOW_CHUNKS)


@pytest.fixture
def private_postgres() -> Iterator[tuple[ThrowawayCluster, str]]:
    """A PostgreSQL cluster of this test's own, so that stopping it disturbs nobody else."""
    bindir = postgres_bindir()
    if bindir is None:
        message = "initdb/pg_ctl not found: cannot start a private PostgreSQL cluster"
        if running_in_ci():
            pytest.fail(message)
        pytest.skip(message)
    cluster = ThrowawayCluster(bindir)
    server = cluster.start()
    try:
        with server.connect_admin() as conn:
            conn.execute("CREATE DATABASE otherone")
        yield cluster, server.url("otherone")
    finally:
        cluster.stop()


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@tool
def note(n: int) -> str:
    """Take a note."""
    return f"noted {n}"


async def test_a_database_outage_mid_run_is_ridden_out_without_lost_or_doubled_entries(
    client: Client, task_queue: str, tmp_path: Path, private_postgres: tuple[ThrowawayCluster, str]
) -> None:
    cluster, url = private_postgres
    config = scripted_config(
        {
            "scribe": [
                {
                    "chunks": SLOW_CHUNKS,
                    "chunk_delay_seconds": 0.25,
                    "tool_calls": [{"name": "note", "arguments": {"n": 1}}],
                },
                {"tool_calls": [{"name": "note", "arguments": {"n": 2}}]},
                "done",
            ]
        },
        agents=[
            AgentDefinition.model_validate(
                {"id": "scribe", "description": "takes notes", "tools": ["note"]}
            )
        ],
        tools=[note],
    )
    warnings = Warnings()
    logging.getLogger("temporalio.activity").addHandler(warnings)
    store = Store.open(url)
    try:
        async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
            handle = await env.agents.start(build_request(entry_agent="scribe", input="go"))
            await wait_until(
                lambda: has_event(store, handle.run_id, handle.run_id, "model_delta"),
                message="the stream has begun",
            )
            cluster.pause()
            # The outage itself is the fault under test (not a wait for some condition): the
            # stream ends meanwhile and its transcript write finds no database.
            await asyncio.sleep(OUTAGE_SECONDS)
            cluster.resume()
            result = await asyncio.wait_for(handle.result(), 120)
            events = [e.event async for e in env.agents.events(result.run_id)]
            starts = [e for e in events if e["type"] == "model_started"]
        session = store.load_entries(DEFAULT_PARTITION, result.session_id)
    finally:
        logging.getLogger("temporalio.activity").removeHandler(warnings)
        store.close()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    assert any("store unavailable" in message for message in warnings.messages)
    # Deltas written during the outage are gone, but never silently: a marker counts them.
    lost = [e["count"] for e in events if e["type"] == "events_lost"]
    assert lost and all(count > 0 for count in lost), events
    # Ridden out in place: no model call was repeated (a retried call costs tokens).
    assert [(e["turn"], e["attempt"]) for e in starts] == [(1, 1), (2, 1), (3, 1)]
    assert [(row.role, row.content) for row in session] == [
        ("user", "go"),
        ("assistant", "".join(SLOW_CHUNKS)),
        ("tool", '"noted 1"'),
        ("assistant", ""),
        ("tool", '"noted 2"'),
        ("assistant", "done"),
    ]
