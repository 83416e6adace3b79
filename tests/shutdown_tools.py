"""A slow tool with a side effect, for ``tests/test_worker_shutdown.py``.

A module of its own (not the test file) because the worker under test is a separate
``otherone worker`` process that imports it by reference from its TOML configuration
(``tests.shutdown_tools:record_side_effect``), exactly as a deployment imports its tools.

The tool is driven through files in the directory named by `SIDE_EFFECTS_DIR_ENV`:

- ``started``: one line per attempt, written as soon as the tool runs;
- ``release``: created by the test; the tool waits for it, so the test decides when it ends
  (no timing guesses: a worker that does not wait for it cannot have completed the tool);
- ``effects``: the side effect, one line per completed call (idempotency key, label, time).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from otherone.tools import ToolContext, tool

SIDE_EFFECTS_DIR_ENV = "OTHERONE_TEST_SIDE_EFFECTS_DIR"
#: The tool gives up waiting for ``release`` after this long (the test fails long before).
WAIT_LIMIT_SECONDS = 100.0


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


@tool(timeout_seconds=120)
async def record_side_effect(label: str, context: ToolContext) -> str:
    """Record a side effect once the test releases it.

    Args:
        label: Written into the side-effect file.
    """
    directory = Path(os.environ[SIDE_EFFECTS_DIR_ENV])
    _append(directory / "started", f"{context.idempotency_key} attempt {context.attempt}")
    deadline = time.monotonic() + WAIT_LIMIT_SECONDS
    while not (directory / "release").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the tool")
        await asyncio.sleep(0.05)
    _append(directory / "effects", f"{context.idempotency_key} {label} {time.time():.6f}")
    return f"recorded {label}"
