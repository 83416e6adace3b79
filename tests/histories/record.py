"""Re-record the checked-in workflow histories: `make record-histories`.

Do this when a release changes workflow code (a new build under Worker Versioning: runs of the
old build stay on it, docs/upgrading.md), or for a hot fix behind `patches.patched`; otherwise
a failing replay test is the bug report. Histories of the release before are kept (in
`previous/`) only while a patch of this release must replay them. `once/` holds histories
recorded once by a script of their own, whose timing a scenario cannot count on
(`record_local_timeout.py`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

from temporalio.client import Client, WorkflowHistory

from tests.harness import start_test_server
from tests.histories.scenarios import SCENARIOS

HERE = Path(__file__).resolve().parent


async def record(names: list[str]) -> None:
    """Record the named scenarios (all when none is named)."""
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(
            f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(SCENARIOS)}"
        )
    env = await start_test_server()
    try:
        for name, scenario in SCENARIOS.items():
            if names and name not in names:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                run_id = await scenario(env.client, f"record-{uuid.uuid4()}", Path(tmp))
            chain = await _histories(env.client, run_id)
            for index, history in enumerate(chain, start=1):
                # A run that continued as new has several histories: name.1.json, name.2.json...
                path = HERE / (f"{name}.json" if len(chain) == 1 else f"{name}.{index}.json")
                path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
                print(f"recorded {path.relative_to(HERE.parents[1])}")
    finally:
        await env.shutdown()


async def _histories(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every history of the run, oldest first (following continue-as-new back)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    chain = [history]
    while (
        previous := chain[0]
        .events[0]
        .workflow_execution_started_event_attributes.continued_execution_run_id
    ):
        handle = client.get_workflow_handle(workflow_id, run_id=previous)
        chain.insert(0, await handle.fetch_history())
    return chain


if __name__ == "__main__":
    asyncio.run(record(sys.argv[1:]))
    sys.stdout.flush()
    os._exit(0)
