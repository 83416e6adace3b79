"""Live view of a tree of runs: ``otherone watch RUN_ID`` and ``otherone run ... --follow``.

The view is a pure function of the event stream: `WatchState` (`watch_state`) folds event
envelopes (no I/O, no clock; the timestamps come from the envelopes and "now" is a parameter of
the renderers), and `render_live` / `render_tree` / `render_summary` (`watch_render`) turn a
state into rich renderables. So the whole view is testable without a terminal or a server;
`follow_tree` (here) only wires an event iterator (`AgentClient.events`) to one of three
outputs:

- ``live``: a rich `Live` display on a terminal (refreshed from the event loop, so rendering
  never races the fold), cleared when the root ends;
- ``plain``: when stderr is not an interactive terminal (a pipe, a file, ``TERM=dumb``): the
  line-based `EventPrinter` of ``otherone run`` (root text on stdout, activity on stderr), no
  cursor movement;
- ``json``: every envelope as one JSON object a line on stdout (``EventRecord`` as stored).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from enum import StrEnum
from typing import TextIO

from rich.console import Console
from rich.live import Live
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from otherone.client.console import EventPrinter
from otherone.client.watch_render import (
    print_summary,
    render_live,
    render_summary,
    render_tree,
)
from otherone.client.watch_state import Activity, RunView, WatchState
from otherone.contracts import EventRecord
from otherone.errors import RunNotFoundError

__all__ = [
    "Activity",
    "RunView",
    "WatchMode",
    "WatchState",
    "follow_tree",
    "live_console",
    "print_summary",
    "render_live",
    "render_summary",
    "render_tree",
    "root_of",
]

#: Refreshes per second of the live display (spinners and durations move between events).
LIVE_REFRESH_PER_SECOND = 8


class WatchMode(StrEnum):
    LIVE = "live"
    PLAIN = "plain"
    JSON = "json"


def live_console(file: TextIO) -> Console:
    """The console of the live view. Unlike `otherone.client.console.make_console` it wraps: a live
    display must know how many lines each frame takes to redraw it in place."""
    return Console(file=file, highlight=False, emoji=False)


async def root_of(client: Client, run_id: str) -> str:
    """The root run of ``run_id``'s tree (itself for a root); `RunNotFoundError` if unknown.

    Described rather than queried, so it needs no worker (a run waiting for one is found)."""
    try:
        description = await client.get_workflow_handle(run_id).describe()
    except RPCError as error:
        if error.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise RunNotFoundError(run_id) from None
        raise
    return description.root_id or run_id


async def follow_tree(
    events: AsyncIterator[EventRecord],
    state: WatchState,
    *,
    mode: WatchMode,
    out: TextIO,
    printer: EventPrinter | None = None,
    live_console: Console | None = None,
) -> WatchState:
    """Fold ``events`` into ``state`` while showing them; returns when the iterator ends.

    ``json`` writes each envelope to ``out``; ``plain`` hands each to ``printer``; ``live``
    draws `render_live` on ``live_console`` (cleared at the end: the caller prints the final
    summary). The iterator decides when to stop (`AgentClient.events` ends at the root's end).
    """
    if mode is WatchMode.JSON:
        async for record in events:
            state.apply(record)
            out.write(record.model_dump_json() + "\n")
            out.flush()
    elif mode is WatchMode.PLAIN:
        if printer is None:
            raise ValueError("plain mode needs an EventPrinter")
        async for record in events:
            state.apply(record)
            printer.handle(record)
        printer.finish()
    else:
        if live_console is None:
            raise ValueError("live mode needs a console")
        async with _live(state, live_console):
            async for record in events:
                state.apply(record)
    return state


@contextlib.asynccontextmanager
async def _live(state: WatchState, console: Console) -> AsyncIterator[Live]:
    """A transient `Live` display refreshed by a task of the running event loop.

    Refreshing from the loop (not rich's own thread) means a frame is never drawn while the
    state is half-way through an `apply`.
    """
    live = Live(
        console=console,
        auto_refresh=False,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
        get_renderable=lambda: render_live(state, datetime.now(UTC)),
    )

    async def refresh() -> None:
        while True:
            live.refresh()
            await asyncio.sleep(1 / LIVE_REFRESH_PER_SECOND)

    with live:
        task = asyncio.ensure_future(refresh())
        try:
            yield live
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
