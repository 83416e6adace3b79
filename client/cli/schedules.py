"""``otherone schedule create|list|show|pause|unpause|trigger|delete``: Temporal Schedules that
start runs of ours (`otherone.client.schedules`), in ``--partition`` (default: the default
partition)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK
from otherone.client.cli.temporal import connect_configured
from otherone.partitions import DEFAULT_PARTITION

if TYPE_CHECKING:
    from otherone.client.schedules import Schedules, ScheduleView


async def cmd_schedule(args: argparse.Namespace, ctx: Context) -> int:
    from otherone.client.schedules import Schedules

    settings = ctx.settings
    schedules = Schedules(
        await connect_configured(settings),
        task_queue=settings.task_queue,
        partition_key=settings.partition or DEFAULT_PARTITION,
    )
    action: str = args.schedule_action
    if action == "list":
        views = await schedules.list()
        if args.json:
            sys.stdout.write("[" + ",".join(view.model_dump_json() for view in views) + "]\n")
        elif not views:
            ctx.err.print(f"no schedule in partition {schedules.partition_key}", markup=False)
        for view in [] if args.json else views:
            ctx.out.print(_line(view), markup=False)
        return EXIT_OK
    if action == "delete":
        await schedules.delete(args.name)
        ctx.err.print(f"deleted schedule {args.name}", markup=False)
        return EXIT_OK
    view = await _act(schedules, action, args)
    if args.json:
        print(view.model_dump_json())
    else:
        _print(ctx, view)
    return EXIT_OK


async def _act(schedules: Schedules, action: str, args: argparse.Namespace) -> ScheduleView:
    if action == "create":
        return await schedules.create(_request(args, schedules.partition_key))
    if action == "pause":
        return await schedules.pause(args.name, args.note)
    if action == "unpause":
        return await schedules.unpause(args.name, args.note)
    if action == "trigger":
        return await schedules.trigger(args.name)
    return await schedules.get(args.name)


def _request(args: argparse.Namespace, partition: str) -> Any:
    """The `ScheduleRequest` the flags describe (`InvalidRequestError` naming a bad one)."""
    from pydantic import ValidationError

    from otherone.client.request_checks import most_specific
    from otherone.client.schedules import ScheduleRequest
    from otherone.errors import InvalidRequestError

    request: dict[str, Any] = {
        "entry_agent": args.agent,
        "input": args.input,
        "runtime_context": {"partition_key": partition},
    }
    if args.session:
        request["session"] = {"session_id": args.session}
    if args.webhook:
        request["webhook"] = args.webhook
    fields = {
        "name": args.name,
        "request": request,
        "cron": tuple(args.cron or ()),
        "every": _seconds_or_text(args.every),
        "overlap": args.overlap,
        "catchup_window": _seconds_or_text(args.catchup_window),
        "paused": args.paused,
        "note": args.note,
    }
    try:
        return ScheduleRequest.model_validate(fields)
    except ValidationError as error:
        field, message = most_specific(error)
        flag = next((flag for name, flag in _FLAGS if field.startswith(name)), field or None)
        raise InvalidRequestError(message, field=flag) from None


def _seconds_or_text(value: str | None) -> float | str | None:
    """A duration flag: a number of seconds, else ISO 8601 text (PT1H) for the model to read."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return value


#: Request fields by the flag that gave them (the first whose name starts the field's path).
_FLAGS = (
    ("request.entry_agent", "--agent"),
    ("request.input", "--input"),
    ("request.session", "--session"),
    ("request.webhook", "--webhook"),
    ("catchup_window", "--catchup-window"),
    ("cron", "--cron"),
    ("every", "--every"),
    ("note", "--note"),
    ("name", "NAME"),
)


def _line(view: ScheduleView) -> str:
    state = "paused" if view.paused else "active"
    following = _when(view.next_runs[0]) if view.next_runs and not view.paused else "-"
    return f"{view.name:<24} {state:<7} {_timing(view):<22} next {following:<22} {view.summary}"


def _print(ctx: Context, view: ScheduleView) -> None:
    rows = [
        ("schedule", f"{view.name} (partition {view.partition_key})"),
        ("runs", view.summary),
        ("timing", _timing(view)),
        ("state", "paused" if view.paused else "active"),
        ("overlap", view.overlap or "-"),
        ("catch-up", _duration(view.catchup_window) if view.catchup_window else "-"),
    ]
    if view.note:
        rows.append(("note", view.note))
    if not view.paused:
        rows += [("next", _when(moment)) for moment in view.next_runs[:3]]
    rows += [("ran", f"{run.run_id} at {_when(run.started_at)}") for run in view.recent_runs]
    for label, value in rows:
        ctx.out.print(f"{label:<9} {value}", markup=False)


def _timing(view: ScheduleView) -> str:
    if view.every is not None:
        return f"every {_duration(view.every)}"
    return "cron " + " | ".join(view.cron)


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
