"""A worker process for the fault tests: the test kills it with SIGKILL and starts another.

    python -m tests.fault_worker ADDRESS TASK_QUEUE STORE_URL WORKDIR

It serves the agents of `fault_config()` (scripted model, slow streams, a side-effecting tool)
and prints ``ready`` once it polls. The tool's side effect is keyed by the idempotency key it
is given, the way a real tool makes a payment exactly-once; every attempt is logged too, so
the test can tell a retry happened.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path

from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.store import Store
from otherone.tools import ToolContext, tool
from otherone.worker.app import build_worker, connect
from tests.harness import scripted_config

#: The test's working directory (effects/, attempts.log, release), set by `main`.
WORKDIR = Path(".")
SLOW_CHUNKS = [f"word{index} " for index in range(16)]


def effect_file(workdir: Path, idempotency_key: str) -> Path:
    return workdir / "effects" / hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


@tool
async def charge(order: str, ctx: ToolContext) -> str:
    """Charge an order (once per idempotency key), then wait until the test releases it."""
    return await _charged(order, ctx)


@tool(max_attempts=1)
async def charge_once(order: str, ctx: ToolContext) -> str:
    """`charge`, never retried (a tool that must not run twice, as a non-idempotent MCP
    server's): its attempt lost with its worker is the call's last."""
    return await _charged(order, ctx)


async def _charged(order: str, ctx: ToolContext) -> str:
    with (WORKDIR / "attempts.log").open("a") as log:
        log.write(f"{ctx.idempotency_key} {ctx.attempt}\n")
    effect = effect_file(WORKDIR, ctx.idempotency_key)
    if not effect.exists():
        effect.write_text(order)  # the side effect
    # The release comes from the test process: a file, since no event crosses processes.
    while not (WORKDIR / "release").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return f"charged {order}"


def _agent(agent_id: str, **fields: object) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


def fault_config() -> RuntimeConfig:
    slow = {"chunks": SLOW_CHUNKS, "chunk_delay_seconds": 0.25}
    return scripted_config(
        {
            "streamer": [slow, "heard you"],
            "buyer": [
                {"tool_calls": [{"id": "pay", "name": "charge", "arguments": {"order": "A"}}]},
                "bought",
            ],
            "boss": [
                {
                    "tool_calls": [
                        {
                            "id": "delegate",
                            "name": "agent.call",
                            "arguments": {"agent": "slowchild", "task": "write slowly"},
                        }
                    ]
                },
                "boss done",
            ],
            "slowchild": [slow],
            "payer": [
                {
                    "tool_calls": [
                        {"id": "once", "name": "charge_once", "arguments": {"order": "B"}}
                    ]
                },
                "paid",
            ],
        },
        agents=[
            _agent("streamer"),
            _agent("buyer", tools=["charge"]),
            _agent("payer", tools=["charge_once"]),
            _agent("boss", callable_agents=["slowchild"]),
            _agent("slowchild"),
        ],
        tools=[charge, charge_once],
    )


async def serve(address: str, task_queue: str, store_url: str) -> None:
    client = await connect(address)
    store = Store.open(store_url)
    worker = build_worker(client, fault_config(), store, task_queue=task_queue)
    # Which runner the worker's mode gave (`OTHERONE_WORKFLOW_SANDBOX`): tests check it.
    runner = worker.workers[0].config()["workflow_runner"]
    print(f"workflow runner: {type(runner).__name__}", flush=True)
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed


def main() -> None:
    global WORKDIR
    address, task_queue, store_url, workdir = sys.argv[1:5]
    WORKDIR = Path(workdir)
    (WORKDIR / "effects").mkdir(parents=True, exist_ok=True)
    asyncio.run(serve(address, task_queue, store_url))


if __name__ == "__main__":
    main()
