"""A worker process for the guardrail fault test: killed with SIGKILL while its guardrail
activity runs, then started again.

    python -m tests.guardrail_fault_worker ADDRESS TASK_QUEUE STORE_URL WORKDIR

Its agent ``guarded`` has one input guardrail, ``slow_check``, which logs every attempt to
``WORKDIR/attempts.log`` and then waits for ``WORKDIR/release`` (a file: no event crosses
processes) before it passes.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.guardrails import GuardrailCheck, GuardrailResult, guardrail
from otherone.store import Store
from otherone.worker.app import build_worker, connect
from tests.harness import scripted_config

WORKDIR = Path(".")


@guardrail(timeout_seconds=120)
async def slow_check(check: GuardrailCheck) -> GuardrailResult:
    """Passes once the test releases it; every attempt is logged."""
    with (WORKDIR / "attempts.log").open("a") as log:
        log.write(f"{check.run_id}\n")
    while not (WORKDIR / "release").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return GuardrailResult.passed()


def guarded_config() -> RuntimeConfig:
    agent = AgentDefinition.model_validate(
        {"id": "guarded", "description": "guarded", "guardrails": {"input": ["slow_check"]}}
    )
    config = scripted_config({"guarded": ["checked and answered"]}, agents=[agent])
    config.add_guardrail(slow_check)
    return config


async def serve(address: str, task_queue: str, store_url: str) -> None:
    client = await connect(address)
    store = Store.open(store_url)
    async with build_worker(client, guarded_config(), store, task_queue=task_queue):
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed


def main() -> None:
    global WORKDIR
    address, task_queue, store_url, workdir = sys.argv[1:5]
    WORKDIR = Path(workdir)
    asyncio.run(serve(address, task_queue, store_url))


if __name__ == "__main__":
    main()
