"""The arguments of ``otherone schedule ...`` (`otherone.client.cli.schedules` runs them): argparse
only, so that `otherone --help` imports nothing of Temporal."""

from __future__ import annotations

import argparse
from collections.abc import Callable

#: Overlap policies, as `ScheduleRequest.overlap` names them (kept here: --help starts fast).
OVERLAPS = ("skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all")


def add_actions(action: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    """The actions of `otherone schedule`; ``action(name, summary, description)`` makes one."""
    create = action(
        "create",
        "create a schedule that starts runs of an agent",
        "Create schedule NAME in --partition: Temporal starts a run of --agent with --input at "
        "every --cron time (UTC; 5 fields, or 7 with seconds first and a year last; repeat for "
        "several) or --every interval. Each firing is a root run of its own, id "
        "NAME.PARTITION-<time>; --session makes every firing a turn of that one conversation. "
        "--overlap says what a firing does while the last run still runs (skip by default), "
        "--catchup-window how late a firing missed while the server was down may still start.",
    )
    create.add_argument("name", metavar="NAME", help="lower-case letters, digits, _ and -")
    create.add_argument("--agent", required=True, help="the entry agent of each run")
    create.add_argument("--input", required=True, help="the user message of each run")
    timing = create.add_mutually_exclusive_group(required=True)
    timing.add_argument("--cron", action="append", metavar="EXPR", help="a cron expression")
    timing.add_argument("--every", metavar="DURATION", help="seconds or ISO 8601 (PT1H)")
    create.add_argument("--session", metavar="ID", help="continue this session every firing")
    create.add_argument(
        "--webhook", metavar="URL", help="POST each run's signed record here when it ends"
    )
    create.add_argument("--overlap", choices=OVERLAPS, default="skip")
    create.add_argument("--catchup-window", metavar="DURATION", default="60")
    create.add_argument("--paused", action="store_true", help="create it paused")
    create.add_argument("--note", help="a note shown with it (e.g. why it exists)")
    create.add_argument("--json", action="store_true", help="print the schedule as JSON")
    listed = action("list", "list the partition's schedules", "List --partition's schedules.")
    listed.add_argument("--json", action="store_true", help="print them as JSON")
    for name, summary in (
        ("show", "a schedule: its timing, next and recent runs"),
        ("pause", "stop a schedule firing (until unpause)"),
        ("unpause", "let a paused schedule fire again"),
        ("trigger", "fire a schedule now (its overlap policy holds; paused or not)"),
        ("delete", "delete a schedule (the runs it started go on)"),
    ):
        one = action(name, summary, summary[0].upper() + summary[1:] + ".")
        one.add_argument("name", metavar="NAME")
        if name in ("pause", "unpause"):
            one.add_argument("--note", help="why (shown with the schedule)")
        if name != "delete":
            one.add_argument("--json", action="store_true", help="print the schedule as JSON")
