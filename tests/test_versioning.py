"""Worker Versioning (`otherone.worker.versioning`, docs/upgrading.md) on the dev server: a run
waiting for approval, started on build 1, completes on build 1 after build 2 became current; a
new run starts on build 2; build 1 is ``draining`` while its run waits, ``drained`` after."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request
from otherone.runs import AgentRunResult, RunOutcome
from otherone.store import Store
from otherone.worker.app import build_worker
from otherone.worker.settings import Settings
from otherone.worker.upgrade import replay_check
from otherone.worker.versioning import (
    VersionState,
    WorkerDeployment,
    set_current_version,
    version_state,
)
from tests import approval_worker
from tests.approval_worker import approval_config
from tests.harness import wait_until
from tests.processes import address_of, cli_env, otherone
from tests.upgrade_workflows import VERSION_KEY, UnpatchedAgentRunWorkflow

pytestmark = pytest.mark.timeout(180)


async def made_current(client: Client, deployment: WorkerDeployment) -> None:
    """Set ``deployment`` current once its workers have polled (it registers within ~1 s)."""

    async def attempt() -> bool:
        try:
            await set_current_version(client, deployment)
        except RPCError:
            return False  # not registered yet
        return True

    await wait_until(attempt, interval=0.2, message=f"{deployment} registered")


async def state(client: Client, deployment: WorkerDeployment) -> VersionState:
    return await version_state(client, deployment)


async def builds_that_ran(client: Client, run_id: str) -> set[str]:
    """The build ids of the workers that completed the run's workflow tasks."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    return {
        event.workflow_task_completed_event_attributes.deployment_version.build_id
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    }


async def test_a_waiting_run_finishes_on_its_build_after_a_new_one_becomes_current(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    temporal_env: WorkflowEnvironment,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(approval_worker, "WORKDIR", tmp_path)  # where send_mail writes
    address = address_of(temporal_env)
    name = f"otherone-{uuid.uuid4().hex[:8]}"
    build_1, build_2 = WorkerDeployment(name, "b1"), WorkerDeployment(name, "b2")
    config = approval_config()
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    agents = AgentClient(client, task_queue=task_queue, store=store)

    async def waiting(run_id: str) -> bool:
        return bool(await agents.pending_approvals(run_id))

    try:
        async with build_worker(client, config, store, task_queue=task_queue, deployment=build_1):
            await made_current(client, build_1)
            old = await agents.start(build_request(entry_agent="mailer", input="mail bob"))
            await wait_until(lambda: waiting(old.run_id), message="the old run waits")
            # The pre-deploy check leaves pinned runs out: they never move to build 2's code.
            only_old = f'WorkflowId = "{old.run_id}"'
            changed = [UnpatchedAgentRunWorkflow]
            skipped = await replay_check(client, workflows=changed, query=only_old)
            assert skipped.checked == 0
            moved = await replay_check(
                client, workflows=changed, query=only_old, include_pinned=True
            )
            assert moved.checked == 1 and list(moved.failures) == [old.run_id]
            check = await otherone(
                "upgrade", "check", "--query", only_old, env=cli_env(address, None, tmp_path)
            )
            assert check.code == 0 and "0 run(s) checked" in check.stdout, check
            # Build 2 changes the workflow: replaying the old run on it would fail.
            async with build_worker(
                client,
                config,
                store,
                task_queue=task_queue,
                deployment=build_2,
                workflows=[UnpatchedAgentRunWorkflow],
            ):
                await made_current(client, build_2)
                assert (await state(client, build_1)).status == "draining"
                new = await agents.start(build_request(entry_agent="mailer", input="mail eve"))
                await wait_until(lambda: waiting(new.run_id), message="the new run waits")
                await agents.approve(new.run_id, "mail")
                new_result: AgentRunResult = await new.result()
                await agents.approve(old.run_id, "mail")
                old_result: AgentRunResult = await old.result()
                await wait_until(
                    lambda: drained(client, build_1), within=60, message="build 1 drained"
                )
    finally:
        store.close()
    assert old_result.outcome is new_result.outcome is RunOutcome.COMPLETED
    assert VERSION_KEY not in old_result.metadata  # build 1's code, to its end
    assert new_result.metadata[VERSION_KEY] == 2  # build 2's
    assert await builds_that_ran(client, old.run_id) == {"b1"}
    assert await builds_that_ran(client, new.run_id) == {"b2"}


async def drained(client: Client, deployment: WorkerDeployment) -> bool:
    return (await state(client, deployment)).drainage == "drained"


def test_deployment_settings_come_in_pairs_and_name_no_dot() -> None:
    settings = Settings(deployment_name="otherone", build_id="0.1.0")
    assert settings.worker_deployment() == WorkerDeployment("otherone", "0.1.0")
    assert Settings().worker_deployment() is None
    with pytest.raises(ValueError, match="set together"):
        Settings(deployment_name="otherone")
    with pytest.raises(ValueError, match="deployment_name"):
        Settings(deployment_name="otherone.prod", build_id="1")
