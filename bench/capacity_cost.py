"""What the fleet's capacity permits add to each model and tool call (issue 42), paired.

    python -m bench.capacity_cost [--database sqlite|postgresql|both] [--rounds 60]
                                  [--store-loops 300]

Two parts, on a SQLite file and on a fresh PostgreSQL database on 127.0.0.1:5432 (dropped
after):

- ``store``: `CapacityStore.admit` then `release` of a two-scope claim (``model@QUEUE`` and
  ``profile:ID``, as a model call's), ``--store-loops`` times in a tight loop: median wall and
  CPU (this thread) per transaction, and the SQL statements each one sends.
- ``runs``: one worker in this process (in-memory dev server, `DevServer`'s throttle fix), the
  profile with every limit configured but far from reached (``max_concurrent_calls``,
  ``requests_per_minute``, ``tokens_per_minute``; the runtime's ``max_concurrent_*_calls``).
  Each round makes three one-turn runs (2 model calls, 1 tool call) in a rotating order, each
  with the capacity code in another state: ``on`` (as shipped), ``off`` (no permits at all),
  ``tools_off`` (model calls take permits, tool calls not); and two runs of an agent that only
  answers (1 model call), ``on`` and ``off``. The permits are switched off in THIS process
  only, by replacing `otherone.activities.capacity.admit` (which the activities call through
  the module) with one granting at once and `holding` with a no-op; there is no production
  switch. Each round's differences compare runs made a fraction of a second apart on the same
  worker and store; the result is the median of the rounds' differences:

  * per model call: ``answer on - answer off`` (and ``(tools_off - off) / 2`` from the
    one-turn runs, as a check);
  * per tool call: ``on - tools_off``.

  The windowed limits (per minute) keep every finished call's row for 61 s: at this bench's
  rate that is a few hundred rows a scope, read by every admission, as a busy fleet's would be.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, event

from bench.databases import postgresql_database
from bench.ours import counting_script, tick
from otherone.activities import capacity
from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile, RuntimeLimits
from otherone.runs import RunOutcome
from otherone.store import Store, prepared
from otherone.store.capacity import CapacityClaim, ScopeLimit
from otherone.worker.app import build_worker, connect
from otherone.worker.devserver import DevServer

TASK_QUEUE = "capacity-cost"
#: Far above what the bench reaches: the permits are configured, never refused.
PROFILE_LIMITS: dict[str, Any] = {
    "max_concurrent_calls": 1000,
    "requests_per_minute": 1_000_000,
    "tokens_per_minute": 1_000_000_000,
}
ARMS = ("on", "off", "tools_off")


# --------------------------------------------------------------------------- the seam


class Switch:
    """The capacity code's state for the runs of this process: ``on`` (as shipped), ``off``
    (no call takes a permit) or ``tools_off`` (model calls do, tool calls not)."""

    def __init__(self) -> None:
        self.state = "on"
        self.original = (capacity.admit, capacity.holding)

    def install(self) -> None:
        admit, holding = self.original
        switch = self

        def skipped(claim: CapacityClaim) -> bool:
            is_tool = claim.limits[0].scope.startswith("tool@")
            return switch.state == "off" or (switch.state == "tools_off" and is_tool)

        async def admit_switched(context: Any, claim: CapacityClaim, refused: Any) -> Any:
            if skipped(claim):
                return None, 0
            return await admit(context, claim, refused)

        @contextlib.asynccontextmanager
        async def holding_switched(context: Any, claim: CapacityClaim) -> AsyncIterator[list[int]]:
            if skipped(claim):
                yield []
                return
            async with holding(context, claim) as used:
                yield used

        capacity.admit = admit_switched
        capacity.holding = holding_switched

    def uninstall(self) -> None:
        capacity.admit, capacity.holding = self.original


@contextlib.contextmanager
def switched() -> Iterator[Switch]:
    switch = Switch()
    switch.install()
    try:
        yield switch
    finally:
        switch.uninstall()


# --------------------------------------------------------------------------- store loop


@dataclass
class StoreLoop:
    admit_ms: list[float]
    release_ms: list[float]
    admit_cpu_ms: list[float]
    release_cpu_ms: list[float]
    statements: dict[str, Counter[str]]


def _verb(statement: str) -> str:
    words = statement.split()
    verb = words[0].upper() if words else "?"
    after = words[words.index("FROM") + 1 :] if verb == "SELECT" and "FROM" in words else words
    table = next((w for w in after if "capacity_" in w), "")
    if verb == "INSERT" and "ON CONFLICT" in statement.upper():
        verb = "UPSERT"
    return f"{verb} {table}".strip()


def store_loop(store: Store, loops: int, windowed: bool = True) -> StoreLoop:
    """``loops`` admissions and releases of a model call's two-scope claim; ``windowed``: the
    profile has per-minute limits (each finished call's row kept for 61 s and read by every
    admission and release after it), else only a concurrency limit."""
    profile = ScopeLimit(
        "profile:bench" if windowed else "profile:bench-plain",
        concurrent=1000,
        **(
            {"requests_per_minute": 1_000_000, "tokens_per_minute": 1_000_000_000}
            if windowed
            else {}
        ),
    )
    limits = (ScopeLimit("model@bench", concurrent=4), profile)
    engine = store.engine
    current: list[str] = []

    def count(*args: Any) -> None:
        current.append(_verb(args[2]))

    # Core statements pass SQLAlchemy's cursor event; `prepared` ones its `run` (bypassing it).
    event.listen(engine, "before_cursor_execute", count)
    original_run = prepared.run

    def counted_run(conn: Connection, sql: str, params: Any, *, many: bool = False) -> Any:
        current.append(_verb(sql))
        return original_run(conn, sql, params, many=many)

    prepared.run = counted_run
    found = StoreLoop([], [], [], [], {"admit": Counter(), "release": Counter()})
    try:
        for index in range(loops + 1):  # the first is a warm-up (scopes' rows created)
            claim = CapacityClaim(f"run-{index}:t1", "bench", f"run-{index}", limits, tokens=500)
            for name, call, walls, cpus in (
                ("admit", store.capacity.admit, found.admit_ms, found.admit_cpu_ms),
                ("release", store.capacity.release, found.release_ms, found.release_cpu_ms),
            ):
                current.clear()
                cpu, wall = time.thread_time(), time.perf_counter()
                result = call(claim, datetime.now(UTC))
                elapsed = (time.perf_counter() - wall) * 1000
                if name == "admit" and not getattr(result, "granted", False):
                    raise RuntimeError(f"the bench's claim was refused: {result}")
                if index:
                    walls.append(elapsed)
                    cpus.append((time.thread_time() - cpu) * 1000)
                    if index == 1:
                        found.statements[name] = Counter(current)
    finally:
        event.remove(engine, "before_cursor_execute", count)
        prepared.run = original_run
    return found


# --------------------------------------------------------------------------- paired runs


def config() -> RuntimeConfig:
    script = {"counter": counting_script(1), "answer": ["done"]}
    model = ModelProfile.model_validate(
        {
            "id": "scripted",
            "provider": "scripted",
            "model": "bench",
            "script": script,
            **PROFILE_LIMITS,
        }
    )
    agents = [
        AgentDefinition.model_validate(
            {"id": "counter", "description": "counts", "tools": ["tick"]}
        ),
        AgentDefinition(id="answer", description="answers"),
    ]
    limits = RuntimeLimits(max_concurrent_model_calls=64, max_concurrent_tool_calls=64)
    return RuntimeConfig(agents=agents, models=[model], tools=[tick], limits=limits)


def _order(index: int, names: Sequence[str]) -> list[str]:
    """Rotated each round and reversed every other: no arm always first or after the same."""
    shift = index % len(names)
    order = [*names[shift:], *names[:shift]]
    return order if index % 2 == 0 else order[::-1]


@dataclass
class Sample:
    wall_ms: float
    cpu_ms: float


async def paired_runs(
    temporal: Any, store: Store, rounds: int, switch: Switch
) -> dict[str, dict[str, list[Sample]]]:
    """``rounds`` rounds of each arm's runs; samples by workload and arm."""
    queue = f"{TASK_QUEUE}-{uuid.uuid4().hex[:6]}"
    samples: dict[str, dict[str, list[Sample]]] = {
        "turn": {arm: [] for arm in ARMS},
        "answer": {arm: [] for arm in ("on", "off")},
    }
    async with build_worker(temporal, config(), store, task_queue=queue):
        agents = AgentClient(temporal, task_queue=queue, store=store)

        async def run(agent: str, arm: str) -> Sample:
            switch.state = arm
            wall, cpu = time.perf_counter(), time.process_time()
            result = await agents.run(build_request(entry_agent=agent, input="go"))
            sample = Sample((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000)
            if result.outcome is not RunOutcome.COMPLETED:
                raise RuntimeError(f"{agent} run ended {result.outcome.value}: {result.failure}")
            return sample

        for arm in ARMS:  # warm-up
            await run("counter", arm)
            await run("answer", arm)
        for index in range(rounds):
            for arm in _order(index, ARMS):
                samples["turn"][arm].append(await run("counter", arm))
            for arm in _order(index, ("on", "off")):
                samples["answer"][arm].append(await run("answer", arm))
    switch.state = "on"
    return samples


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median and middle half (quartiles) of per-round differences."""
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {"median": q[1] if len(ordered) >= 2 else ordered[0], "q1": q[0], "q3": q[2]}


def added(samples: dict[str, dict[str, list[Sample]]], field: str) -> dict[str, dict[str, float]]:
    def values(workload: str, arm: str) -> list[float]:
        return [getattr(sample, field) for sample in samples[workload][arm]]

    on, off, tools_off = (values("turn", arm) for arm in ARMS)
    answer_on, answer_off = values("answer", "on"), values("answer", "off")
    return {
        "per_model_call": spread([a - b for a, b in zip(answer_on, answer_off, strict=True)]),
        "per_model_call_from_turn": spread(
            [(a - b) / 2 for a, b in zip(tools_off, off, strict=True)]
        ),
        "per_tool_call": spread([a - b for a, b in zip(on, tools_off, strict=True)]),
        "turn_run_on": spread(on),
        "turn_run_off": spread(off),
    }


# --------------------------------------------------------------------------- report


def _ms(found: dict[str, float]) -> str:
    return f"{found['median']:+6.2f} ms (middle half {found['q1']:+.2f} .. {found['q3']:+.2f})"


def report(
    database: str,
    loop: StoreLoop,
    runs: dict[str, dict[str, list[Sample]]],
    plain: StoreLoop | None = None,
) -> str:
    lines = [f"== {database}"]
    loops = [("", loop)] + ([("(concurrency limits only) ", plain)] if plain else [])
    timed = [
        (kind, found, name, walls, cpus)
        for kind, found in loops
        for name, walls, cpus in (
            ("admit", found.admit_ms, found.admit_cpu_ms),
            ("release", found.release_ms, found.release_cpu_ms),
        )
    ]
    for kind, found, name, walls, cpus in timed:
        statements = ", ".join(f"{n}x {v}" for v, n in sorted(found.statements[name].items()))
        lines.append(
            f"store {kind}{name:<8} median {statistics.median(walls):5.2f} ms wall "
            f"(p90 {sorted(walls)[int(0.9 * (len(walls) - 1))]:5.2f}), "
            f"{statistics.median(cpus):5.2f} ms CPU; "
            f"{sum(found.statements[name].values())} statements: {statements}"
        )
    if runs:
        rounds = len(runs["answer"]["on"])
        for field in ("wall_ms", "cpu_ms"):
            diffs = added(runs, field)
            label = "wall" if field == "wall_ms" else "CPU (this process)"
            lines.append(f"added {label}, median of {rounds} paired rounds:")
            lines.append(
                f"  per model call (1-call run, on - off)     {_ms(diffs['per_model_call'])}"
            )
            lines.append(
                f"  per model call (1-turn run, (tools_off - off) / 2) "
                f"{_ms(diffs['per_model_call_from_turn'])}"
            )
            lines.append(
                f"  per tool call (1-turn run, on - tools_off) {_ms(diffs['per_tool_call'])}"
            )
            on, off = diffs["turn_run_on"]["median"], diffs["turn_run_off"]["median"]
            lines.append(f"  1-turn run (2 model + 1 tool call): on {on:.1f} ms, off {off:.1f} ms")
    return "\n".join(lines)


@contextlib.contextmanager
def database_url(database: str) -> Iterator[str]:
    if database == "postgresql":
        with postgresql_database("otherone_capacity") as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(prefix="otherone-capacity-") as folder:
            yield f"sqlite:///{Path(folder) / 'store.db'}"


async def main(args: argparse.Namespace) -> None:
    databases = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    started = time.monotonic()
    load = os.getloadavg()[0]
    out: list[str] = []
    async with DevServer(headless=True) as server:
        temporal = await connect(server.address, server.namespace)
        with switched() as switch:
            for database in databases:
                with database_url(database) as url:
                    store = Store.open(url)
                    try:
                        loop = store_loop(store, args.store_loops)
                        plain = store_loop(store, args.store_loops, windowed=False)
                        runs = (
                            await paired_runs(temporal, store, args.rounds, switch)
                            if args.rounds
                            else {}
                        )
                    finally:
                        store.close()
                out.append(report(database, loop, runs, plain))
                print(out[-1], flush=True)
    print(
        f"capacity cost: {args.rounds} rounds, {args.store_loops} store loops; "
        f"{time.monotonic() - started:.0f}s; load {load:.2f} -> {os.getloadavg()[0]:.2f}"
    )


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity_cost", description=__doc__)
    parser.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--store-loops", type=int, default=300)
    asyncio.run(main(parser.parse_args()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see bench.common.main (it used a Client and a worker: sdk-python#300)


if __name__ == "__main__":
    cli()
