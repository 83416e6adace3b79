"""A worker process for the approval crash test: killed with SIGKILL while a run waits.

    python -m tests.approval_worker ADDRESS TASK_QUEUE STORE_URL WORKDIR

Serves agent ``mailer``, whose `send_mail` needs approval and writes its side effect to
WORKDIR/sent (one line per call), and prints ``ready`` once it polls.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.store import Store
from otherone.tools import tool
from otherone.worker.app import build_worker, connect
from tests.harness import scripted_config

WORKDIR = Path(".")


@tool(approval="always")
def send_mail(to: str) -> str:
    """Send a mail."""
    with (WORKDIR / "sent").open("a") as sent:
        sent.write(f"{to}\n")
    return f"sent to {to}"


def approval_config() -> RuntimeConfig:
    mail = {"tool_calls": [{"id": "mail", "name": "send_mail", "arguments": {"to": "bob"}}]}
    return scripted_config(
        {"mailer": [mail, "mailed"]},
        agents=[
            AgentDefinition.model_validate(
                {"id": "mailer", "description": "mails", "tools": ["send_mail"]}
            )
        ],
        tools=[send_mail],
    )


async def serve(address: str, task_queue: str, store_url: str) -> None:
    client = await connect(address)
    store = Store.open(store_url)
    async with build_worker(client, approval_config(), store, task_queue=task_queue):
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed


def main() -> None:
    global WORKDIR
    address, task_queue, store_url, workdir = sys.argv[1:5]
    WORKDIR = Path(workdir)
    asyncio.run(serve(address, task_queue, store_url))


if __name__ == "__main__":
    main()
