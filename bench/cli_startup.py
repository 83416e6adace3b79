"""CLI start-up time: how long `otherone --help` and `otherone show RUN` take, end to end.

    python -m bench.cli_startup [--repeat 10]

Runs each command ``--repeat`` times as a new process (what a person typing it waits for) and
prints the median and the best, with the load average, since a busy machine slows every
start. `show` runs against an in-memory dev server started here, on a run that exists (the
import of Temporal and the store is part of what it costs). Target (issue 16): under 0.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from otherone.worker.devserver import DevServer

REPO = Path(__file__).resolve().parents[1]
OTHERONE = [sys.executable, "-m", "otherone.client.cli"]


def timed(command: list[str], env: dict[str, str], repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, timeout=60, cwd=REPO)
        seconds.append(time.perf_counter() - started)
        if done.returncode not in (0, 3):  # 3: the run is not found, still a full start-up
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode()[-500:]}")
    return seconds


async def measure(repeat: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTHERONE_", "OTEL_"))}
    async with DevServer(headless=True) as server:
        env["OTHERONE_TEMPORAL_ADDRESS"] = server.address
        env["OTHERONE_DATA_DIR"] = str(REPO / ".otherone-bench")
        rows = {
            "otherone --help": timed([*OTHERONE, "--help"], env, repeat),
            "otherone show RUN": timed([*OTHERONE, "show", "run-absent"], env, repeat),
        }
    print(f"load average {os.getloadavg()[0]:.2f}; {repeat} runs each")
    print("| command | median s | best s |")
    print("| --- | --- | --- |")
    for name, seconds in rows.items():
        print(f"| {name} | {statistics.median(seconds):.2f} | {min(seconds):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_startup", description=__doc__)
    parser.add_argument("--repeat", type=int, default=10)
    asyncio.run(measure(parser.parse_args().repeat))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see bench.common.main (it used a Client: sdk-python#300)


if __name__ == "__main__":
    main()
