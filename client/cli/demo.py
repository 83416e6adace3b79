"""``otherone demo``: an offline end-to-end run of the example team on its own in-memory dev
server, worker and temporary store."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from otherone.client.agent_client import AgentClient, build_request
from otherone.client.cli.context import Context
from otherone.client.cli.output import exit_code, follow_run, print_output
from otherone.client.cli.parser import DEMO_AGENT, DEMO_QUESTION
from otherone.client.cli.show import load_tree
from otherone.client.cli.temporal import connect_checked
from otherone.client.console import EventPrinter
from otherone.client.records_view import print_result_summary, print_run_tree
from otherone.config import AGENT_AWAIT_TOOL, AGENT_SPAWN_TOOL, RuntimeConfig
from otherone.contracts import ApprovalRequest
from otherone.definitions import ApprovalRule, ScriptedToolCall, ScriptedTurn
from otherone.examples import EXAMPLE_CONFIG
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.worker.app import build_worker
from otherone.worker.codec import codec_from_settings
from otherone.worker.devserver import DevServer

DEMO_TASK_QUEUE = "otherone-demo"
#: The demo's approval step: the coordinator's call to the writer waits for a person.
DEMO_APPROVAL_KEY = "agent.call:writer"
APPROVAL_POLL_SECONDS = 0.2
#: The demo's spawn: the coordinator starts this call of the example in the background.
DEMO_SPAWNED_CALL = "call_research"


def with_demo_spawn(config: RuntimeConfig) -> RuntimeConfig:
    """The example team, with the coordinator's research call made by `agent.spawn`: the
    researcher works in the background while the writer's call waits for its approval, and
    the coordinator collects the research with `agent.await` before it answers."""
    coordinator = config.agents[DEMO_AGENT]
    config.agents[DEMO_AGENT] = coordinator.model_copy(update={"spawn": True})
    model = config.models[coordinator.model or config.default_model or ""]
    first, *rest = model.script[DEMO_AGENT]
    calls = tuple(
        call.model_copy(update={"name": AGENT_SPAWN_TOOL}) if call.id == DEMO_SPAWNED_CALL else call
        for call in first.tool_calls
    )
    collect = ScriptedTurn(
        text="The note is drafted; now I collect the research.",
        tool_calls=(
            ScriptedToolCall(
                name=AGENT_AWAIT_TOOL,
                id="call_collect",
                arguments={"handles": [DEMO_SPAWNED_CALL]},
            ),
        ),
    )
    opening = first.model_copy(
        update={
            "text": "I'll have the researcher check the weather in the background "
            "while the writer drafts a note.",
            "tool_calls": calls,
        }
    )
    script = {**model.script, DEMO_AGENT: (opening, collect, *rest)}
    config.models[model.id] = model.model_copy(update={"script": script})
    return config


def with_demo_approval(config: RuntimeConfig) -> RuntimeConfig:
    """The example runtime, with a policy that makes calls to `writer` wait for approval."""
    rules = {**config.policy.approval, DEMO_APPROVAL_KEY: ApprovalRule()}
    config.policy = config.policy.model_copy(update={"approval": rules})
    return config


async def decide_approvals(
    ctx: Context, agents: AgentClient, root_run_id: str, *, interactive: bool
) -> None:
    """Answer the tree's approval requests as they come: approve them (and answer questions)
    automatically, or ask on the terminal. Runs until cancelled."""
    seen: set[tuple[str, str]] = set()
    while True:
        for request in await agents.pending_approvals(root_run_id):
            if (request.run_id, request.call_id) not in seen:
                seen.add((request.run_id, request.call_id))
                await _decide(ctx, agents, request, interactive=interactive)
        await asyncio.sleep(APPROVAL_POLL_SECONDS)


async def _decide(
    ctx: Context, agents: AgentClient, request: ApprovalRequest, *, interactive: bool
) -> None:
    """The run's events show the request and the decision (`EventPrinter`)."""
    if not interactive:
        if request.kind == "question":
            await agents.answer(request.run_id, request.call_id, "yes")
        else:
            await agents.approve(request.run_id, request.call_id)
        return
    prompt = (
        f"{request.question} > "
        if request.kind == "question"
        else f"approve {request.tool_name} {request.arguments}? [Y/n] "
    )
    reply = (await asyncio.to_thread(input, prompt)).strip()
    if request.kind == "question":
        await agents.answer(request.run_id, request.call_id, reply or "yes")
    elif reply.lower() in ("", "y", "yes"):
        await agents.approve(request.run_id, request.call_id)
    else:
        await agents.deny(request.run_id, request.call_id, "denied in the demo")


async def cmd_demo(args: argparse.Namespace, ctx: Context) -> int:
    config = with_demo_spawn(with_demo_approval(load_config(EXAMPLE_CONFIG)))
    request = build_request(entry_agent=DEMO_AGENT, input=DEMO_QUESTION)
    with tempfile.TemporaryDirectory(prefix="otherone-demo-") as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'otherone.db'}")
        # Free ports unless asked for (an `otherone dev` may hold the usual ones).
        server = DevServer(
            db_file=None,
            namespace="default",
            port=getattr(args, "temporal_port", None),
            ui_port=getattr(args, "ui_port", None),
        )
        try:
            ctx.err.print("starting an in-memory Temporal dev server…", style="dim")
            await ctx.interruptible(server.start())
            codec = codec_from_settings(ctx.settings)
            client = await connect_checked(server.address, server.namespace, codec=codec)
            worker = build_worker(
                client,
                config,
                store,
                task_queue=DEMO_TASK_QUEUE,
                workflow_sandbox=ctx.settings.workflow_sandbox,
            )
            async with worker:
                agents = AgentClient(client, task_queue=DEMO_TASK_QUEUE, store=store)
                ctx.err.print(
                    f"Temporal {server.address} · Web UI {server.ui_url} · config {EXAMPLE_CONFIG}",
                    style="dim",
                    markup=False,
                )
                how = (
                    "you decide"
                    if args.interactive
                    else "approved automatically; --interactive asks"
                )
                ctx.err.print(
                    f"the researcher works in the background (agent.spawn); the call to the "
                    f"writer waits for a person's approval ({how})",
                    style="dim",
                    markup=False,
                )
                ctx.err.print(f"> {DEMO_AGENT}: {DEMO_QUESTION}", style="bold", markup=False)
                handle = await ctx.interruptible(agents.start(request))
                printer = EventPrinter(handle.run_id, sys.stdout, ctx.err)
                approver = asyncio.create_task(
                    decide_approvals(ctx, agents, handle.run_id, interactive=args.interactive)
                )
                try:
                    result = await ctx.interruptible(follow_run(handle, store, printer))
                finally:
                    approver.cancel()
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
