"""Worker memory for docs/operations.md sizing: resident memory of `otherone worker` processes.

    python -m bench.worker_memory [--workers 3] [--runs 100] [--database postgresql|sqlite]

Starts an in-memory Temporal dev server, ``--workers`` real `otherone worker` processes on the
example configuration (offline `scripted` models) sharing one store (a fresh PostgreSQL
database on 127.0.0.1:5432, dropped afterwards, or a SQLite file), measures each worker's
resident set (VmRSS from /proc) once idle, then while ``--runs`` team runs (coordinator →
researcher + writer: 3 workflows, 7 model calls, 2 agent calls each) go through them all at
once, and after they ended. Prints one table; Linux only (it reads /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.databases import postgresql_database
from otherone import AgentClient, AgentRunRequest, RunOutcome, connect
from otherone.examples import EXAMPLE_CONFIG
from otherone.worker.devserver import DevServer

REPO = Path(__file__).resolve().parents[1]
#: A worker is idle once its RSS has not moved for this long after its banner.
SETTLE_SECONDS = 5.0


@dataclass
class Worker:
    process: asyncio.subprocess.Process
    log: Path
    peak_kib: int = 0
    samples: list[int] = field(default_factory=list)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError(f"no VmRSS for pid {self.process.pid}")


@contextlib.asynccontextmanager
async def workers(count: int, env: dict[str, str], folder: Path) -> AsyncIterator[list[Worker]]:
    started: list[Worker] = []
    try:
        for index in range(count):
            log = folder / f"worker-{index}.log"
            with log.open("wb") as output:
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "otherone.client.cli", "worker",
                    env=env, cwd=folder, stdin=asyncio.subprocess.DEVNULL,
                    stdout=output, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
            started.append(Worker(process, log))
        for worker in started:
            await _banner(worker)
        yield started
    finally:
        for worker in started:
            if worker.process.returncode is None:
                worker.process.send_signal(signal.SIGTERM)
        for worker in started:
            try:
                await asyncio.wait_for(worker.process.wait(), 60)
            except TimeoutError:
                worker.process.kill()


async def _banner(worker: Worker) -> None:
    deadline = time.monotonic() + 60
    while b"worker on task queue" not in worker.log.read_bytes():
        if worker.process.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker did not start:\n{worker.log.read_text()}")
        await asyncio.sleep(0.1)


async def settled_rss(pool: list[Worker]) -> list[int]:
    """Each worker's RSS once it stopped changing by more than 1 MiB for SETTLE_SECONDS."""
    last = [worker.rss_kib() for worker in pool]
    since = time.monotonic()
    while time.monotonic() - since < SETTLE_SECONDS:
        await asyncio.sleep(0.5)
        now = [worker.rss_kib() for worker in pool]
        if any(abs(a - b) > 1024 for a, b in zip(now, last, strict=True)):
            last, since = now, time.monotonic()
    return last


async def sample_peaks(pool: list[Worker], stop: asyncio.Event) -> None:
    while not stop.is_set():
        for worker in pool:
            worker.peak_kib = max(worker.peak_kib, worker.rss_kib())
        await asyncio.sleep(0.2)


def worker_env(
    address: str, task_queue: str, database_url: str, config: Path, folder: Path, **extra: str
) -> dict[str, str]:
    """The environment of a bench's `otherone worker`: this one's, without our settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTHERONE_", "OTEL_"))}
    env.update(
        OTHERONE_TEMPORAL_ADDRESS=address,
        OTHERONE_TASK_QUEUE=task_queue,
        OTHERONE_DATABASE_URL=database_url,
        OTHERONE_CONFIG=str(config),
        OTHERONE_DATA_DIR=str(folder / "data"),
        PYTHONPATH=str(REPO),
        **extra,
    )
    return env


async def measure(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="otherone-memory-"))
    with contextlib.ExitStack() as stack:
        if args.database == "postgresql":
            url = stack.enter_context(postgresql_database("otherone_memory"))
        else:
            url = f"sqlite:///{folder / 'store.db'}"
        async with DevServer(headless=True) as server:
            task_queue = f"memory-{uuid.uuid4().hex[:8]}"
            env = worker_env(server.address, task_queue, url, EXAMPLE_CONFIG, folder)
            async with workers(args.workers, env, folder) as pool:
                idle = await settled_rss(pool)
                client = await connect(server.address)
                agents = AgentClient(client, task_queue=task_queue)
                stop = asyncio.Event()
                sampler = asyncio.create_task(sample_peaks(pool, stop))
                started = time.monotonic()
                results = await asyncio.gather(
                    *(
                        agents.run(
                            AgentRunRequest(
                                entry_agent="coordinator",
                                input=f"report {index}",
                                idempotency_key=f"memory-{task_queue}-{index}",
                            )
                        )
                        for index in range(args.runs)
                    )
                )
                elapsed = time.monotonic() - started
                stop.set()
                await sampler
                after = await settled_rss(pool)
    completed = sum(result.outcome is RunOutcome.COMPLETED for result in results)
    print(f"{args.workers} workers, {args.database} store, {args.runs} team runs at once")
    print(f"completed {completed}/{args.runs} in {elapsed:.1f} s; load {os.getloadavg()[0]:.2f}")
    print("| worker | idle MiB | peak under load MiB | after the runs MiB |")
    print("| --- | --- | --- | --- |")
    for index, worker in enumerate(pool):
        print(
            f"| {index} | {idle[index] / 1024:.0f} | {worker.peak_kib / 1024:.0f} "
            f"| {after[index] / 1024:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_memory", description=__doc__)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # a process that used a Client can abort at exit (sdk-python#300)
