"""Deploying changed workflow code while runs are in flight (docs/upgrading.md).

Why: agent runs last minutes to hours, so a deploy always meets runs that began on the old code.
A worker that picks such a run up replays its history on the *new* code; a change that emits
different commands there fails the run's workflow tasks with a nondeterminism error until the
old code returns. What must hold, with a real worker swap in the middle of a run:

- a change behind ``workflow.patched(id)`` lets a run started on the old code finish on the new
  worker by the old path, while runs started after the deploy take the new path;
- the same change without the guard does not replay the old run's history (the Replayer shows
  it before any deploy — the check the procedure asks for);
- the follow-up steps hold too: the new runs' histories do not replay on the old code (so a
  rollback must wait, or keep the patch), and ``deprecate_patch`` replays the new runs but not
  the old ones (so it waits until no old run is left).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from otherone.client.agent_client import AgentClient, build_request
from otherone.definitions import AccessPolicy, AgentDefinition
from otherone.errors import RunStuckError
from otherone.runs import AgentRunResult, RunOutcome, RunStatus
from otherone.store import Store
from otherone.tools import tool
from otherone.worker.app import build_worker, sandbox_runner
from otherone.worker.upgrade import replay_check
from otherone.workflows import AgentRunWorkflow
from tests.harness import scripted_config, wait_until
from tests.providers import RecordingProvider
from tests.upgrade_workflows import (
    VERSION_2_PATCH,
    VERSION_KEY,
    DeprecatedPatchAgentRunWorkflow,
    PatchedAgentRunWorkflow,
    UnpatchedAgentRunWorkflow,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


@tool
def lookup(key: str) -> str:
    """Look a key up (fixed data)."""
    return f"value of {key}"


CONFIG = scripted_config(
    {
        "agent": [
            {"tool_calls": [{"name": "lookup", "id": "look", "arguments": {"key": "k"}}]},
            "done",
        ]
    },
    agents=[AgentDefinition(id="agent", description="agent", tools=AccessPolicy.allow("lookup"))],
    tools=[lookup],
)


async def _history(handle: WorkflowHandle[Any, Any]) -> WorkflowHistory:
    return WorkflowHistory.from_json(handle.id, (await handle.fetch_history()).to_json())


async def _replays(workflow: type, history: WorkflowHistory) -> bool:
    """True if ``history`` replays on ``workflow``; False on a nondeterminism error."""
    replayer = Replayer(
        workflows=[workflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    try:
        await replayer.replay_workflow(history)
    except NondeterminismError:
        return False
    return True


async def _count(client: Client, query: str, expected: int) -> bool:
    return (await client.count_workflows(query)).count == expected


#: The command line on the unpatched change: `main` with another workflow class.
UNPATCHED_CHECK = """
import os, sys
from otherone.worker.upgrade import main
from tests.upgrade_workflows import UnpatchedAgentRunWorkflow
code = main(sys.argv[1:], workflows=[UnpatchedAgentRunWorkflow])
sys.stdout.flush()
os._exit(code)
"""


async def _upgrade_check(
    client: Client, query: str, *options: str, unpatched: bool = False
) -> tuple[int, str]:
    """``python -m otherone.worker.upgrade --query QUERY`` against the test server (on the
    unpatched workflow when ``unpatched``)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTHERONE_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        OTHERONE_TEMPORAL_ADDRESS=client.service_client.config.target_host,
    )
    program = ["-c", UNPATCHED_CHECK] if unpatched else ["-m", "otherone.worker.upgrade"]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *program,
        "--query",
        query,
        *options,
        cwd=REPO_ROOT,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, output.decode()


def _patch_markers(history: WorkflowHistory) -> int:
    return sum(
        1
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and VERSION_2_PATCH.encode() in event.marker_recorded_event_attributes.SerializeToString()
    )


async def _version_memo(handle: WorkflowHandle[Any, Any]) -> Any:
    return (await (await handle.describe()).memo()).get(VERSION_KEY)


@pytest.mark.timeout(120)
async def test_a_patched_change_lets_runs_in_flight_finish_on_the_old_path(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    agents = AgentClient(client, task_queue=task_queue, store=store)
    try:
        # Old code: a run gets through its tool call; its second model call is in flight when
        # the worker is stopped for the deploy.
        old_provider = RecordingProvider()
        old_provider.gate("agent", 2)  # never opened: the deploy interrupts this call
        async with build_worker(
            client, CONFIG, store, task_queue=task_queue, providers={"scripted": old_provider}
        ):
            old = await agents.start(build_request(entry_agent="agent", input="before the deploy"))
            await wait_until(
                lambda: len(old_provider.calls("agent")) == 2, message="second model call held"
            )
            in_flight = await _history(client.get_workflow_handle(old.run_id))

            # Before deploying, the procedure's check (`otherone.worker.upgrade`): the running runs
            # replay
            # on the patched code, and would not on the same change without the patch.
            running = f'TaskQueue="{task_queue}" AND ExecutionStatus="Running"'
            await wait_until(
                lambda: _count(client, running, 1), message="the run listed as running"
            )
            unpatched = await replay_check(
                client, workflows=[UnpatchedAgentRunWorkflow], query=running
            )
            assert unpatched.checked == 1 and list(unpatched.failures) == [old.run_id]
            assert "Nondeterminism" in unpatched.failures[old.run_id]
            patched = await replay_check(client, workflows=[PatchedAgentRunWorkflow], query=running)
            assert patched.checked == 1 and patched.ok
            # The command-line form, run from the current code: the run replays (exit 0).
            code, output = await _upgrade_check(client, running)
            assert code == 0, output
            assert output.strip().splitlines()[-1] == "1 run(s) checked: all replay", output
            # On the unpatched change: exactly one line per run, details only when asked.
            code, output = await _upgrade_check(client, running, unpatched=True)
            assert code == 1, output
            lines = output.strip().splitlines()
            assert len(lines) == 2, output
            assert lines[0].startswith(f"would fail: {old.run_id}: NondeterminismError"), output
            assert lines[1] == "1 run(s) checked: 1 would fail", output
            code, verbose = await _upgrade_check(client, running, "--verbose", unpatched=True)
            assert code == 1 and len(verbose.splitlines()) > len(lines), verbose

        # The same checks on the history alone (the Replayer, no Temporal needed).
        assert await _replays(PatchedAgentRunWorkflow, in_flight)
        assert not await _replays(UnpatchedAgentRunWorkflow, in_flight)

        # New code: the interrupted model call is retried here; the old run finishes on v1.
        new_provider = RecordingProvider()
        async with build_worker(
            client,
            CONFIG,
            store,
            task_queue=task_queue,
            providers={"scripted": new_provider},
            workflows=[PatchedAgentRunWorkflow],
        ):
            old_result: AgentRunResult = await asyncio.wait_for(old.result(), 60)
            new_result = await agents.run(
                build_request(entry_agent="agent", input="after the deploy")
            )
    finally:
        store.close()

    assert old_result.outcome is new_result.outcome is RunOutcome.COMPLETED
    assert (old_result.text, new_result.text) == ("done", "done")
    assert old_result.metadata[VERSION_KEY] == 1
    assert new_result.metadata[VERSION_KEY] == 2
    # The old run's second model call ran on the new worker (the deploy did not lose it).
    assert [request.turn for request in new_provider.calls("agent")] == [2, 1, 2]

    old_handle = client.get_workflow_handle(old_result.run_id)
    new_handle = client.get_workflow_handle(new_result.run_id)
    assert await _version_memo(old_handle) is None
    assert await _version_memo(new_handle) == 2
    old_history, new_history = await _history(old_handle), await _history(new_handle)
    assert (_patch_markers(old_history), _patch_markers(new_history)) == (0, 1)

    # Both finished histories replay on the patched code; the old one on the old code too.
    assert await _replays(PatchedAgentRunWorkflow, old_history)
    assert await _replays(PatchedAgentRunWorkflow, new_history)
    assert await _replays(AgentRunWorkflow, old_history)
    # Rolling back is not free: a run that took the new path does not replay on the old code.
    assert not await _replays(AgentRunWorkflow, new_history)
    # Step two (deprecate_patch) fits the new runs, and only them: wait until old runs are gone.
    assert await _replays(DeprecatedPatchAgentRunWorkflow, new_history)
    assert not await _replays(DeprecatedPatchAgentRunWorkflow, old_history)


@tool(approval="always")
def send_email(to: str) -> str:
    """Send an email (a person approves each)."""
    return f"sent to {to}"


WAITING = scripted_config(
    {
        "clerk": [
            {"tool_calls": [{"name": "send_email", "id": "mail", "arguments": {"to": "a"}}]},
            "sent",
        ]
    },
    agents=[
        AgentDefinition(id="clerk", description="clerk", tools=AccessPolicy.allow("send_email"))
    ],
    tools=[send_email],
)


async def _task_failed(handle: WorkflowHandle[Any, Any]) -> bool:
    history = await handle.fetch_history()
    return any(
        event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for event in history.events
    )


@pytest.mark.timeout(120)
async def test_a_run_whose_workflow_task_fails_can_be_read_and_says_why_it_takes_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """During a deploy's overlap (or after a rollback) a worker whose code cannot replay a run
    fails its workflow task until code that can takes it (docs/upgrading.md: stuck, not lost).
    Meanwhile the run's record is read from the store (`show`, `tree`, `GET /v1/runs/{id}`
    failed: "Workflow Task in failed state", a 500 for a query a worker failed) and a decision
    is refused saying why (`RunStuckError`; it was Temporal's bare FAILED_PRECONDITION)."""
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    agents = AgentClient(client, task_queue=task_queue, store=store)
    try:
        async with build_worker(client, WAITING, store, task_queue=task_queue):
            handle = await agents.start(build_request(entry_agent="clerk", input="mail a"))

            async def waiting() -> bool:
                return bool(await agents.pending_approvals(handle.run_id))

            await wait_until(waiting, within=30, message="the approval request")
        workflow = client.get_workflow_handle(handle.run_id)
        async with build_worker(
            client, WAITING, store, task_queue=task_queue, workflows=[UnpatchedAgentRunWorkflow]
        ):
            # A worker on code that cannot replay the run answers its query with an error...
            record = await agents.get_run(handle.run_id)
            assert record.status is RunStatus.WAITING_FOR_APPROVAL and record.agent_id == "clerk"
            # ...and fails its workflow task, which Temporal then keeps in "failed state".
            await agents.send_message(handle.run_id, "are you there?")
            await wait_until(lambda: _task_failed(workflow), within=30, message="a failed task")
            record = await agents.get_run(handle.run_id)
            assert record.status is RunStatus.WAITING_FOR_APPROVAL
            [tree] = await agents.list_run_tree(handle.run_id)
            assert tree.run_id == handle.run_id
            with pytest.raises(RunStuckError, match="workflow task keeps failing"):
                await agents.approve(handle.run_id, "mail")
            storeless = AgentClient(client, task_queue=task_queue)
            with pytest.raises(RunStuckError, match="its record is in the store"):
                await storeless.get_run(handle.run_id)
        async with build_worker(client, WAITING, store, task_queue=task_queue):
            # Code that replays it takes the task at Temporal's next try (after a backoff).
            async def approved() -> bool:
                try:
                    await agents.approve(handle.run_id, "mail")
                except RunStuckError:
                    return False
                return True

            await wait_until(approved, within=60, interval=1, message="the approval taken")
            result = await asyncio.wait_for(handle.result(), 60)
    finally:
        store.close()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "sent"
