"""The workflow sandbox modes (`otherone.worker.sandbox`) and the floor in ONE process.

One worker per mode (and the floor's) on one server; their runs alternate, rotating who goes
first, so every mode is measured under the same load. Prints, per contender, the median wall
time and CPU time of this process per 10-turn run, and each mode's median per-round ratios to
the floor (wall: for ``--concurrent N`` the ratio of the time N runs at once take, i.e. the
inverse of the throughput ratio).

``python -m bench.sandbox_modes --address HOST:PORT [--modes strict,passthrough,off]
[--rounds 20] [--concurrent 0]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import uuid4

from bench import floor, ours
from bench.common import Sizes
from otherone.worker.app import connect
from otherone.worker.sandbox import WORKFLOW_SANDBOX_ENV

TURNS = 10


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    client = await connect(args.address)
    config = ours.bench_config(Sizes(), TURNS)
    runs: dict[str, Callable[[], Awaitable[Any]]] = {}
    async with contextlib.AsyncExitStack() as stack:
        floor_queue = f"modes-floor-{uuid4()}"
        await stack.enter_async_context(floor._worker(client, floor_queue))
        runs["floor"] = lambda: floor._run(client, floor_queue, TURNS)
        for mode in args.modes.split(","):
            os.environ[WORKFLOW_SANDBOX_ENV] = mode  # read by build_worker
            bench = await stack.enter_async_context(
                ours.running(client, f"modes-{mode}-{uuid4()}", config)
            )
            runs[mode] = lambda bench=bench: bench.run("counter")
        for run in runs.values():  # warm-up: imports, caches, first workflow tasks
            await run()
        return await _rounds(runs, args.rounds, args.concurrent)


async def _rounds(
    runs: dict[str, Callable[[], Awaitable[Any]]], rounds: int, concurrent: int
) -> dict[str, Any]:
    names = list(runs)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    at_once = max(concurrent, 1)
    result: dict[str, Any] = {"load_average_at_start": round(os.getloadavg()[0], 2)}
    for index in range(rounds):
        first = index % len(names)
        for name in names[first:] + names[:first]:
            wall, cpu = time.perf_counter(), time.process_time()
            await asyncio.gather(*(runs[name]() for _ in range(at_once)))
            wall_ms = (time.perf_counter() - wall) * 1000 / at_once
            samples[name].append((wall_ms, (time.process_time() - cpu) * 1000 / at_once))
    result["load_average_at_end"] = round(os.getloadavg()[0], 2)
    for name in names:
        found: dict[str, float] = {
            "wall_ms_per_run": round(statistics.median(s[0] for s in samples[name]), 1),
            "cpu_ms_per_run": round(statistics.median(s[1] for s in samples[name]), 1),
        }
        if name != "floor":
            pairs = list(zip(samples[name], samples["floor"], strict=True))
            found["wall_x_floor"] = round(statistics.median(o[0] / f[0] for o, f in pairs), 2)
            found["cpu_x_floor"] = round(statistics.median(o[1] / f[1] for o, f in pairs), 2)
        result[name] = found
    return {"concurrent": concurrent, "rounds": rounds, **result}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox_modes", description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--modes", default="strict,passthrough,off")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=0, help="runs at once (0: one)")
    result = asyncio.run(measure(parser.parse_args(argv)))
    print(json.dumps(result, indent=2))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see bench.common.main


if __name__ == "__main__":
    main()
