"""``otherone show`` (a run's record) and ``tree`` (its tree of runs).

Following a run live (``watch``, ``run --follow``) is in `watching`: its rendering, keys and
store are not imported for a record.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from otherone.client.agent_client import AgentClient
from otherone.client.cli.attachments import attachments_of
from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK
from otherone.client.cli.stores import existing_store
from otherone.client.cli.temporal import agent_client, store_for_output
from otherone.client.records_view import print_record, print_run_tree
from otherone.errors import RunNotFoundError, RunStuckError
from otherone.runs import RunRecord

#: Seconds `tree` waits for Temporal's visibility to list children a run has called.
TREE_SETTLE_SECONDS = 2.0


async def cmd_show(args: argparse.Namespace, ctx: Context) -> int:
    agents = await agent_client(ctx, all_partitions=args.all_partitions, store_when_needed=True)
    try:
        record = await agents.get_run(args.run_id)  # a running run's record needs a live worker
    except (RunStuckError, RunNotFoundError):
        if agents.store is not None:
            raise
        # Its record as the store last has it (stuck), or keeps it (Temporal forgot the run).
        agents.store = existing_store(ctx.settings)
        record = await agents.get_run(args.run_id)
    if record.output is not None and record.output.is_reference:
        record = record.model_copy(
            update={"output": await store_for_output(ctx, agents, record.output)}
        )
    if args.json:
        sys.stdout.write(record.model_dump_json() + "\n")
    else:
        print_record(ctx.out, record)
        if record.parent_run_id is None:
            from otherone.client.cli.forks import show_turns

            await show_turns(ctx, agents, record.run_id)
        if agents.store is None:
            agents.store = existing_store(ctx.settings)
        for line in await attachments_of(agents.store, record):
            ctx.out.print(f"attachment  {line}", markup=False)
    return EXIT_OK


async def cmd_tree(args: argparse.Namespace, ctx: Context) -> int:
    agents = await agent_client(ctx, all_partitions=args.all_partitions)
    _, records = await load_tree(agents, args.run_id)
    if args.json:
        sys.stdout.write("[" + ",".join(record.model_dump_json() for record in records) + "]\n")
    else:
        print_run_tree(ctx.out, records, marked=args.run_id)
    return EXIT_OK


async def load_tree(agents: AgentClient, run_id: str) -> tuple[RunRecord, list[RunRecord]]:
    """The record of ``run_id`` and every record of its root's tree (root first).

    Temporal lists children through its visibility store, which may lag a little behind: while
    some run has made more agent calls than the listing shows children for it, list again (for
    at most `TREE_SETTLE_SECONDS`; a call refused before its child started has no child).
    """
    record = await agents.get_run(run_id)  # RunNotFoundError (exit 3) for an unknown id
    loop = asyncio.get_running_loop()
    settle_until = loop.time() + TREE_SETTLE_SECONDS
    while True:
        records = await agents.list_run_tree(record.root_run_id)
        children: dict[str, int] = {}
        for found in records:
            if found.parent_run_id is not None:
                children[found.parent_run_id] = children.get(found.parent_run_id, 0) + 1
        missing = any(found.usage.agent_calls > children.get(found.run_id, 0) for found in records)
        if not missing or loop.time() >= settle_until:
            return record, records
        await asyncio.sleep(0.1)
