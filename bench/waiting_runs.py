"""What 10,000 runs waiting for a person cost one worker (issue 46, docs/benchmarks.md).

    python -m bench.waiting_runs [--runs 10000] [--database sqlite|postgresql]
                                 [--max-cached-workflows 1000] [--concurrency 50]

One in-memory Temporal dev server and ONE real `otherone worker` process on the example
configuration (offline `scripted` models) with its store (a SQLite file, or a fresh PostgreSQL
database on 127.0.0.1:5432, dropped afterwards). ``--runs`` runs of the `clerk` agent are
started; each makes one model call whose `add` tool call needs a person's approval, so it
waits. Measured, from /proc (Linux only):

- the worker's resident memory idle, at its peak while the runs start, once all of them wait
  (settled), and after all of them completed (settled);
- that a waiting run holds no slot: a fresh `assistant` run's wall time while all of them wait,
  against the same run on the idle worker;
- the time to wake them: every run approved (``--concurrency`` decisions in flight), until
  Temporal reports every one completed.

A waiting run stays in the worker's sticky cache (``--max-cached-workflows``, Temporal's
default 1000) until newer work pushes it out, so the waiting figure is bounded by the cache,
not by the number of waiting runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client

from bench.databases import postgresql_database
from bench.worker_memory import Worker, sample_peaks, settled_rss, worker_env, workers
from otherone import AgentClient, AgentRunRequest, RunOutcome, connect
from otherone.examples import EXAMPLE_CONFIG
from otherone.runs import RunStatus
from otherone.search_attributes import STATUS
from otherone.worker.devserver import DevServer

#: How long the whole measurement may take before it gives up (10,000 runs on 2 cores: ~15 min).
DEADLINE_SECONDS = 3 * 3600.0


async def bounded(
    count: int, concurrency: int, each: Callable[[int], Awaitable[object]]
) -> list[object]:
    """``each(0..count-1)``, at most ``concurrency`` at a time, in order of the index."""
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> object:
        async with gate:
            return await each(index)

    return list(await asyncio.gather(*(one(index) for index in range(count))))


async def wait_for_count(client: Client, query: str, expected: int, what: str) -> float:
    """Seconds until Temporal's visibility counts ``expected`` executions matching ``query``
    (progress on stderr every 30 s)."""
    started = reported = time.monotonic()
    while True:
        counted = (await client.count_workflows(query)).count
        if counted >= expected:
            return time.monotonic() - started
        if time.monotonic() - reported >= 30:
            reported = time.monotonic()
            print(f"{what}: {counted}/{expected} after {reported - started:.0f} s", file=sys.stderr)
        if time.monotonic() - started > DEADLINE_SECONDS:
            raise RuntimeError(f"{what}: {counted} of {expected} after {DEADLINE_SECONDS:.0f} s")
        await asyncio.sleep(1.0)


async def one_assistant_run(agents: AgentClient, label: str) -> float:
    """Wall seconds of one short `assistant` run (a model call, a tool, an answer)."""
    started = time.monotonic()
    result = await agents.run(
        AgentRunRequest(entry_agent="assistant", input=f"What is 2 + 3? ({label})")
    )
    if result.outcome is not RunOutcome.COMPLETED:
        raise RuntimeError(f"the {label} assistant run ended {result.outcome}")
    return time.monotonic() - started


def waiting_config(folder: Path) -> Path:
    """The example configuration with timeouts long enough to wait through the measurement
    (its own 5 min run timeout would end the first runs while the last ones start)."""
    text = EXAMPLE_CONFIG.read_text()
    for short, long in (
        ("run_timeout = 300 ", "run_timeout = 86400 "),
        ('root_timeout = "PT15M"', 'root_timeout = "PT24H"'),
    ):
        if short not in text:
            raise RuntimeError(f"the example configuration no longer says {short!r}")
        text = text.replace(short, long)
    path = folder / "otherone.toml"
    path.write_text(text)
    return path


async def measure(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="otherone-waiting-"))
    with contextlib.ExitStack() as stack:
        if args.database == "postgresql":
            url = stack.enter_context(postgresql_database("otherone_waiting"))
        else:
            url = f"sqlite:///{folder / 'store.db'}"
        async with DevServer(headless=True) as server:
            task_queue = f"waiting-{uuid.uuid4().hex[:8]}"
            env = worker_env(
                server.address,
                task_queue,
                url,
                waiting_config(folder),
                folder,
                OTHERONE_MAX_CACHED_WORKFLOWS=str(args.max_cached_workflows),
            )
            async with workers(1, env, folder) as pool:
                await run_phases(args, server.address, task_queue, pool)


async def run_phases(
    args: argparse.Namespace, address: str, task_queue: str, pool: list[Worker]
) -> None:
    [worker] = pool
    client = await connect(address)
    agents = AgentClient(client, task_queue=task_queue)
    on_queue = f'TaskQueue = "{task_queue}" AND ExecutionStatus = '
    await one_assistant_run(agents, "warm-up")
    [idle] = await settled_rss(pool)
    idle_run = await one_assistant_run(agents, "idle")

    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_peaks(pool, stop))
    run_ids: dict[int, str] = {}

    async def start(index: int) -> object:
        key = f"waiting-{task_queue}-{index}"
        request = AgentRunRequest(entry_agent="clerk", input="Add 2 and 3.", idempotency_key=key)
        run_ids[index] = (await agents.start(request)).run_id
        return None

    started = time.monotonic()
    await bounded(args.runs, args.concurrency, start)
    waiting = RunStatus.WAITING_FOR_APPROVAL.value
    clerk = 'OtheroneAgentId = "clerk"'
    waiting_query = f'{on_queue}"Running" AND {STATUS.name} = "{waiting}" AND {clerk}'
    await wait_for_count(client, waiting_query, args.runs, "waiting")
    to_wait = time.monotonic() - started
    stop.set()
    await sampler
    [all_waiting] = await settled_rss(pool)
    busy_run = await one_assistant_run(agents, "while-waiting")

    async def approve(index: int) -> object:
        return await agents.approve(run_ids[index], "call_sum")

    started = time.monotonic()
    await bounded(args.runs, args.concurrency, approve)
    decided = time.monotonic() - started
    completed = RunStatus.COMPLETED.value
    completed_query = f'{on_queue}"Completed" AND {STATUS.name} = "{completed}" AND {clerk}'
    await wait_for_count(client, completed_query, args.runs, "completed")
    to_wake = time.monotonic() - started
    [after] = await settled_rss(pool)
    print(
        f"{args.runs} clerk runs waiting for approval on one worker, {args.database} store, "
        f"sticky cache {args.max_cached_workflows}; load {os.getloadavg()[0]:.2f}"
    )
    print("| figure | value |")
    print("| --- | --- |")
    print(f"| worker RSS idle | {idle / 1024:.0f} MiB |")
    print(f"| worker RSS peak while they start | {worker.peak_kib / 1024:.0f} MiB |")
    print(f"| worker RSS with all of them waiting | {all_waiting / 1024:.0f} MiB |")
    print(f"| worker RSS after all completed | {after / 1024:.0f} MiB |")
    print(f"| time until all wait | {to_wait:.0f} s |")
    print(f"| a fresh run, idle worker / with all waiting | {idle_run:.2f} s / {busy_run:.2f} s |")
    print(f"| time to wake all (decisions sent in {decided:.0f} s) | {to_wake:.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.waiting_runs", description=__doc__)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="sqlite")
    parser.add_argument("--max-cached-workflows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # a process that used a Client can abort at exit (sdk-python#300)
