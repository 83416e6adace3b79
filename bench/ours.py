"""Our runtime on the five workloads, with the offline `scripted` model.

Each workload starts one worker (`build_worker`, a SQLite store in a temporary folder) on the
given task queue and drives it with `AgentClient`, exactly as an application would.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Interceptor

from bench.common import (
    ChunkClock,
    Result,
    Sizes,
    Workload,
    concurrent_result,
    fanout_result,
    history_events,
    history_result,
    last_run_activities,
    main,
    per_turn_result,
    sequential_runs_ms,
    summary,
    with_memory,
)
from otherone.activities.providers.base import ModelProvider, ModelRequest, StreamEvent, TextDelta
from otherone.activities.providers.scripted import ScriptedProvider
from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile, RuntimeLimits
from otherone.runs import AgentRunResult, RunOutcome
from otherone.store import Store
from otherone.tools import tool
from otherone.worker.app import build_worker, connect

MODEL_ACTIVITY = "otherone.call_model"


@tool
async def tick(n: int) -> dict[str, int]:
    """Count one step. ``async`` as every contender's tool (the floor's trivial activity is):
    a plain ``def`` tool runs in a thread, a hop the floor would not pay."""
    return {"n": n}


# --------------------------------------------------------------------------- configuration


def agent_call(call_id: str, target: str) -> dict[str, Any]:
    return {"name": "agent.call", "id": call_id, "arguments": {"agent": target, "task": "work"}}


def counting_script(turns: int) -> list[dict[str, Any]]:
    """``turns`` turns with one `tick` call each, then a final answer."""
    steps: list[dict[str, Any]] = [
        {"text": f"step {i}", "tool_calls": [{"name": "tick", "arguments": {"n": i}}]}
        for i in range(turns)
    ]
    return [*steps, {"text": "done"}]


def bench_config(sizes: Sizes, turns: int) -> RuntimeConfig:
    """All bench agents: `counter` (w1/w2/w4), `root`→`middle`→`leaf` (w3), `streamer` (w5)."""
    chunks = [ChunkClock.chunk(i) for i in range(sizes.w5_chunks)]
    script: dict[str, list[Any]] = {
        "counter": counting_script(turns),
        "root": [
            {"tool_calls": [agent_call(f"c{i}", "middle") for i in range(sizes.children)]},
            "root done",
        ],
        "middle": [
            {"tool_calls": [agent_call(f"g{i}", "leaf") for i in range(sizes.grandchildren)]},
            "middle done",
        ],
        "leaf": ["leaf done"],
        "streamer": [{"chunks": chunks, "chunk_delay_seconds": sizes.w5_chunk_delay}],
    }
    parallel = {"parallel_tool_calls": True}
    agents = [
        AgentDefinition.model_validate(
            {"id": "counter", "description": "counts", "tools": ["tick"]}
        ),
        AgentDefinition.model_validate(
            {
                "id": "root",
                "description": "fans out",
                "callable_agents": ["middle"],
                "model_overrides": parallel,
            }
        ),
        AgentDefinition.model_validate(
            {
                "id": "middle",
                "description": "fans out again",
                "callable_agents": ["leaf"],
                "model_overrides": parallel,
            }
        ),
        AgentDefinition(id="leaf", description="answers"),
        AgentDefinition(id="streamer", description="streams"),
    ]
    model = ModelProfile.model_validate(
        {"id": "scripted", "provider": "scripted", "model": "bench", "script": script}
    )
    big = turns + 10
    runs = 1 + sizes.children * (1 + sizes.grandchildren)
    # Tree budgets are shared by allowance (see the README). A tree sized exactly to its limits
    # runs whole now; the 4x headroom is kept so results compare with earlier runs.
    headroom = 4 * runs
    limits = RuntimeLimits(
        max_iterations_per_run=big,
        max_model_calls=big + 2 * headroom,
        max_tool_calls=big + 2 * headroom,
        max_total_runs=headroom,
        max_children_per_run=max(sizes.children, sizes.grandchildren),
        max_agent_calls=headroom,
        # The fleet's permits are configured but never reached (the floor has no such limit):
        # what the workloads measure is their cost per call, not waiting for them.
        max_concurrent_model_calls=1000,
        max_concurrent_tool_calls=1000,
    )
    return RuntimeConfig(agents=agents, models=[model], tools=[tick], limits=limits)


@dataclass
class Bench:
    agents: AgentClient
    store: Store

    async def run(self, agent: str, text: str = "go") -> AgentRunResult:
        result = await self.agents.run(build_request(entry_agent=agent, input=text))
        if result.outcome is not RunOutcome.COMPLETED:
            raise RuntimeError(f"{agent} run ended {result.outcome.value}: {result.failure}")
        return result


@asynccontextmanager
async def running(
    client: Client,
    task_queue: str,
    config: RuntimeConfig,
    providers: Mapping[str, ModelProvider] | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> AsyncIterator[Bench]:
    """A worker for ``config`` on ``task_queue`` with a fresh SQLite store, and a client."""
    with tempfile.TemporaryDirectory(prefix="otherone-bench-") as folder:
        store = Store.open(f"sqlite:///{Path(folder) / 'store.db'}")
        try:
            worker = build_worker(
                client,
                config,
                store,
                task_queue=task_queue,
                providers=providers,
                interceptors=interceptors,
            )
            async with worker:
                yield Bench(AgentClient(client, task_queue=task_queue, store=store), store)
        finally:
            store.close()


# --------------------------------------------------------------------------- workloads


async def w1_turns(client: Client, task_queue: str, sizes: Sizes) -> Result:
    """One agent, ``turns`` turns with one tool call each: wall time per turn."""
    async with running(client, task_queue, bench_config(sizes, sizes.turns)) as bench:
        times = await sequential_runs_ms(lambda _: bench.run("counter"), sizes.w1_runs)
        last = await bench.run("counter")
    return per_turn_result(times, sizes.turns, await last_run_activities(client, last.run_id))


async def w2_concurrent(client: Client, task_queue: str, sizes: Sizes) -> Result:
    """``w2_runs`` such runs at once on one worker: runs per second, latency per run."""
    async with running(client, task_queue, bench_config(sizes, sizes.turns)) as bench:
        await bench.run("counter")  # warm-up
        return await concurrent_result(lambda _: bench.run("counter"), sizes.w2_runs)


async def w3_fanout(client: Client, task_queue: str, sizes: Sizes) -> Result:
    """A root calling ``children`` agents in parallel, each calling ``grandchildren``."""
    async with running(client, task_queue, bench_config(sizes, sizes.turns)) as bench:
        times = await sequential_runs_ms(lambda _: bench.run("root"), sizes.w3_repeats)
        tree = await bench.run("root")
        events = bench.store.read_events(tree.run_id, limit=100_000)
    completed = {e.run_id for e in events if e.event.get("type") == "run_completed"}
    expected = 1 + sizes.children * (1 + sizes.grandchildren)
    if len(completed) != expected:
        raise RuntimeError(f"fan-out tree completed {len(completed)} runs, expected {expected}")
    return {**fanout_result(times, expected), "child_workflows": True}


async def w4_long(client: Client, task_queue: str, sizes: Sizes) -> Result:
    """One ``long_turns``-turn conversation: history bytes per turn and worker memory."""
    config = bench_config(sizes, sizes.long_turns)

    async def body() -> Result:
        async with running(client, task_queue, config) as bench:
            started = time.perf_counter()
            result = await bench.run("counter")
            wall = time.perf_counter() - started
            events = await history_events(client.get_workflow_handle(result.run_id))
            query = f'WorkflowId = "{result.run_id}"'
            histories = [e async for e in client.list_workflows(query)]
        found = history_result(events, lambda name: name == MODEL_ACTIVITY, sizes.long_turns)
        return {**found, "histories": len(histories), "wall_seconds": round(wall, 2)}

    return await with_memory(body())


class TimingProvider:
    """The scripted provider, stamping each text chunk as it leaves the stream."""

    def __init__(self, clock: ChunkClock) -> None:
        self.clock = clock
        self.inner = ScriptedProvider()
        self.count: dict[str, int] = {}
        #: Wall-clock time each run's first chunk left (to split the latency at the store).
        self.first_sent_at: dict[str, float] = {}

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self.inner.stream(request):
            if isinstance(event, TextDelta):
                index = self.count.get(request.run_id, 0)
                self.count[request.run_id] = index + 1
                self.clock.on_sent(request.run_id, index)
                self.first_sent_at.setdefault(request.run_id, time.time())
            yield event


async def w5_first_token(client: Client, task_queue: str, sizes: Sizes) -> Result:
    """From a chunk leaving the provider to `AgentClient.events()` yielding it.

    Also split for the first chunk: until its event is stored (the activity's delta batching and
    the write) and from there to the client (its polling).
    """
    clock = ChunkClock()
    provider = TimingProvider(clock)
    to_store: list[float] = []
    async with running(
        client, task_queue, bench_config(sizes, sizes.turns), {"scripted": provider}
    ) as bench:
        for index in range(sizes.w5_runs + 1):
            handle = await bench.agents.start(build_request(entry_agent="streamer", input="go"))
            stored_at: float | None = None
            async for event in handle.events():
                if event.event.get("type") == "model_delta":
                    clock.on_received(handle.run_id, str(event.event.get("content", "")))
                    stored_at = stored_at or event.timestamp.timestamp()
            await handle.result()
            if index == 0:
                del clock.sent[handle.run_id]  # warm-up
            elif stored_at is not None:
                to_store.append((stored_at - provider.first_sent_at[handle.run_id]) * 1000)
    return {**clock.result(), "first_token_to_store_ms": summary(to_store)}


WORKLOADS: dict[str, Workload] = {
    "w1_turns": w1_turns,
    "w2_concurrent": w2_concurrent,
    "w3_fanout": w3_fanout,
    "w4_long": w4_long,
    "w5_first_token": w5_first_token,
}


def run_main(argv: Sequence[str] | None = None) -> None:
    main("ours", WORKLOADS, connect, argv)


if __name__ == "__main__":
    run_main()
