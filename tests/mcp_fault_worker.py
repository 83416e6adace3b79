"""A worker process for the MCP crash test: the test kills it with SIGKILL and starts another.

    python -m tests.mcp_fault_worker ADDRESS TASK_QUEUE STORE_URL WORKDIR

Two stdio servers run `tests/mcp_stdio_server.py` (which logs each call's attempt and waits for
WORKDIR/release): ``steady`` is marked idempotent (its calls are retried), ``once`` is not (a
call lost with its worker is reported to the model). Prints ``ready`` once it polls.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.mcp_servers import McpServer
from otherone.store import Store
from otherone.worker.app import build_worker, connect
from tests.harness import scripted_config

STDIO_TEST_SERVER = Path(__file__).with_name("mcp_stdio_server.py")


def mcp_fault_config() -> RuntimeConfig:
    def waiting(server: str) -> list[object]:
        arguments = {"token": server}
        return [
            {
                "tool_calls": [
                    {"id": "w", "name": f"mcp.{server}.wait_for_release", "arguments": arguments}
                ]
            },
            f"{server} done",
        ]

    config = scripted_config(
        {"steady": waiting("steady"), "once": waiting("once")},
        agents=[
            AgentDefinition(id=name, description=f"{name} agent", tools=[f"mcp.{name}.*"])
            for name in ("steady", "once")
        ],
    )
    for name, idempotent in (("steady", True), ("once", False)):
        config.add_mcp_server(
            McpServer(
                name=name,
                command=sys.executable,
                args=(str(STDIO_TEST_SERVER),),
                env={"MCP_TEST_DIR": "${MCP_TEST_DIR}"},
                idempotent=idempotent,
            )
        )
    return config


async def serve(address: str, task_queue: str, store_url: str) -> None:
    client = await connect(address)
    store = Store.open(store_url)
    worker = build_worker(client, mcp_fault_config(), store, task_queue=task_queue)
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed


def main() -> None:
    address, task_queue, store_url, workdir = sys.argv[1:5]
    os.environ["MCP_TEST_DIR"] = workdir
    asyncio.run(serve(address, task_queue, store_url))


if __name__ == "__main__":
    main()
