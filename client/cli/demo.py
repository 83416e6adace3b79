"""``otherone demo``: an offline end-to-end run of the example team on its own in-memory dev
server, worker and temporary store."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from otherone.client.agent_client import AgentClient, build_request
from otherone.client.cli.context import Context
from otherone.client.cli.output import exit_code, follow_run, print_output
from otherone.client.cli.parser import DEMO_AGENT, DEMO_QUESTION
from otherone.client.cli.show import load_tree
from otherone.client.cli.temporal import connect_checked
from otherone.client.console import EventPrinter, print_result_summary, print_run_tree
from otherone.examples import EXAMPLE_CONFIG
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.worker.app import build_worker
from otherone.worker.codec import codec_from_settings
from otherone.worker.devserver import DevServer

DEMO_TASK_QUEUE = "otherone-demo"


async def cmd_demo(args: argparse.Namespace, ctx: Context) -> int:
    config = load_config(EXAMPLE_CONFIG)
    request = build_request(entry_agent=DEMO_AGENT, input=DEMO_QUESTION)
    with tempfile.TemporaryDirectory(prefix="otherone-demo-") as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'otherone.db'}")
        server = DevServer(db_file=None, namespace="default")
        try:
            ctx.err.print("starting an in-memory Temporal dev server…", style="dim")
            await ctx.interruptible(server.start())
            codec = codec_from_settings(ctx.settings)
            client = await connect_checked(server.address, server.namespace, codec=codec)
            worker = build_worker(client, config, store, task_queue=DEMO_TASK_QUEUE)
            async with worker:
                agents = AgentClient(client, task_queue=DEMO_TASK_QUEUE, store=store)
                ctx.err.print(
                    f"Temporal {server.address} · Web UI {server.ui_url} · config {EXAMPLE_CONFIG}",
                    style="dim",
                    markup=False,
                )
                ctx.err.print(f"> {DEMO_AGENT}: {DEMO_QUESTION}", style="bold", markup=False)
                handle = await ctx.interruptible(agents.start(request))
                printer = EventPrinter(handle.run_id, sys.stdout, ctx.err)
                result = await ctx.interruptible(follow_run(handle, store, printer))
                description = await client.get_workflow_handle(result.run_id).describe()
                link = server.workflow_url(result.run_id, description.run_id)
                print_output(result, printer)
                _, records = await ctx.interruptible(load_tree(agents, result.run_id))
                ctx.out.print()
                print_run_tree(ctx.out, records)
                sys.stdout.flush()
                print_result_summary(ctx.err, result, ui_url=link)
                code = exit_code(result)
                if args.keep:
                    ctx.err.print(
                        f"the server stays up: open {link or server.ui_url} — Ctrl-C to stop",
                        markup=False,
                    )
                    sys.stdout.flush()
                    await ctx.stop.wait()
                else:
                    ctx.err.print(
                        "the demo's in-memory server stops now, so that link goes dead: "
                        "`otherone demo --keep` keeps it up until Ctrl-C",
                        style="dim",
                        markup=False,
                    )
        finally:
            await server.stop()
            store.close()
    return code
