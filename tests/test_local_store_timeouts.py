"""A local prepare_run or finish_run that times out must replay as it ran: Temporal hands the
workflow the timeout inside an `ActivityError` when it happens, but bare (a `TimeoutError`)
when replaying it from its marker. A real dev server, a real SQLite store held at one call."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from otherone import contracts
from otherone.client.agent_client import build_request
from otherone.errors import FailureCode
from otherone.runs import RunOutcome
from otherone.worker.app import data_converter
from otherone.workflows import AgentRunWorkflow, store_steps
from tests.edge_seams import GateStore
from tests.harness import agent_env, scripted_config

#: The store activities' total bound for this test (a local activity's schedule-to-close):
#: at least the workflow task timeout (a shorter one was applied per attempt in temporalio
#: 1.35, the attempt retried instead of timing out).
BOUND = timedelta(seconds=10)


async def test_a_local_finish_that_timed_out_replays(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where the workflow code reads it (imported once, or again per run by the sandbox).
    monkeypatch.setattr(store_steps, "STORE_TOTAL_TIMEOUT", BOUND)
    monkeypatch.setattr(contracts, "STORE_TOTAL_TIMEOUT", BOUND)
    hold = BOUND.total_seconds() + 20
    store = GateStore(f"sqlite:///{tmp_path / 'store.db'}", held="release_session", bound=hold)
    config = scripted_config({"agent": ["done"]})
    try:
        async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
            handle = await env.agents.start(build_request(entry_agent="agent", input="go"))
            result = await asyncio.wait_for(handle.result(), hold)
            store.release.set()
            history = await client.get_workflow_handle(result.run_id).fetch_history()
    finally:
        store.release.set()
        store.close()
    # The end could not be stored in time: a completed run fails so (`BOUNDED_FINISH`).
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.STORAGE_ERROR
    replayer = Replayer(workflows=[AgentRunWorkflow], data_converter=data_converter())
    replayed = await replayer.replay_workflow(history)
    assert replayed.replay_failure is None, replayed.replay_failure
