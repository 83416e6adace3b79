"""``otherone trace``: the waterfall of a run tree (`otherone.client.trace_view`) from the
store's events, once or (``--follow``) redrawn live until the root ends."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from datetime import UTC, datetime

from rich.live import Live

from otherone.client.agent_client import AgentClient
from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK
from otherone.client.cli.stores import watch_store
from otherone.client.cli.temporal import cli_identity, connect_configured
from otherone.client.trace_details import read_tree_events
from otherone.client.trace_render import render_trace
from otherone.client.trace_view import TraceState
from otherone.client.watch import live_console, root_of

#: Redraws per second of ``--follow`` (open bars grow between events).
FOLLOW_REFRESH_PER_SECOND = 4


async def cmd_trace(args: argparse.Namespace, ctx: Context) -> int:
    settings = ctx.settings
    client = await connect_configured(settings)
    root = await root_of(client, args.run_id)  # RunNotFoundError (exit 3) for an unknown id
    store = watch_store(settings)
    try:
        agents = AgentClient(
            client,
            task_queue=settings.task_queue,
            store=store,
            partition_key=None if args.all_partitions else settings.partition,
            identity=cli_identity(settings),
        )
        await agents.check_visible(root)  # a scoped CLI sees its partition's trees only
        state = TraceState(root)
        if args.follow:
            ctx.interrupt_note = f"interrupted: stopped following run {root}; it keeps going"
            # Redrawn on a terminal only: piped, it waits for the end quietly.
            await _follow(agents, state, live=not args.json and _stderr_interactive())
        else:
            partition = agents.partition_key
            for record in await asyncio.to_thread(read_tree_events, store, root, partition):
                state.apply(record)
        trace = state.trace(datetime.now(UTC))
        if args.json:
            sys.stdout.write(trace.model_dump_json() + "\n")
        else:
            console = live_console(sys.stdout)
            console.print(render_trace(trace, datetime.now(UTC)))
            if not trace.bars:
                ctx.err.print(
                    "note: the store has no events of this run (is --database-url the worker's?)",
                    style="dim",
                )
        return EXIT_OK
    finally:
        store.close()


def _stderr_interactive() -> bool:
    return live_console(sys.stderr).is_interactive


async def _follow(agents: AgentClient, state: TraceState, *, live: bool) -> None:
    """Fold the tree's events until its root ends, redrawing the waterfall (``live``)."""
    events = agents.events(state.root_run_id)
    if not live:
        async for record in events:
            state.apply(record)
        return
    console = live_console(sys.stderr)
    display = Live(
        console=console,
        auto_refresh=False,
        transient=True,
        get_renderable=lambda: render_trace(state.trace(datetime.now(UTC)), datetime.now(UTC)),
    )

    async def redraw() -> None:
        while True:
            display.refresh()
            await asyncio.sleep(1 / FOLLOW_REFRESH_PER_SECOND)

    with display:
        task = asyncio.ensure_future(redraw())
        try:
            async for record in events:
                state.apply(record)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
