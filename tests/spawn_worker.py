"""A worker process for the spawn fault test: the test kills it with SIGKILL and starts another.

    python -m tests.spawn_worker ADDRESS TASK_QUEUE STORE_URL WORKDIR

It serves `spawn_config()` (a caller that spawns two slow children, then awaits them) and
prints ``ready`` once it polls. With ``OTHERONE_TEST_SPAWNER=later-turn`` in its environment,
the caller has a slow turn of its own (a status call) between the spawns and the await.
"""

from __future__ import annotations

import asyncio
import os
import sys

from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.store import Store
from otherone.worker.app import build_worker, connect
from tests.harness import scripted_config

#: Slow enough that the test can kill the worker while both children stream.
SLOW_CHUNKS = [f"part{index} " for index in range(24)]


#: The environment variable that picks the caller's script (see the module's docstring).
VARIANT = "OTHERONE_TEST_SPAWNER"


def spawn_config() -> RuntimeConfig:
    def spawn(call_id: str) -> dict[str, object]:
        return {
            "id": call_id,
            "name": "agent.spawn",
            "arguments": {"agent": "slowchild", "task": f"write {call_id}"},
        }

    status = {"id": "st", "name": "agent.status", "arguments": {"handle": "s1"}}
    later_turn = [{"chunks": SLOW_CHUNKS, "chunk_delay_seconds": 0.25, "tool_calls": [status]}]
    return scripted_config(
        {
            "spawner": [
                {"tool_calls": [spawn("s1"), spawn("s2")]},
                *(later_turn if os.environ.get(VARIANT) == "later-turn" else []),
                {"tool_calls": [{"id": "aw", "name": "agent.await", "arguments": {}}]},
                "spawner done",
            ],
            "slowchild": [{"chunks": SLOW_CHUNKS, "chunk_delay_seconds": 0.25}],
        },
        agents=[
            AgentDefinition(
                id="spawner",
                description="spawns",
                callable_agents=["slowchild"],  # type: ignore[arg-type]
                spawn=True,
            ),
            AgentDefinition(id="slowchild", description="writes slowly"),
        ],
    )


async def serve(address: str, task_queue: str, store_url: str) -> None:
    client = await connect(address)
    store = Store.open(store_url)
    worker = build_worker(client, spawn_config(), store, task_queue=task_queue)
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed


def main() -> None:
    address, task_queue, store_url = sys.argv[1:4]
    asyncio.run(serve(address, task_queue, store_url))


if __name__ == "__main__":
    main()
