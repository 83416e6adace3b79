"""``otherone watch``: the live view of a run tree until its root ends (also ``run --follow``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

from otherone.client.agent_client import AgentClient
from otherone.client.cli.context import Context
from otherone.client.cli.keys import keys_available, terminal_keys
from otherone.client.cli.output import exit_code, print_output
from otherone.client.cli.stores import watch_store
from otherone.client.cli.temporal import cli_identity, connect_configured, ui_base, ui_link
from otherone.client.console import EventPrinter
from otherone.client.records_view import print_result_summary
from otherone.client.watch import (
    WatchMode,
    WatchState,
    follow_tree,
    live_console,
    print_summary,
    root_of,
)
from otherone.errors import OtheroneError


async def cmd_watch(args: argparse.Namespace, ctx: Context) -> int:
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
            identity=cli_identity(settings),  # decisions made from the live view
        )
        await agents.check_visible(root)  # a scoped CLI sees its partition's trees only
        ctx.interrupt_note = f"interrupted: stopped watching run {root}; it keeps going"
        ctx.err.print(
            f"watching run {root} (Ctrl-C stops watching; the run keeps going)",
            style="dim",
            markup=False,
        )
        return await watch_tree(ctx, agents, root, json_lines=args.json, verbose=args.verbose)
    finally:
        store.close()


async def watch_tree(
    ctx: Context, agents: AgentClient, run_id: str, *, json_lines: bool, verbose: bool = False
) -> int:
    """Follow the tree of root ``run_id`` until it ends (`otherone.client.watch`); exit code by
    outcome.

    A live view when stderr is an interactive terminal, plain lines otherwise, envelopes with
    ``json_lines``; then (not for JSON) the output text, a table per run and the summary.
    ``verbose``: tool calls are shown with the start of their results."""
    console = live_console(sys.stderr)
    if json_lines:
        mode = WatchMode.JSON
    else:
        mode = WatchMode.LIVE if console.is_interactive else WatchMode.PLAIN
    printer = EventPrinter(run_id, sys.stdout, ctx.err, verbose=verbose)
    state = WatchState(run_id, verbose=verbose)
    following = follow_tree(
        agents.events(run_id),
        state,
        mode=mode,
        out=sys.stdout,
        printer=printer,
        live_console=console,
    )
    if mode is WatchMode.LIVE and keys_available():
        state = await _follow_deciding(following, state, agents)
    else:
        state = await following
    result = await agents.result(run_id)
    if mode is not WatchMode.JSON:
        print_output(result, printer)
        if not state.events_seen:
            ctx.err.print(
                "note: the store has no events of this run (is --database-url the worker's?)",
                style="dim",
            )
        print_summary(ctx.err, state, datetime.now(UTC))
        settings = ctx.settings
        link = await ui_link(agents.temporal, ui_base(settings), settings.namespace, run_id)
        print_result_summary(ctx.err, result, ui_url=link)
    return exit_code(result)


async def _follow_deciding(
    following: Coroutine[Any, Any, WatchState], state: WatchState, agents: AgentClient
) -> WatchState:
    """Follow the tree while keys typed on the terminal decide its open approvals inline."""
    state.decisions_enabled = True
    async with terminal_keys() as keys:
        deciding = asyncio.ensure_future(_decide_on_keys(keys, state, agents))
        try:
            return await following
        finally:
            deciding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await deciding


async def _decide_on_keys(keys: asyncio.Queue[str], state: WatchState, agents: AgentClient) -> None:
    """``a`` approves, ``d`` denies the first open approval the view shows; other keys are
    ignored. A refused decision (decided meanwhile, run ended) is shown, not raised."""
    while True:
        key = (await keys.get()).lower()
        waiting = state.first_open_approval()
        if key not in ("a", "d") or waiting is None:
            continue
        view, call_id, tool = waiting
        try:
            if key == "a":
                await agents.approve(view.run_id, call_id)
                state.decision_note = f"approved {tool} (call {call_id})"
            else:
                await agents.deny(view.run_id, call_id, "denied in otherone watch")
                state.decision_note = f"denied {tool} (call {call_id})"
        except OtheroneError as error:
            state.decision_note = f"not decided: {error.message}"
