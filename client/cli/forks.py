"""``otherone fork RUN --at-turn N [--input TEXT] [--definition original|current]``: a new root
run from one of a run's turns (`otherone.client.forks`), and the turns ``otherone show``
lists for it."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK, EXIT_USAGE, CliError
from otherone.client.cli.stores import existing_store
from otherone.client.cli.temporal import agent_client
from otherone.errors import OtheroneError

if TYPE_CHECKING:
    from rich.console import Console

    from otherone.client.forks import Turn

#: Characters of a turn's message `otherone show` prints (its first line).
_MESSAGE_CHARS = 100


async def cmd_fork(args: argparse.Namespace, ctx: Context) -> int:
    agents = await agent_client(ctx, all_partitions=args.all_partitions)
    if agents.store is None:
        raise CliError(EXIT_USAGE, "fork: no store (give --database-url as the workers')")
    try:
        fork = await agents.fork(
            args.run_id, at_turn=args.at_turn, input=args.input, definition=args.definition
        )
    finally:
        agents.store.close()
    if args.json:
        print(
            json.dumps(
                {
                    "run_id": fork.run_id,
                    "session_id": fork.session_id,
                    "forked_from": fork.forked_from.model_dump(mode="json"),
                }
            )
        )
        return EXIT_OK
    print(fork.run_id)
    ctx.err.print(
        f"run {fork.run_id} started: {args.run_id} forked at turn {args.at_turn} "
        f"(session {fork.session_id})",
        style="dim",
        markup=False,
    )
    return EXIT_OK


def print_turns(console: Console, turns: list[Turn]) -> None:
    """A run's turns, numbered as ``otherone fork --at-turn`` takes them."""
    if not turns:
        return
    table = Table(title="turns (otherone fork --at-turn N)", box=None, title_justify="left")
    table.add_column("N", justify="right", style="bold")
    table.add_column("user message", overflow="fold")
    table.add_column("entries", justify="right")
    table.add_column("tool calls", justify="right")
    for turn in turns:
        first_line = (turn.message.strip().splitlines() or [""])[0][:_MESSAGE_CHARS]
        table.add_row(
            str(turn.number), Text(first_line), str(len(turn.entries)), str(turn.tool_calls)
        )
    console.print(table)


async def show_turns(ctx: Context, store_owner: Any, run_id: str) -> None:
    """`otherone show`'s turns of root ``run_id``, when a store is there to read them."""
    from otherone.client.forks import run_turns, stored_root

    opened = store_owner.store is None
    if opened:
        store_owner.store = existing_store(ctx.settings)
    if store_owner.store is None:
        return
    try:
        record = await stored_root(store_owner, run_id)
        print_turns(ctx.out, await run_turns(store_owner.store, record))
    except OtheroneError:
        pass  # not in the store (yet): the record says all there is
    finally:
        if opened:
            store_owner.store.close()
            store_owner.store = None
