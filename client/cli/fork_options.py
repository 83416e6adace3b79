"""The ``fork`` command's arguments (argparse only: the parser is built for every command, so
what the command runs is imported by `otherone.client.cli.forks` when it runs)."""

from __future__ import annotations

import argparse
from typing import Any


def add_fork(command: Any) -> argparse.ArgumentParser:
    """The ``fork`` command's parser (``command``: the parser's `_adder`)."""
    fork: argparse.ArgumentParser = command(
        "fork",
        "start a new run from one of a run's turns",
        "Fork root run RUN_ID at turn N (`otherone show RUN_ID` numbers its turns): a new root "
        "run in a new session that shares the run's turns before N (not copied) and runs turn "
        "N again, with its own user message or --input instead. The original is not changed. "
        "Prints the new run's id (stdout) and where it came from (stderr). Needs the store "
        "(--database-url, the workers').",
    )
    fork.add_argument("run_id", metavar="RUN_ID")
    fork.add_argument(
        "--at-turn", type=int, required=True, metavar="N", help="the turn to run again (1: first)"
    )
    fork.add_argument("--input", metavar="TEXT", help="turn N's user message instead of its own")
    fork.add_argument(
        "--definition",
        choices=("original", "current"),
        default="original",
        help="the agent definition the fork runs: the one the run ran (default) or the "
        "workers' current one",
    )
    fork.add_argument(
        "--json", action="store_true", help="print the fork as JSON (run_id, session_id, ...)"
    )
    fork.add_argument(
        "--all-partitions",
        action="store_true",
        help="fork a run of any partition, whatever --partition / OTHERONE_PARTITION say "
        "(operators)",
    )
    return fork
