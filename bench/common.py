"""What every contender shares: workload sizes, statistics, history analysis, the process entry.

Standard library and `temporalio` only: this module is imported by our runtime's contender (the
project venv) and by the peers (`bench/.venv-peers`), whose dependencies differ.

A contender is a module with a ``WORKLOADS`` table (workload name -> async function taking a
connected `Client`, a task queue and the `Sizes`, returning a JSON-able result). It is run as
``python -m bench.<contender> --address HOST:PORT --workload NAME --sizes JSON --out FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

#: JSON-able result of one workload for one contender.
Result = dict[str, Any]
Workload = Callable[[Client, str, "Sizes"], Awaitable[Result]]

WORKLOAD_NAMES = ("w1_turns", "w2_concurrent", "w3_fanout", "w4_long", "w5_first_token")
#: Every worker of every contender gets the same activity slots (our `build_worker` default).
MAX_CONCURRENT_ACTIVITIES = 64


@dataclass(frozen=True)
class Sizes:
    """Workload sizes. The defaults are the issue's; `SMOKE` is what `make test` runs."""

    turns: int = 10  # w1/w2: turns per run, each with one tool call (then a final answer)
    w1_runs: int = 6  # w1: sequential runs; the first is a warm-up and not counted
    w2_runs: int = 100  # w2: concurrent runs on one worker
    children: int = 8  # w3: children of the root, called in parallel
    grandchildren: int = 2  # w3: children of each child, called in parallel
    w3_repeats: int = 4  # w3: trees, one after the other; the first is a warm-up
    long_turns: int = 300  # w4: turns of one conversation
    w5_runs: int = 30  # w5: streamed answers, one after the other
    w5_chunks: int = 8  # w5: chunks per streamed answer
    w5_chunk_delay: float = 0.03  # w5: seconds between chunks (a ~30 tokens/s model)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Sizes:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})


SMOKE = Sizes(
    turns=2,
    w1_runs=2,
    w2_runs=3,
    children=2,
    grandchildren=1,
    w3_repeats=1,
    long_turns=10,
    w5_runs=1,
    w5_chunks=3,
    w5_chunk_delay=0.01,
)


def not_applicable(reason: str) -> Result:
    """A workload the contender cannot express: said in the table instead of a number."""
    return {"na": reason}


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty sequence."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50/p99/mean/min/max of ``values`` (milliseconds or whatever they are), rounded."""
    return {
        "p50": round(percentile(values, 50), 2),
        "p99": round(percentile(values, 99), 2),
        "mean": round(statistics.fmean(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
        "n": len(values),
    }


class Stopwatch:
    """``with Stopwatch() as w: ...`` then ``w.ms``."""

    def __enter__(self) -> Stopwatch:
        self.started = time.perf_counter()
        self.ms = 0.0
        return self

    def __exit__(self, *_: object) -> None:
        self.ms = (time.perf_counter() - self.started) * 1000


async def timed(awaitable: Awaitable[Any]) -> float:
    """Milliseconds until ``awaitable`` is done."""
    started = time.perf_counter()
    await awaitable
    return (time.perf_counter() - started) * 1000


# --------------------------------------------------------------------------- workloads helpers


class RunTimes(list[float]):
    """Wall times of runs (ms), and the CPU time this process spent per run meanwhile (its
    worker and client: each contender runs in a process of its own)."""

    cpu_ms_per_run: float | None = None


async def sequential_runs_ms(run_once: Callable[[int], Awaitable[Any]], count: int) -> RunTimes:
    """Wall time of ``count`` runs one after the other; the first (warm-up) is dropped."""
    warm_up = count > 1
    if warm_up:
        await timed(run_once(0))
    cpu = time.process_time()
    times = RunTimes([await timed(run_once(index)) for index in range(int(warm_up), count)])
    times.cpu_ms_per_run = round((time.process_time() - cpu) * 1000 / max(1, len(times)), 1)
    return times


def per_turn_result(run_ms: Sequence[float], turns: int, activities_per_run: int) -> Result:
    """``activities_per_run`` is counted in a run's history (`last_run_activities`)."""
    per_turn = [ms / turns for ms in run_ms]
    return {
        "per_turn_ms": round(statistics.median(per_turn), 2),
        "run_ms": summary(run_ms),
        "runs": len(run_ms),
        "turns": turns,
        "activities_per_run": activities_per_run,
        "cpu_ms_per_run": getattr(run_ms, "cpu_ms_per_run", None),
    }


async def concurrent_result(run_once: Callable[[int], Awaitable[Any]], count: int) -> Result:
    """Start ``count`` runs at once; runs per second over the whole batch, latency per run."""
    started, cpu = time.perf_counter(), time.process_time()
    latencies = await asyncio.gather(*(timed(run_once(index)) for index in range(count)))
    wall = time.perf_counter() - started
    return {
        "runs": count,
        "wall_seconds": round(wall, 2),
        "runs_per_second": round(count / wall, 2),
        "latency_ms": summary(latencies),
        # Of this process (the contender's worker and client).
        "cpu_ms_per_run": round((time.process_time() - cpu) * 1000 / count, 1),
    }


def fanout_result(tree_ms: Sequence[float], runs_per_tree: int) -> Result:
    return {"tree_ms": summary(tree_ms), "runs_per_tree": runs_per_tree, "trees": len(tree_ms)}


def first_token_result(first_ms: Sequence[float], delta_ms: Sequence[float]) -> Result:
    return {"first_token_ms": summary(first_ms), "delta_ms": summary(delta_ms)}


class ChunkClock:
    """Stamps streamed chunks ``c<i> `` when the model yields them and when a client sees them.

    Worker and client share one process (and so one monotonic clock). Chunks are numbered so a
    client that receives several at once (batching) still attributes each one.
    """

    def __init__(self) -> None:
        self.sent: dict[str, dict[int, float]] = {}
        self.received: dict[str, dict[int, float]] = {}

    @staticmethod
    def chunk(index: int) -> str:
        return f"c{index} "

    def on_sent(self, key: str, index: int) -> None:
        self.sent.setdefault(key, {})[index] = time.monotonic()

    def on_received(self, key: str, text: str) -> None:
        now = time.monotonic()
        seen = self.received.setdefault(key, {})
        for word in text.split():
            if word.startswith("c") and word[1:].isdigit():
                seen.setdefault(int(word[1:]), now)

    def result(self) -> Result:
        first: list[float] = []
        every: list[float] = []
        for key, sent in self.sent.items():
            received = self.received.get(key, {})
            lags = {i: (received[i] - t) * 1000 for i, t in sent.items() if i in received}
            if 0 in lags:
                first.append(lags[0])
            every.extend(lags.values())
        if not first:
            raise RuntimeError("no streamed chunk reached the client")
        return first_token_result(first, every)


# --------------------------------------------------------------------------- history


#: Key added to each JSON event: its size in the server's (protobuf) encoding, which is what
#: Temporal's history size limit counts (JSON with base64 payloads is about a third larger).
SIZE = "_bytes"


async def history_events(handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    """The workflow's history as JSON events (as `temporal workflow show` prints them), each
    with its encoded size under `SIZE`."""
    history = await handle.fetch_history()
    events: list[dict[str, Any]] = json.loads(history.to_json())["events"]
    for event, proto in zip(events, history.events, strict=True):
        event[SIZE] = proto.ByteSize()
    return events


def scheduled_activity(event: Mapping[str, Any]) -> str | None:
    attributes = event.get("activityTaskScheduledEventAttributes")
    return None if attributes is None else str(attributes.get("activityType", {}).get("name"))


#: Marker a local activity leaves in history (Temporal core), instead of scheduled/started/closed.
LOCAL_ACTIVITY_MARKER = "core_local_activity"


def local_activity(event: Mapping[str, Any]) -> bool:
    marker = event.get("markerRecordedEventAttributes")
    return marker is not None and marker.get("markerName") == LOCAL_ACTIVITY_MARKER


def scheduled_counts(events: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Activities (local ones included) and child workflows a history scheduled (a check that
    the work was done)."""
    events = list(events)
    activities = sum(scheduled_activity(e) is not None or local_activity(e) for e in events)
    children = sum("startChildWorkflowExecutionInitiatedEventAttributes" in e for e in events)
    return {"activities": activities, "child_workflows": children}


async def last_run_activities(client: Client, workflow_id: str) -> int:
    """Activities scheduled by one finished run (its latest history)."""
    return scheduled_counts(await history_events(client.get_workflow_handle(workflow_id)))[
        "activities"
    ]


def bytes_per_turn(
    events: Iterable[Mapping[str, Any]], is_model_call: Callable[[str], bool]
) -> list[int]:
    """Bytes of history between consecutive model-call schedulings: one slice per turn."""
    turns: list[int] = []
    current = 0
    for event in events:
        name = scheduled_activity(event)
        if name is not None and is_model_call(name):
            turns.append(current)
            current = 0
        current += int(event[SIZE])
    # The first slice is the run's start; the one after the last model call is the final
    # answer and the run's end: neither is a turn.
    return turns[1:]


def history_result(
    events: list[dict[str, Any]], is_model_call: Callable[[str], bool], turns: int
) -> Result:
    """History size and how a turn's cost evolves: flat means linear growth of the history."""
    per_turn = bytes_per_turn(events, is_model_call)
    model_calls = sum(is_model_call(name) for e in events if (name := scheduled_activity(e)))
    window = max(1, min(20, len(per_turn) // 4))
    early = per_turn[min(5, len(per_turn) - window) :][:window]
    late = per_turn[-window:]
    early_mean, late_mean = statistics.fmean(early), statistics.fmean(late)
    return {
        "turns": turns,
        "model_calls_seen": model_calls,
        "history_events": len(events),
        "history_bytes": sum(int(e[SIZE]) for e in events),
        "bytes_per_turn_early": round(early_mean),
        "bytes_per_turn_late": round(late_mean),
        "growth": round(late_mean / early_mean, 2),
        "bytes_per_turn_series": per_turn,
    }


async def long_run_result(
    client: Client,
    run: Awaitable[Any],
    workflow_id: str,
    is_model_call: Callable[[str], bool],
    turns: int,
) -> Result:
    """Run a long conversation (``run``) and analyse its history, also when Temporal ended it
    early (e.g. terminated at the history size limit): that is then part of the result."""
    started = time.perf_counter()
    ended = None
    try:
        await run
    except WorkflowFailureError as error:
        ended = str(error.cause or error)
    wall = time.perf_counter() - started
    events = await history_events(client.get_workflow_handle(workflow_id))
    found = history_result(events, is_model_call, turns)
    return {**found, "wall_seconds": round(wall, 2), **({"ended_early": ended} if ended else {})}


# --------------------------------------------------------------------------- memory


def _status_kb(field: str) -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return float("nan")


def rss_mb() -> float:
    """Resident memory of this process now (MB)."""
    return round(_status_kb("VmRSS") / 1024, 1)


def peak_rss_mb() -> float:
    """Highest resident memory of this process so far (MB)."""
    return round(_status_kb("VmHWM") / 1024, 1)


async def with_memory(body: Awaitable[Result]) -> Result:
    """Run ``body``; add this process's RSS before, its peak after, and the growth."""
    before = rss_mb()
    result = await body
    peak = peak_rss_mb()
    return {
        **result,
        "rss_mb_before": before,
        "rss_mb_peak": peak,
        "rss_growth_mb": round(peak - before, 1),
    }


# --------------------------------------------------------------------------- process entry


def main(
    contender: str,
    workloads: Mapping[str, Workload],
    connect: Callable[[str], Awaitable[Client]],
    argv: Sequence[str] | None = None,
) -> None:
    """Run one workload of one contender against a running server; write its result as JSON.

    Exits through ``os._exit`` after flushing (see TEMPORAL-NOTES: "Known crash" at interpreter
    exit of a process that used a Client and a Worker).
    """
    parser = argparse.ArgumentParser(prog=f"python -m bench.{contender}")
    parser.add_argument("--address", required=True)
    parser.add_argument("--workload", required=True, choices=sorted(workloads))
    parser.add_argument("--sizes", default=Sizes().to_json())
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    sizes = Sizes.from_json(args.sizes)
    code = 0
    try:
        result = asyncio.run(_run_one(workloads[args.workload], connect, args.address, sizes))
    except Exception as error:
        traceback.print_exc()
        result, code = {"error": f"{type(error).__name__}: {error}"[:500]}, 1
    args.out.write_text(json.dumps(result, indent=2))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def _run_one(
    workload: Workload, connect: Callable[[str], Awaitable[Client]], address: str, sizes: Sizes
) -> Result:
    client = await connect(address)
    task_queue = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    return await workload(client, task_queue, sizes)
