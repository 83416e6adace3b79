"""Where the event loop's time goes, ours against the floor: sampled by py-spy, not cProfile.

cProfile slows call-heavy Python unevenly; py-spy samples the process from outside (pausing it
for each sample, so the printed times per run are inflated alike for both). Record each
contender (sequential runs on an in-memory dev server, each with its own client as the
benchmark makes them: the floor with Temporal's default data converter; py-spy attached after a
warm-up run), then compare the two by where the event-loop thread was:

    python -m bench.spy record floor --out /tmp/floor.txt   # needs py-spy on PATH or --py-spy
    python -m bench.spy record ours --out /tmp/ours.txt
    python -m bench.spy compare /tmp/floor.txt /tmp/ours.txt

py-spy is not a dependency: ``pip install py-spy`` into any environment (it is one binary), and
it needs ptrace rights on the process (root, or ``kernel.yama.ptrace_scope=0``). Record both
contenders in the same few minutes: on a shared machine a minute can be 20 % slower than the
next. Milliseconds are per run (samples x sampling interval / runs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import floor, ours
from bench.common import Sizes
from otherone.worker.app import connect
from otherone.worker.devserver import DevServer

RATE_HZ = 500
#: Categories of the event-loop thread's samples: the first whose marker is on the stack.
CATEGORIES = (
    ("our activity bodies", ("AgentActivities.",)),
    ("SDK: starting activities", ("_handle_start_activity_task",)),
    ("SDK: completing activities", ("complete_activity_task", "poll_activity_task")),
    ("workflow: decoding activations", ("decode_activation",)),
    ("workflow: encoding completions", ("encode_completion",)),
    ("workflow: the rest of an activation", ("_handle_activation",)),
    ("workflow: polling and completing", ("_WorkflowWorker.run", "workflow_activation")),
    ("client: start and result", ("Bench.run", "execute_workflow", "start_workflow")),
    ("wake-ups from other threads", ("_read_from_self", "call_soon_threadsafe")),
)
IDLE_MARKERS = ("select (selectors.py", "epoll")
#: On the event-loop thread's stacks only (thread pools and Temporal's core threads have none).
LOOP_MARKER = "BaseEventLoop._run_once"


async def _record(contender: str, turns: int, runs: int, out: Path, spy: str) -> str:
    async with DevServer(headless=True) as server:
        queue = f"spy-{contender}-{os.getpid()}"
        if contender == "ours":
            client = await connect(server.address)
            async with ours.running(client, queue, ours.bench_config(Sizes(), turns)) as bench:
                return await _sampled(lambda: bench.run("counter"), runs, out, spy)
        client = await floor._connect(server.address)  # the default converter, as in the bench
        async with floor._worker(client, queue, sandboxed=False):
            return await _sampled(lambda: floor._run(client, queue, turns), runs, out, spy)


async def _sampled(run: Callable[[], Awaitable[Any]], runs: int, out: Path, spy: str) -> str:
    """``runs`` runs with py-spy attached (after one warm-up run); a line of totals."""
    await run()
    command = [spy, "record", "--pid", str(os.getpid()), "-r", str(RATE_HZ), "-f", "raw"]
    sampler = await asyncio.create_subprocess_exec(
        *command, "-o", str(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    await asyncio.sleep(1.0)  # py-spy attaches; no condition to wait on from in here
    if sampler.returncode is not None:  # it could not attach (ptrace rights?): say why
        raise SystemExit(f"py-spy ended at once: {await _stderr(sampler)}")
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(runs):
        await run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    sampler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    errors = await asyncio.wait_for(_stderr(sampler), timeout=60)
    if sampler.returncode != 0:
        raise SystemExit(f"py-spy failed ({sampler.returncode}): {errors}")
    return f"per run: wall {wall / runs * 1000:.1f} ms, CPU {cpu / runs * 1000:.1f} ms"


async def _stderr(process: asyncio.subprocess.Process) -> str:
    """What the ended (or ending) process wrote to its stderr."""
    _, errors = await process.communicate()
    return errors.decode(errors="replace").strip()


def categories(path: Path, runs: int) -> Counter[str]:
    """Milliseconds per run of the event-loop thread's samples, by `CATEGORIES`."""
    found: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        if not any(LOOP_MARKER in frame for frame in frames):
            found["(other threads, busy or not)"] += int(count)
            continue
        if any(marker in frames[-1] for marker in IDLE_MARKERS):
            found["(idle: waiting in epoll)"] += int(count)
            continue
        name = next(
            (name for name, markers in CATEGORIES if any(m in stack for m in markers)), "other"
        )
        found[name] += int(count)
    scale = 1000 / RATE_HZ / runs
    return Counter({name: round(samples * scale, 1) for name, samples in found.items()})


def compare(floor_file: Path, ours_file: Path, runs: int) -> str:
    base, mine = categories(floor_file, runs), categories(ours_file, runs)
    names = sorted(set(base) | set(mine), key=lambda name: base[name] - mine[name])
    lines = [f"{'ms per run':<40} {'floor':>8} {'ours':>8} {'ours - floor':>13}"]
    for name in names:
        delta = mine[name] - base[name]
        lines.append(f"{name:<40} {base[name]:8.1f} {mine[name]:8.1f} {delta:+13.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.spy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser("record", help="sample one contender's runs")
    record.add_argument("contender", choices=["ours", "floor"])
    record.add_argument("--out", type=Path, required=True)
    record.add_argument("--turns", type=int, default=10)
    record.add_argument("--runs", type=int, default=60)
    record.add_argument("--py-spy", dest="spy", default=shutil.which("py-spy") or "py-spy")
    versus = commands.add_parser("compare", help="the floor's samples against ours")
    versus.add_argument("floor_file", type=Path)
    versus.add_argument("ours_file", type=Path)
    versus.add_argument("--runs", type=int, default=60, help="as both were recorded")
    args = parser.parse_args()
    if args.command == "record":
        print(asyncio.run(_record(args.contender, args.turns, args.runs, args.out, args.spy)))
    else:
        print(compare(args.floor_file, args.ours_file, args.runs))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see bench.common.main (record used a Client: sdk-python#300)


if __name__ == "__main__":
    main()
