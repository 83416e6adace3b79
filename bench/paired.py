"""Paired runs: the floor and our runtime in ONE process, taking turns seconds apart.

Separate processes run minutes apart, and on a shared machine the load changes in between: a
ratio of such runs measures the load as much as the runtimes. Here both contenders have their
worker in this process on one server, and their runs alternate (floor, ours, ours, floor, ...):
each round's ratio compares runs made seconds apart, and the result is the median of the rounds'
ratios.

- ``turns_1``: one-turn runs, one at a time, `ONE_TURN_ROUNDS_FACTOR` times the rounds: what a
  run costs besides its turns (its start, prepare, first and last workflow tasks, finish, the
  client's start and result). A few milliseconds a run vanish in a 10-turn median, whose rounds
  spread by ±0.1; here they are a tenth of the run.
- ``turns_10`` / ``turns_60``: one run at a time; per turn = the run's wall time ÷ its turns
  (each run also does its prepare and finish: the floor's runs the same activities, see
  `bench.floor`). Also the CPU time of this process (workers + client) and of the server per run.
- ``concurrent``: ``concurrent`` runs of 10 turns started at once; runs per second.
- ``history``: protobuf bytes of a 60-turn run's history (what Temporal's size limit counts).
- ``scale`` (``--scale N``, ours only): N runs of one turn started at once on one worker process;
  wall time and the process's resident memory (RSS) before, at its peak and after.

With ``--peers`` (run by the interpreter of ``bench/.venv-peers``, where `make bench` installs
the peers AND this project), Pydantic AI's and the OpenAI Agents SDK's Temporal integrations
take their turns too, each with its own client (their plugins), worker and task queue: every
contender's ratio is to the floor's run of the same round.

``python -m bench.paired --address HOST:PORT --out FILE [--rounds R] [--server-pid PID]
[--peers]``;
`bench.run` runs it on its dev server (``--paired-rounds``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import importlib
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast
from uuid import uuid4

from temporalio.client import Client

from bench import floor, ours
from bench.common import Sizes, history_events, peak_rss_mb, rss_mb, summary
from otherone.worker.app import connect
from otherone.worker.sandbox import workflow_sandbox_from_env

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
Run = Callable[[], Awaitable[Any]]
PARTS = ("turns_1", "turns_10", "turns_60", "concurrent", "history")
#: One-turn runs are short (~30-40 ms): this many times the rounds of the other parts.
ONE_TURN_ROUNDS_FACTOR = 6


def server_cpu_seconds(pid: int | None) -> float:
    """CPU time (user + system) the server process has used so far; 0 when not known."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND


class Meter:
    """Wall, this process's CPU and the server's CPU over a block."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid

    @contextlib.asynccontextmanager
    async def measure(self, into: dict[str, float]) -> AsyncIterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        server = server_cpu_seconds(self.server_pid)
        yield
        into["wall_ms"] = (time.perf_counter() - wall) * 1000
        into["cpu_ms"] = (time.process_time() - cpu) * 1000
        into["server_cpu_ms"] = (server_cpu_seconds(self.server_pid) - server) * 1000


#: The peers' bench modules (importable in bench/.venv-peers only) and their names in results.
PEER_MODULES = {
    "pydantic_ai": "bench.peer_pydantic_ai",
    "openai_agents": "bench.peer_openai_agents",
}


#: The floor in Temporal's sandbox, next to the reference floor when ours runs unsandboxed.
SANDBOXED = "floor_sandboxed"


def ours_sandboxed() -> bool:
    """Whether our workers run in Temporal's sandbox here (`OTHERONE_WORKFLOW_SANDBOX`)."""
    return workflow_sandbox_from_env() != "off"


async def _floors(client: Client, stack: contextlib.AsyncExitStack, turns: int) -> dict[str, Run]:
    """The floor, run the way ours is (in the sandbox or not: the floor must not pay for what
    ours skips); when ours runs unsandboxed, also ``floor_sandboxed`` (Temporal's default, as
    the peers run) for reference."""
    floors: dict[str, Run] = {}
    kinds = [("floor", ours_sandboxed())] + ([] if ours_sandboxed() else [(SANDBOXED, True)])
    for name, sandboxed in kinds:
        queue = f"paired-{name}-{uuid4()}"
        await stack.enter_async_context(floor._worker(client, queue, sandboxed=sandboxed))
        floors[name] = functools.partial(floor._run, client, queue, turns)
    return floors


@contextlib.asynccontextmanager
async def contenders(
    client: Client, turns: int, peers: bool = False
) -> AsyncIterator[dict[str, Run]]:
    """Every contender's worker running (own task queues), and a function making one run of
    each: the floor(s) (`_floors`), ours and, with ``peers``, the two peer integrations."""
    async with contextlib.AsyncExitStack() as stack:
        runs = await _floors(client, stack, turns)
        bench = await stack.enter_async_context(
            ours.running(client, f"paired-ours-{uuid4()}", ours.bench_config(Sizes(), turns))
        )
        runs["ours"] = lambda: bench.run("counter")
        if peers:
            runs.update(await _peer_runs(client, stack, turns))
        for run in runs.values():  # warm-up: imports, caches, first workflow tasks
            await run()
        yield runs


@dataclasses.dataclass(frozen=True)
class Peer:
    """A peer's bench module, its client (with the peer's plugins) and its worker's queue."""

    module: Any
    client: Client
    queue: str

    def count(self, turns: int, workflow_id: str = "") -> Awaitable[Any]:
        """One run of ``turns`` turns (the peers' `_count`)."""
        return cast(Awaitable[Any], self.module._count(self.client, self.queue, turns, workflow_id))


async def _peers(client: Client, stack: contextlib.AsyncExitStack) -> dict[str, Peer]:
    """A worker per peer, running until ``stack`` closes, on its own client."""
    address = client.service_client.config.target_host
    peers: dict[str, Peer] = {}
    for name, module_name in PEER_MODULES.items():
        module = importlib.import_module(module_name)
        peer = Peer(module, await module._connect(address), f"paired-{name}-{uuid4()}")
        await stack.enter_async_context(module._worker(peer.client, peer.queue))
        peers[name] = peer
    return peers


async def _peer_runs(
    client: Client, stack: contextlib.AsyncExitStack, turns: int
) -> dict[str, Run]:
    return {
        name: functools.partial(peer.count, turns)
        for name, peer in (await _peers(client, stack)).items()
    }


def _order(round_index: int, names: list[str]) -> list[str]:
    """Each contender takes each place in turn (a rotation, reversed every other round): no
    contender always runs first, or always right after the same one."""
    shift = round_index % len(names)
    order = names[shift:] + names[:shift]
    return order if round_index % 2 == 0 else order[::-1]


async def sequential(
    client: Client, meter: Meter, turns: int, rounds: int, peers: bool = False
) -> dict[str, Any]:
    """``rounds`` rounds of one run each, alternating; per turn, CPU per run, ratios."""
    async with contenders(client, turns, peers) as runs:
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
        for index in range(rounds):
            for name in _order(index, list(runs)):
                sample: dict[str, float] = {}
                async with meter.measure(sample):
                    await runs[name]()
                samples[name].append(sample)
    ratios = {
        name: [s["wall_ms"] / f["wall_ms"] for f, s in zip(samples["floor"], values, strict=True)]
        for name, values in samples.items()
    }
    return {
        "turns": turns,
        "rounds": rounds,
        **{name: _per_run(values, turns) for name, values in samples.items()},
        **_ratios(ratios),
    }


def _ratios(per_round: dict[str, list[float]]) -> dict[str, Any]:
    """Ours's ratios as ``ratio``/``ratio_per_round``; every contender's median under
    ``ratios`` (the floor's is 1)."""
    return {
        "ratio_per_round": [round(r, 2) for r in per_round["ours"]],
        "ratio": round(statistics.median(per_round["ours"]), 2),
        "ratios": {name: round(statistics.median(values), 2) for name, values in per_round.items()},
    }


def _per_run(samples: list[dict[str, float]], turns: int) -> dict[str, Any]:
    return {
        "per_turn_ms": round(statistics.median(s["wall_ms"] for s in samples) / turns, 2),
        "run_ms": summary([s["wall_ms"] for s in samples]),
        "cpu_ms_per_run": round(statistics.median(s["cpu_ms"] for s in samples), 1),
        "server_cpu_ms_per_run": round(statistics.median(s["server_cpu_ms"] for s in samples), 1),
    }


async def concurrent(
    client: Client, meter: Meter, count: int, rounds: int, turns: int = 10, peers: bool = False
) -> dict[str, Any]:
    """``rounds`` rounds of ``count`` runs (of ``turns`` turns) at once per contender,
    alternating."""
    async with contenders(client, turns, peers) as runs:
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
        for index in range(rounds):
            for name in _order(index, list(runs)):
                sample: dict[str, float] = {}
                async with meter.measure(sample):
                    await asyncio.gather(*(runs[name]() for _ in range(count)))
                samples[name].append(sample)
    rates = {
        name: [count / (s["wall_ms"] / 1000) for s in values] for name, values in samples.items()
    }
    ratios = {
        name: [r / f for f, r in zip(rates["floor"], values, strict=True)]
        for name, values in rates.items()
    }
    return {
        "runs": count,
        "turns": turns,
        "rounds": rounds,
        **{
            name: {
                "runs_per_second": round(statistics.median(rates[name]), 2),
                "cpu_ms_per_run": round(statistics.median(s["cpu_ms"] for s in values) / count, 1),
                "server_cpu_ms_per_run": round(
                    statistics.median(s["server_cpu_ms"] for s in values) / count, 1
                ),
            }
            for name, values in samples.items()
        },
        **_ratios(ratios),
    }


async def history(client: Client, turns: int, peers: bool = False) -> dict[str, Any]:
    """Protobuf bytes and events of one ``turns``-turn run's history per contender."""
    found: dict[str, Any] = {}
    floor_queue, ours_queue = f"paired-floor-{uuid4()}", f"paired-ours-{uuid4()}"
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(
            floor._worker(client, floor_queue, sandboxed=ours_sandboxed())
        )
        bench = await stack.enter_async_context(
            ours.running(client, ours_queue, ours.bench_config(Sizes(), turns))
        )
        floor_id = f"floor-{uuid4()}"
        await floor._run(client, floor_queue, turns, floor_id)
        ids = {"floor": floor_id, "ours": (await bench.run("counter")).run_id}
        if peers:
            ids.update(await _peer_history_ids(client, stack, turns))
    for name, workflow_id in ids.items():
        events = await history_events(client.get_workflow_handle(workflow_id))
        found[name] = {"events": len(events), "bytes": sum(int(e["_bytes"]) for e in events)}
    found["ratio"] = round(found["ours"]["bytes"] / found["floor"]["bytes"], 2)
    found["ratios"] = {
        name: round(found[name]["bytes"] / found["floor"]["bytes"], 2) for name in ids
    }
    found["turns"] = turns
    return found


async def _peer_history_ids(
    client: Client, stack: contextlib.AsyncExitStack, turns: int
) -> dict[str, str]:
    """One ``turns``-turn run of each peer; its workflow id."""
    ids: dict[str, str] = {}
    for name, peer in (await _peers(client, stack)).items():
        ids[name] = f"paired-{name}-{uuid4()}"
        await peer.count(turns, ids[name])
    return ids


async def scale(client: Client, count: int) -> dict[str, Any]:
    """``count`` one-turn runs started at once on one worker: do they finish, in how much
    memory (this process: the worker and the client that starts and awaits the runs)."""
    queue = f"paired-scale-{uuid4()}"
    async with ours.running(client, queue, ours.bench_config(Sizes(), 1)) as bench:
        await bench.run("counter")
        before = rss_mb()
        started = time.perf_counter()
        cpu = time.process_time()
        results = await asyncio.gather(*(bench.run("counter") for _ in range(count)))
        wall = time.perf_counter() - started
        cpu_ms = (time.process_time() - cpu) * 1000
        after = rss_mb()
    return {
        "runs": count,
        "completed": len(results),
        "wall_seconds": round(wall, 1),
        "runs_per_second": round(count / wall, 2),
        "cpu_ms_per_run": round(cpu_ms / count, 1),
        "rss_mb_before": before,
        "rss_mb_peak": peak_rss_mb(),
        "rss_mb_after": after,
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    client = await connect(args.address)
    meter = Meter(args.server_pid)
    result: dict[str, Any] = {"load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    result["peers"] = sorted(PEER_MODULES) if args.peers else []
    result["ours_sandboxed"] = ours_sandboxed()
    parts = set(args.parts.split(","))
    if "turns_1" in parts:
        rounds = args.rounds * ONE_TURN_ROUNDS_FACTOR
        result["turns_1"] = await sequential(client, meter, 1, rounds, args.peers)
    if "turns_10" in parts:
        result["turns_10"] = await sequential(client, meter, 10, args.rounds, args.peers)
    if "turns_60" in parts:
        result["turns_60"] = await sequential(
            client, meter, 60, max(2, args.rounds // 2), args.peers
        )
    if "concurrent" in parts:
        # Half the rounds, not a third: a round's ratio swings by ±0.2 (the load moves; timer
        # tasks one contender's runs leave come due during another's), and with four rounds
        # the median was left to chance (0.60-1.12 in one run).
        result["concurrent"] = await concurrent(
            client, meter, args.concurrent, max(2, args.rounds // 2), peers=args.peers
        )
    if "history" in parts:
        result["history"] = await history(client, 60, args.peers)
    if args.scale:
        result["scale"] = await scale(client, args.scale)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.paired", description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrent", type=int, default=50)
    parser.add_argument("--scale", type=int, default=0, help="runs at once (0: skip)")
    parser.add_argument("--server-pid", type=int, default=None)
    parser.add_argument(
        "--peers",
        action="store_true",
        help="the peers take their turns too (needs bench/.venv-peers with this project)",
    )
    parser.add_argument(
        "--parts",
        default=os.environ.get("PAIRED_PARTS", ",".join(PARTS)),
        help="comma-separated subset of " + ",".join(PARTS),
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    code = 0
    try:
        result = asyncio.run(measure(args))
    except Exception as error:
        traceback.print_exc()
        result, code = {"error": f"{type(error).__name__}: {error}"[:500]}, 1
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # see bench.common.main


if __name__ == "__main__":
    main()
