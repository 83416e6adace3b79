"""``otherone serve``: the HTTP API and its page (`otherone.api`), until a signal; and the
``--serve`` part of ``otherone dev``."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator

from temporalio.client import Client

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK
from otherone.config import RuntimeConfig
from otherone.store import Store


async def cmd_serve(args: argparse.Namespace, ctx: Context) -> int:
    from otherone.api.server import serve

    await serve(ctx.settings, stop=ctx.stop, log=lambda line: ctx.err.print(line, markup=False))
    return EXIT_OK


@contextlib.asynccontextmanager
async def api_beside_dev(
    ctx: Context, client: Client, store: Store, config: RuntimeConfig, ui_url: str | None
) -> AsyncIterator[None]:
    """`otherone dev --serve`: the API on the dev server's client and store while it runs."""
    from otherone.api import ApiContext, ApiServer
    from otherone.api.server import bind_host, parse_tokens, shown_ui_url, ui_note

    settings = ctx.settings
    tokens = parse_tokens(settings.serve_tokens)
    host, note = bind_host(settings, tokens)
    # Shown unless turned off: the dev server is one person's, on this machine, and its Web UI
    # (loopback only) shows nothing that person may not see; `otherone serve` needs the opt-in.
    shown = shown_ui_url(settings, ui_url, default=True)
    for line in (note, ui_note(shown, tokens)):
        if line:
            ctx.err.print(f"note: {line}", markup=False)
    context = ApiContext(
        temporal=client,
        store=store,
        task_queue=settings.task_queue,
        namespace=settings.namespace,
        tokens=tokens,
        agents=list(config.agents.values()),
        config=config,  # requests checked against it (unknown agents, limits): 422, as serve
        ui_url=shown,
        heartbeat_seconds=settings.serve_heartbeat_seconds,
        cors_origins=settings.serve_cors_origins,
    )
    async with ApiServer(
        context, host=host, port=settings.serve_port, log_level=settings.log_level
    ) as server:
        ctx.out.print(f"{'http api':<11} {server.url}  (page at /)", markup=False)
        yield
