"""What the Temporal server does per run, ours against the floor: ``python -m bench.server_work``.

The paired benchmark measures the server's CPU around each contender's runs, but the server
does some of a run's work later (a timer task when an activity's heartbeat timeout comes due, a
visibility write), during whichever contender's run comes next, and the two alternate seconds
apart. Here each contender's runs make a phase of their own (the floor, ours, the floor again),
and the server's own counters (its ``/metrics``: service requests, persistence requests and
history tasks, by operation) and CPU time are read before each phase and `SETTLE_SECONDS` after
it (most timer tasks a run leaves come due within that). Printed: the
counters per run that differ between ours and the floor, and the server's CPU per run of each
phase (the floor's two phases show how much that moves on its own).

``python -m bench.server_work [--turns 60] [--runs 5] [--out FILE]`` (starts its own in-memory
dev server with ``--metrics-port``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

from bench import floor, ours
from bench.common import Sizes
from bench.paired import server_cpu_seconds
from otherone.worker.app import connect
from otherone.worker.devserver import DevServer, free_port

#: The server's metrics counted, by operation.
COUNTERS = ("service_requests", "persistence_requests", "task_requests")
_SAMPLE = re.compile(r"^(\w+)\{(.*)\} ([0-9.e+-]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
#: Seconds after a phase for the work it left to be counted with it: its timer tasks come due
#: up to 10 s after each workflow task and activity start (the workflow task's and the
#: activities' heartbeat timeouts). An activity's start-to-close timer (60 s for the floor, 90 s
#: and 10 min for ours) comes due later still, in another phase or after the last. (The server
#: also publishes its counters about a second late: never wait less than ~2 s.)
SETTLE_SECONDS = 12.0
Key = tuple[str, str, str]


def counters(metrics_text: str) -> defaultdict[Key, float]:
    """(metric, service, operation) -> value, of `COUNTERS`, from Prometheus' text format."""
    found: defaultdict[Key, float] = defaultdict(float)
    for line in metrics_text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) not in COUNTERS:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        key = (match.group(1), labels.get("service_name", ""), labels.get("operation", ""))
        found[key] += float(match.group(3))
    return found


def _scrape(metrics_port: int) -> defaultdict[Key, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        return counters(reply.read().decode())


async def _phase(
    run: Callable[[], Awaitable[Any]],
    runs: int,
    metrics_port: int,
    server_pid: int | None,
    settle: float,
) -> dict[str, Any]:
    """``runs`` runs; the server's counters and CPU per run over them and the work they left
    (`SETTLE_SECONDS`)."""
    before = await asyncio.to_thread(_scrape, metrics_port)
    cpu = server_cpu_seconds(server_pid)
    for _ in range(runs):
        await run()
    await asyncio.sleep(settle)  # the phase's own timer tasks, counted with it
    cpu_ms = (server_cpu_seconds(server_pid) - cpu) * 1000 / runs
    after = await asyncio.to_thread(_scrape, metrics_port)
    per_run = {
        " ".join(key): (after[key] - before[key]) / runs
        for key in after
        if after[key] > before[key]
    }
    return {"server_cpu_ms_per_run": round(cpu_ms, 1), "per_run": per_run}


async def measure(turns: int, runs: int, settle: float = SETTLE_SECONDS) -> dict[str, Any]:
    metrics_port = free_port()
    async with DevServer(headless=True, extra_args=["--metrics-port", str(metrics_port)]) as server:
        client = await connect(server.address)
        floor_client = await floor._connect(server.address)
        floor_queue = f"server-work-floor-{uuid4()}"
        config = ours.bench_config(Sizes(), turns)
        async with (
            ours.running(client, f"server-work-ours-{uuid4()}", config) as bench,
            floor._worker(floor_client, floor_queue, sandboxed=False),
        ):
            phases: dict[str, Callable[[], Awaitable[Any]]] = {
                "floor": lambda: floor._run(floor_client, floor_queue, turns),
                "ours": lambda: bench.run("counter"),
            }
            for run in phases.values():  # warm-up
                await run()
            await asyncio.sleep(settle)  # and the work it left
            # The floor before and after ours: how much a phase moves on its own.
            order = (("floor", "floor"), ("ours", "ours"), ("floor2", "floor"))
            found = {
                name: await _phase(phases[contender], runs, metrics_port, server.pid, settle)
                for name, contender in order
            }
    return {"turns": turns, "runs": runs, "phases": found, **_report(found)}


def _report(found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The server's CPU per run of each phase, and the counters where ours and both of the
    floor's phases differ by at least one per run."""
    floors = (found["floor"]["per_run"], found["floor2"]["per_run"])
    ours_ = found["ours"]["per_run"]
    differing = [
        {
            "counter": key,
            "ours": round(ours_.get(key, 0.0), 1),
            "floor": [round(phase.get(key, 0.0), 1) for phase in floors],
        }
        for key in sorted(set(ours_).union(*floors))
        if all(abs(ours_.get(key, 0.0) - phase.get(key, 0.0)) >= 1 for phase in floors)
    ]
    differing.sort(key=lambda row: -abs(row["ours"] - row["floor"][0]))
    return {
        "server_cpu_ms_per_run": {
            name: phase["server_cpu_ms_per_run"] for name, phase in found.items()
        },
        "differing_counters_per_run": differing,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.server_work", description=__doc__)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--runs", type=int, default=5, help="runs per phase (one warm-up)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = asyncio.run(measure(args.turns, args.runs))
    del result["phases"]  # every counter of every phase: for tests and a debugger
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds"] = round(time.monotonic() - started, 1)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    sys.stdout.flush()
    os._exit(0)  # see bench.common.main


if __name__ == "__main__":
    main()
