"""``otherone workers``: whether workers poll the task queue (a run started there waits while
none does), answered by the HTTP API's own `GET /v1/workers` function
(`otherone.api.workers.workers`), so that the CLI and the API cannot disagree."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK
from otherone.client.cli.temporal import connect_configured

if TYPE_CHECKING:
    from starlette.requests import Request
    from temporalio.client import Client

    from otherone.api.workers import Workers
    from otherone.worker.settings import Settings


async def cmd_workers(args: argparse.Namespace, ctx: Context) -> int:
    from otherone.api.dependencies import ApiCaller
    from otherone.api.workers import workers

    settings = ctx.settings
    client = await connect_configured(settings)
    # The operator's view (no tokens): pollers keep their `pid@host` identities.
    found = await workers(_request(client, settings), ApiCaller())
    if args.json:
        print(found.model_dump_json())
    else:
        _print(ctx, found)
    return EXIT_OK


def _request(client: Client, settings: Settings) -> Request:
    """A request to the API's route function as the API's app would pass it: the route reads
    the Temporal client, namespace, task queue and tokens of the app's context
    (`otherone.api.dependencies.api_runtime`), which stands here without the rest of a
    serving app (a store, its notifier)."""
    from starlette.requests import Request

    context = SimpleNamespace(
        temporal=client,
        namespace=settings.namespace,
        task_queue=settings.task_queue,
        tokens={},
    )
    app = SimpleNamespace(state=SimpleNamespace(otherone=SimpleNamespace(context=context)))
    return Request({"type": "http", "app": app})


def _print(ctx: Context, found: Workers) -> None:
    rows = [
        ("task queue", found.task_queue),
        ("workflows", _live(found.live_workflow_pollers)),
        ("activities", _live(found.live_activity_pollers)),
    ]
    for label, value in rows:
        ctx.out.print(f"{label:<11} {value}", markup=False)
    now = datetime.now(UTC)
    for poller in found.pollers:
        seen = (
            f"polled {(now - poller.last_access_time).total_seconds():.0f} s ago"
            if poller.last_access_time is not None
            else "never polled"
        )
        ctx.out.print(f"  {poller.identity}  {poller.kind}  {seen}", markup=False)
    sys.stdout.flush()
    if not found.live_workflow_pollers:
        ctx.err.print(
            f"note: no worker polls task queue {found.task_queue}: runs started on it wait "
            "(start `otherone dev` or `otherone worker` with the same --task-queue)",
            markup=False,
        )


def _live(count: int) -> str:
    return f"{count} live worker{'' if count == 1 else 's'}"
