"""A worker process for the sleep crash test: killed with SIGKILL while its run sleeps.

    python -m tests.sleep_worker ADDRESS TASK_QUEUE STORE_URL WORKDIR

Serves agent ``napper``, which sleeps for 4 seconds (`time.sleep`) and then answers
``rested``, and prints ``ready`` once it polls.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, RuntimeLimits
from otherone.store import Store
from otherone.worker.app import build_worker, connect
from tests.harness import scripted_config


def sleep_config() -> RuntimeConfig:
    nap = {"tool_calls": [{"id": "nap", "name": "time.sleep", "arguments": {"duration": 4}}]}
    return scripted_config(
        {"napper": [nap, "rested"]},
        agents=[AgentDefinition(id="napper", description="naps", sleep=True)],
        limits=RuntimeLimits(run_timeout=timedelta(hours=1), root_timeout=timedelta(hours=1)),
    )


async def serve(address: str, task_queue: str, store_url: str) -> None:
    client = await connect(address)
    store = Store.open(store_url)
    async with build_worker(client, sleep_config(), store, task_queue=task_queue):
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed


def main() -> None:
    address, task_queue, store_url = sys.argv[1:4]
    asyncio.run(serve(address, task_queue, store_url))


if __name__ == "__main__":
    main()
