"""Re-record the checked-in workflow histories: `make record-histories`.

Do this only when a workflow change is *meant* to be incompatible (and guarded by
`workflow.patched`); otherwise a failing replay test is the bug report.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

from tests.harness import start_test_server
from tests.histories.scenarios import SCENARIOS

HERE = Path(__file__).resolve().parent


async def record() -> None:
    env = await start_test_server()
    try:
        for name, scenario in SCENARIOS.items():
            with tempfile.TemporaryDirectory() as tmp:
                run_id = await scenario(env.client, f"record-{uuid.uuid4()}", Path(tmp))
            history = await env.client.get_workflow_handle(run_id).fetch_history()
            path = HERE / f"{name}.json"
            path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
            print(f"recorded {path.relative_to(HERE.parents[1])}")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
    sys.stdout.flush()
    os._exit(0)
