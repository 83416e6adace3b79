"""Where a turn's time goes: `make profile` (or ``python -m bench.profile``).

Starts an in-memory dev server, a worker of our runtime (the bench's `counter` agent, scripted
model, SQLite store) and runs ``--runs`` sequential runs of ``--turns`` turns, then prints:

- per run: wall time, this process's CPU (worker + client) and the server's CPU;
- the activity bodies per run, by activity type (count and wall time from the body's start to
  its return: what the floor's trivial activities do not spend; local activities too);
- the store calls per run, by method (count, wall time and CPU time spent in each, in the
  thread that made it): each call is a transaction (or a read); on SQLite a turn's brief calls
  are made on the event loop (`otherone.activities.store_calls.store_call`), the others in a thread;
- the hops of the calls made in a thread (`ThreadHops`): from the event loop's asking to the
  thread's start, and from the thread's end to the loop's going on (waiting for a core, the
  GIL, a wake-up);
- the store's statements per run (`StoreStatements`): each prepared statement by what it does
  and on which table, the commits and the transactions, with the CPU time of the thread that
  ran them (a transaction's time less its statements' and commit's is its Python and its
  connection handling);
- the server requests per run that heartbeats cost (`RecordActivityTaskHeartbeat` calls);
- the functions of the event-loop thread with the most own time (cProfile), or, with
  ``--sort cumulative``, with the most time below them. ``--out FILE`` keeps the raw profile
  (``python -m pstats FILE`` to browse it; snakeviz and the like read it too).

``--concurrent N`` runs them N at a time (as the throughput workload does); ``--no-cprofile``
leaves cProfile out, which inflates call-heavy Python code several times over: compare the
wall and CPU figures of two commits without it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import inspect
import io
import os
import pstats
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine.base import Connection
from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from bench import ours
from bench.common import Sizes
from bench.paired import server_cpu_seconds
from otherone.activities import store_calls
from otherone.store import Store, prepared
from otherone.store.store_base import StoreBase
from otherone.worker.app import connect
from otherone.worker.devserver import DevServer

#: Store methods the activities call (the public ones, of `Store` and the parts it is made of:
#: `otherone.store.transcript`, `otherone.store.run_store`; private helpers run inside them).
#: Not `call_without_waiting`: it makes one of the others, which counts the call.
STORE_METHODS = sorted(
    {
        name
        for part in Store.__mro__[:-1]
        for name, value in vars(part).items()
        if not name.startswith("_") and inspect.isfunction(value)
    }
    - {"call_without_waiting"}
)


class StoreCalls:
    """Counts and times every public `Store` method call (whichever thread makes it): wall and
    the calling thread's CPU time (the difference is waiting: for the GIL, the disk, a lock)."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.cpu_seconds: defaultdict[str, float] = defaultdict(float)
        self._saved: dict[str, Callable[..., Any] | None] = {}

    def install(self) -> None:
        for name in STORE_METHODS:
            original = getattr(Store, name)
            self._saved[name] = vars(Store).get(name)
            setattr(Store, name, self._wrap(name, original))

    def uninstall(self) -> None:
        for name, own in self._saved.items():
            if own is None:
                delattr(Store, name)  # inherited from one of its parts: that one shows again
            else:
                setattr(Store, name, own)

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.count[name] += 1
                self.seconds[name] += time.perf_counter() - started
                self.cpu_seconds[name] += time.thread_time() - cpu

        return timed


class ThreadHops:
    """Times the two hops of every store call an activity makes in a thread (through
    `otherone.activities.store_calls.in_thread`): from the event loop's asking to the call's
    start in its thread, and from its end there to the event loop's going on. Neither is CPU
    work of the call: it is waiting for a thread to wake, for a core, for the GIL."""

    def __init__(self) -> None:
        self.count = 0
        self.to_thread = 0.0
        self.back = 0.0
        self._saved: Callable[..., Any] | None = None

    def install(self) -> None:
        self._saved = original = store_calls.in_thread

        async def timed(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            stamps: list[float] = []

            def stamped(*inner: Any, **named: Any) -> Any:
                stamps.append(time.perf_counter())
                try:
                    return function(*inner, **named)
                finally:
                    stamps.append(time.perf_counter())

            asked = time.perf_counter()
            try:
                return await original(stamped, *args, **kwargs)
            finally:
                if len(stamps) == 2:  # not a call cancelled before its thread took it
                    self.count += 1
                    self.to_thread += stamps[0] - asked
                    self.back += time.perf_counter() - stamps[1]

        store_calls.in_thread = timed  # `ActivityContext.io`, `store_call` look it up per call

    def uninstall(self) -> None:
        if self._saved is not None:
            store_calls.in_thread = self._saved
            self._saved = None


class StoreStatements:
    """Counts and times (CPU of the calling thread) the store's prepared statements
    (`otherone.store.prepared.run`: a turn's hot path), the commits and the transactions
    (`StoreBase._transaction`, from its start to its end). Each measurement costs ~1 µs of its
    own, counted in the transaction's time."""

    COMMIT = "COMMIT"
    TRANSACTION = "transactions (all of each, statements and commit too)"

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.cpu_seconds: defaultdict[str, float] = defaultdict(float)
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        run, commit, transaction = prepared.run, Connection._commit_impl, StoreBase._transaction

        def timed_run(conn: Any, sql: str, params: Any, *, many: bool = False) -> Any:
            with self._timed(statement_label(sql)):
                return run(conn, sql, params, many=many)

        def timed_commit(conn: Connection) -> None:
            with self._timed(self.COMMIT):
                commit(conn)

        def timed_transaction(store: StoreBase) -> Any:
            return self._timed(self.TRANSACTION, around=transaction(store))

        for owner, name, value in (
            (prepared, "run", timed_run),
            (Connection, "_commit_impl", timed_commit),
            (StoreBase, "_transaction", timed_transaction),
        ):
            self._saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, value)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()

    @contextlib.contextmanager
    def _timed(self, label: str, around: Any = None) -> Any:
        started = time.thread_time()
        try:
            if around is None:
                yield None
            else:
                with around as value:
                    yield value
        finally:
            self.count[label] += 1
            self.cpu_seconds[label] += time.thread_time() - started

    def lines(self, runs: int) -> list[str]:
        """Per run: count, CPU ms and µs each, the most expensive first."""
        lines = ["store statements per run (count, CPU ms of its thread, µs each):"]
        for label, seconds in sorted(self.cpu_seconds.items(), key=lambda item: -item[1]):
            count = self.count[label]
            per_run, each = seconds / runs * 1000, seconds / count * 1e6
            lines.append(f"  {label:<60} {count / runs:6.1f}  {per_run:7.2f} ms  {each:6.0f} µs")
        return lines


_TABLE = re.compile(r"\b(?:INTO|FROM|UPDATE)\s+(\w+)", re.IGNORECASE)


def statement_label(sql: str) -> str:
    """What a statement does and to which table, in a few words: ``INSERT otherone_events``,
    ``SELECT max(otherone_events.sequence) FROM otherone_events``."""
    words = " ".join(sql.split())
    verb = words.split(" ", 1)[0].upper()
    found = _TABLE.search(words)
    if found is None:  # (PostgreSQL's lock and notify calls)
        return words[:40]
    table = found.group(1)
    if verb != "SELECT":
        return f"{verb} {table}"
    first = words[len("SELECT ") :].split(",")[0].split(" FROM ")[0].split(" AS ")[0]
    return f"SELECT {first} FROM {table}"


class ActivityBodies(Interceptor):
    """Counts and times activity bodies by activity type (a worker interceptor: it sees every
    attempt, local activities too, from after the input is decoded to the body's return)."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.enabled = False

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _TimedBodies(next, self)


class _TimedBodies(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, bodies: ActivityBodies) -> None:
        super().__init__(next)
        self._bodies = bodies

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        started = time.perf_counter()
        try:
            return await super().execute_activity(input)
        finally:
            if self._bodies.enabled:
                name = activity.info().activity_type
                self._bodies.count[name] += 1
                self._bodies.seconds[name] += time.perf_counter() - started


def _heartbeats() -> Counter[str]:
    """Heartbeats the activities send (counted where the SDK is asked to send one)."""
    from temporalio import activity

    counted: Counter[str] = Counter()
    original = activity.heartbeat

    def counting(*details: Any) -> None:
        counted["heartbeats"] += 1
        original(*details)

    activity.heartbeat = counting
    return counted


async def profile(args: argparse.Namespace) -> str:
    calls = StoreCalls()
    statements = StoreStatements()
    hops = ThreadHops()
    bodies = ActivityBodies()
    beats = _heartbeats()
    out = io.StringIO()
    async with DevServer(headless=True) as server:
        client = await connect(server.address)
        config = ours.bench_config(Sizes(), args.turns)
        queue = f"profile-{os.getpid()}"
        async with ours.running(client, queue, config, interceptors=[bodies]) as bench:
            await bench.run("counter")  # warm-up: imports, caches
            calls.install()
            statements.install()
            hops.install()
            bodies.enabled = True
            beats.clear()
            profiler = cProfile.Profile()
            wall, cpu = time.perf_counter(), time.process_time()
            server_cpu = server_cpu_seconds(server.pid)
            if args.cprofile:
                profiler.enable()
            for start in range(0, args.runs, args.concurrent):
                batch = min(args.concurrent, args.runs - start)
                await asyncio.gather(*(bench.run("counter") for _ in range(batch)))
            profiler.disable()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            server_cpu = server_cpu_seconds(server.pid) - server_cpu
            calls.uninstall()
            statements.uninstall()
            hops.uninstall()
            bodies.enabled = False
    runs = args.runs
    at_once = f", {args.concurrent} at a time" if args.concurrent > 1 else ""
    load = os.getloadavg()[0]
    print(f"{runs} runs of {args.turns} turns{at_once}, load average {load:.2f}", file=out)
    profiled = "profiled" if args.cprofile else "not profiled"
    print(
        f"per run: wall {wall / runs * 1000:.0f} ms, CPU of this process {cpu / runs * 1000:.0f}"
        f" ms (worker + client, {profiled}), server CPU {server_cpu / runs * 1000:.0f} ms",
        file=out,
    )
    print("activity bodies per run (count, wall ms):", file=out)
    for name, count in bodies.count.most_common():
        wall_ms = bodies.seconds[name] / runs * 1000
        print(f"  {name:<28} {count / runs:6.1f}  {wall_ms:7.1f} ms", file=out)
    total = sum(calls.count.values())
    heading = f"store calls per run: {total / runs:.1f} (count, wall ms, CPU ms of its thread)"
    print(heading, file=out)
    for name, count in calls.count.most_common():
        wall_ms = calls.seconds[name] / runs * 1000
        cpu_ms = calls.cpu_seconds[name] / runs * 1000
        print(f"  {name:<28} {count / runs:6.1f}  {wall_ms:7.1f} ms  {cpu_ms:7.1f} ms", file=out)
    print("\n".join(statements.lines(runs)), file=out)
    print(hop_line(hops, runs), file=out)
    print(f"heartbeats per run: {beats['heartbeats'] / runs:.1f}", file=out)
    if not args.cprofile:
        return out.getvalue()
    if args.out:
        profiler.dump_stats(args.out)
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(args.sort).print_stats(args.top)
    return out.getvalue()


def hop_line(hops: ThreadHops, runs: int) -> str:
    """One line on the hops: per run, and per call each way."""
    if not hops.count:
        return "thread hops of store calls per run: 0"
    each_to, each_back = hops.to_thread / hops.count * 1000, hops.back / hops.count * 1000
    return (
        f"thread hops of store calls per run: {hops.count / runs:.1f}, each {each_to:.2f} ms to"
        f" the thread + {each_back:.2f} ms back ({(hops.to_thread + hops.back) / runs * 1000:.1f}"
        " ms per run of waiting, on the activities' critical path)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument(
        "--concurrent", type=int, default=1, help="runs at a time (the runs go in such batches)"
    )
    parser.add_argument(
        "--no-cprofile",
        dest="cprofile",
        action="store_false",
        help="no cProfile (it slows Python code down unevenly): the timings above only",
    )
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumulative"])
    parser.add_argument("--out", default="", help="keep the raw cProfile data here")
    args = parser.parse_args()
    print(asyncio.run(profile(args)), flush=True)
    os._exit(0)  # see bench.common.main


if __name__ == "__main__":
    main()
