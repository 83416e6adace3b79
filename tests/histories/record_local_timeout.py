"""Record `once/local_finish_timed_out.json` and `once/local_prepare_timed_out.json`:
runs whose local `finish_run` (`prepare_run`) timed out, its store held at one call.

    .venv/bin/python -m tests.histories.record_local_timeout [finish] [prepare]

A local activity's timeout reaches the workflow inside an `ActivityError` when it happens, but
bare (a `TimeoutError`) when replayed from its marker; `store_steps._store_activity` wraps it
(commit f92c437). These histories, replayed by tests/test_replay.py, are what guards that fix:
without it their replay fails (nondeterminism).

Not a scenario of `record.py` (re-recorded by `make record-histories`): its timing does not
always cooperate. On temporalio 1.35 a local activity may be retried as the *same* attempt
instead of timing out (when its workflow task fails on a loaded machine), which is why the live
test of the fix (tests/test_local_store_timeouts.py, removed in 00a7336) hung. Here each try is
bounded, a try that did not time out as meant is thrown away, and the script gives up after a
few. It keeps a history only if the run failed with a storage error *and* the history holds
the timed-out local activity's marker; it then checks that the history replays.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from otherone import contracts
from otherone.client.agent_client import build_request
from otherone.errors import FailureCode
from otherone.runs import RunOutcome
from otherone.worker.app import sandbox_runner
from otherone.worker.sandbox import WORKFLOW_SANDBOX_ENV
from otherone.workflows import AgentRunWorkflow, store_steps
from tests.edge_seams import GateStore
from tests.harness import agent_env, scripted_config, start_test_server

# Before any worker is built: the suite's sandbox mode (tests/conftest.py).
os.environ.setdefault(WORKFLOW_SANDBOX_ENV, "strict")

HERE = Path(__file__).resolve().parent
#: What times out -> (the store call held, the local activity that times out).
HELD = {
    "finish": ("end_run", "finish_run"),  # finish_run's one write
    "prepare": ("save_snapshot", "prepare_run"),  # prepare_run's first write
}

#: The store activities' total bound (a local activity's schedule-to-close) while recording.
BOUND = timedelta(seconds=3)
#: How long the held store call waits at its gate.
HOLD = 20.0
#: A try that has no result after this long is thrown away (the attempt was retried instead).
TRY_LIMIT = 45.0
TRIES = 5


async def _try_once(client: Client, tmp: Path, what: str) -> WorkflowHistory | str:
    """The history of one run whose ``what`` timed out, or why this try did not give one."""
    held, activity = HELD[what]
    store = GateStore(f"sqlite:///{tmp / 'store.db'}", held=held, bound=HOLD)
    config = scripted_config({"agent": ["done"]})
    try:
        async with agent_env(client, f"record-{uuid.uuid4()}", config, tmp, store=store) as env:
            handle = await env.agents.start(build_request(entry_agent="agent", input="go"))
            try:
                result = await asyncio.wait_for(handle.result(), TRY_LIMIT)
            except TimeoutError:
                await client.get_workflow_handle(handle.run_id).terminate("recording gave up")
                return f"no result within {TRY_LIMIT}s"
            finally:
                store.release.set()  # the worker's shutdown waits for the held call
            history = await client.get_workflow_handle(result.run_id).fetch_history()
    finally:
        store.release.set()
        store.close()
    if result.outcome is not RunOutcome.FAILED or result.failure is None:
        return f"the run ended {result.outcome.value}, not failed"
    if result.failure.code is not FailureCode.STORAGE_ERROR:
        return f"the run failed with {result.failure.code}, not a storage error"
    if not _timed_out(history, activity):
        return f"no timed-out {activity} marker in the history"
    return history


def _timed_out(history: WorkflowHistory, activity: str) -> bool:
    """Whether the history has a local-activity marker of ``activity`` failed by timeout."""
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        marker = event.marker_recorded_event_attributes
        failure = marker.failure
        if marker.marker_name == "core_local_activity" and failure.HasField("timeout_failure_info"):
            return activity.encode() in marker.details["data"].payloads[0].data
    return False


async def _replays(history: WorkflowHistory) -> Any:
    replayer = Replayer(
        workflows=[AgentRunWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    return (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure


async def record(names: list[str]) -> None:
    unknown = sorted(set(names) - set(HELD))
    if unknown:
        raise SystemExit(f"unknown: {', '.join(unknown)}; known: {', '.join(HELD)}")
    # Where the workflow code reads it: store_steps imported here, or again per run by the
    # sandbox (which takes it from the passed-through contracts).
    store_steps.STORE_TOTAL_TIMEOUT = BOUND  # type: ignore[attr-defined]
    contracts.STORE_TOTAL_TIMEOUT = BOUND
    env = await start_test_server()
    try:
        for what in names or list(HELD):
            await _record_one(env.client, what)
    finally:
        await env.shutdown()


async def _record_one(client: Client, what: str) -> None:
    target = HERE / "once" / f"local_{what}_timed_out.json"
    target.parent.mkdir(exist_ok=True)
    for attempt in range(1, TRIES + 1):
        with tempfile.TemporaryDirectory() as tmp:
            outcome = await _try_once(client, Path(tmp), what)
        if isinstance(outcome, str):
            print(f"{what}, try {attempt}: {outcome}", flush=True)
            continue
        failure = await _replays(outcome)
        if failure is not None:
            raise SystemExit(f"{what}: recorded, but it does not replay: {failure!r}")
        target.write_text(json.dumps(json.loads(outcome.to_json()), indent=1) + "\n")
        print(f"recorded {target.relative_to(HERE.parents[1])} (try {attempt})", flush=True)
        return
    raise SystemExit(f"{what}: no try of {TRIES} timed out as meant")


def main(names: list[str]) -> int:
    """Record, within a hard bound (a watchdog ends the process if even the event loop hangs)."""
    bound = len(names or HELD) * TRIES * (TRY_LIMIT + HOLD + 15) + 60
    watchdog = threading.Timer(bound + 30, lambda: os._exit(2))
    watchdog.daemon = True
    watchdog.start()
    try:
        asyncio.run(asyncio.wait_for(record(names), bound))
    except BaseException as failed:  # reported, and the exit status says so
        print(f"recording failed: {failed!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # not waiting for a held store call's thread
