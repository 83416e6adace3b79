"""A turn's three store calls, alone: ``python -m bench.store_calls [--turns 60]``.

Plays a run's turns against a store, the way the model and tool activities call it: the turn's
start (`Store.turn_context`: tool results read, pending entry written, context read), its end
(`append_entries_and_events`: the answer and its events) and the tool call's end
(`put_tool_result_and_events`). Prints each call's median CPU time of the calling thread (what
the worker pays; steadier than wall time on a shared machine) and median wall time, per turn
count, with the load average.

SQLite in a temporary folder by default; ``--database-url`` a given database (e.g. PostgreSQL;
each run writes a session of its own), ``--postgresql`` a throw-away database on
127.0.0.1:5432. ``--cache-sessions 0`` turns the worker's context cache off (every turn reads
its whole session, as before the cache).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bench.databases import postgresql_database
from otherone.contracts import RunRef
from otherone.store import EntryRow, Store

CALLS = ("turn_context", "append_entries_and_events", "put_tool_result_and_events")


def play(store: Store, turns: int) -> dict[str, list[tuple[float, float]]]:
    """One run of ``turns`` turns; (CPU, wall) seconds of each call, by call."""
    run, session = f"run-{uuid.uuid4().hex[:8]}", f"session-{uuid.uuid4().hex[:8]}"
    ref = RunRef(
        run_id=run,
        root_run_id=run,
        agent_id="counter",
        partition_key="bench",
        session_id=session,
        snapshot_version="v",
    )
    user = EntryRow(entry_key=f"{run}:user", role="user", content="count " * 20, run_id=run)
    store.append_entries("bench", session, [user])
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in CALLS}

    def timed(name: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        cpu, wall = time.thread_time(), time.perf_counter()
        call(*args, **kwargs)
        times[name].append((time.thread_time() - cpu, time.perf_counter() - wall))

    for turn in range(1, turns + 1):
        previous = [f"call-{turn - 1}"] if turn > 1 else []
        answer = f"{run}:t{turn}:assistant"
        pending = _pending_rows(run, turn, previous)
        timed("turn_context", store.turn_context, "bench", session, answer, run, previous, pending)
        timed(
            "append_entries_and_events",
            store.append_entries_and_events,
            "bench",
            session,
            [_assistant(answer, run, turn)],
            ref,
            [{"type": "model_started", "turn": turn}, {"type": "model_completed", "turn": turn}],
        )
        timed(
            "put_tool_result_and_events",
            store.put_tool_result_and_events,
            ref,
            f"call-{turn}",
            [{"type": "tool_started", "turn": turn}, {"type": "tool_completed", "turn": turn}],
            tool_name="count",
            content=str(turn),
            error_kind=None,
        )
    return times


def _pending_rows(
    run: str, turn: int, calls: list[str]
) -> Callable[[Mapping[str, str]], list[EntryRow]]:
    """The turn's pending entries: the previous turn's tool result, read back from the store."""

    def rows(stored: Mapping[str, str]) -> list[EntryRow]:
        return [
            EntryRow(
                entry_key=f"{run}:t{turn}:tool:{call}",
                role="tool",
                content=stored.get(call, ""),
                tool_call_id=call,
                tool_name="count",
                run_id=run,
            )
            for call in calls
        ]

    return rows


def _assistant(key: str, run: str, turn: int) -> EntryRow:
    call = {
        "id": f"call-{turn}",
        "type": "function",
        "function": {"name": "count", "arguments": "{}"},
    }
    return EntryRow(
        entry_key=key,
        role="assistant",
        content="",
        tool_calls=[call],
        usage={"input_tokens": 100 + turn, "output_tokens": 10, "finish_reason": "tool_calls"},
        run_id=run,
    )


@contextlib.contextmanager
def _database(args: argparse.Namespace) -> Iterator[str]:
    if args.database_url:
        yield args.database_url
    elif args.postgresql:
        with postgresql_database("bench_store_calls") as url:
            yield url
    else:
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/store.db"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_calls", description=__doc__)
    parser.add_argument("--turns", type=int, nargs="+", default=[10, 60])
    parser.add_argument("--runs", type=int, default=5, help="runs per turn count (one warm-up)")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--postgresql", action="store_true")
    parser.add_argument("--cache-sessions", type=int, default=None)
    args = parser.parse_args()
    with _database(args) as url:
        store = Store.open(url)
        if args.cache_sessions is not None:
            # Imported here: the script also measures stores that predate the cache.
            from otherone.store.context_cache import ContextCache

            store.contexts = ContextCache(max_sessions=args.cache_sessions)
        backend = store.engine.dialect.name
        play(store, 3)  # warm-up: connections, prepared statements
        print(f"{backend}, load average {os.getloadavg()[0]:.2f}; median per call, CPU / wall ms")
        for turns in args.turns:
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in CALLS}
            for _ in range(args.runs):
                for name, times in play(store, turns).items():
                    samples[name] += times
            cells = []
            total = 0.0
            for name in CALLS:
                cpu = statistics.median(sample[0] for sample in samples[name]) * 1000
                wall = statistics.median(sample[1] for sample in samples[name]) * 1000
                total += cpu
                cells.append(f"{name} {cpu:.2f} / {wall:.2f}")
            print(f"{turns:>3} turns: " + ", ".join(cells) + f"; CPU per turn {total:.2f} ms")
        store.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
