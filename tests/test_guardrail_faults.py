"""A worker killed (SIGKILL) while a guardrail activity runs: the guardrail runs again on the
next worker (Temporal's retry after the heartbeat timeout), its verdict is decided once, the
model is called once, and the run's history replays."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from otherone.client.agent_client import build_request
from otherone.runs import RunOutcome
from otherone.worker.app import sandbox_runner
from otherone.workflows import AgentRunWorkflow
from tests.harness import wait_until
from tests.processes import shared_store, worker_module

pytestmark = pytest.mark.timeout(240)


async def test_a_worker_killed_during_a_guardrail_activity_loses_and_repeats_nothing(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    attempts = tmp_path / "attempts.log"

    def attempted() -> int:
        return len(attempts.read_text().splitlines()) if attempts.exists() else 0

    with shared_store(temporal_env, client, task_queue, tmp_path) as shared:
        module = "tests.guardrail_fault_worker"
        args = (shared.address, task_queue, shared.url, tmp_path)
        async with worker_module(module, *args) as first:
            handle = await shared.agents.start(build_request(entry_agent="guarded", input="hi"))
            await wait_until(lambda: attempted() == 1, within=60, message="the guardrail running")
            first.send_signal(signal.SIGKILL)
            await first.exit_code()
        async with worker_module(module, *args):
            await wait_until(lambda: attempted() == 2, within=90, message="its retry")
            (tmp_path / "release").touch()
            result = await handle.result()
            events = [e.event for e in shared.store.read_events(handle.run_id, limit=10_000)]
        history = await client.get_workflow_handle(handle.run_id).fetch_history()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "checked and answered"
    assert result.usage.model_calls == 1
    assert [e["guardrail"] for e in events if e["type"] == "guardrail_passed"] == ["slow_check"]
    replayer = Replayer(
        workflows=[AgentRunWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    replayed = await replayer.replay_workflow(
        WorkflowHistory.from_json(handle.run_id, history.to_json())
    )
    assert replayed.replay_failure is None
