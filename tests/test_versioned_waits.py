"""A run waiting for a person survives everything around it with Worker Versioning on (issue
46): the Temporal server restarting, the database dropping every connection (a restart or a
failover), and a continue-as-new around the deploy of a new build. In each case the run stays
pinned to the build it started on while it waits, and moves to the current build only at a
continue-as-new (`tests/test_versioning.py` covers the deploy of a new build itself)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from temporalio.api.enums.v1 import EventType, VersioningBehavior
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, RuntimePolicy
from otherone.partitions import DEFAULT_PARTITION
from otherone.runs import AgentRunResult, RunOutcome
from otherone.store import Store
from otherone.worker.app import build_worker, connect
from otherone.worker.devserver import DevServer, free_port
from otherone.worker.versioning import WorkerDeployment
from tests import approval_worker
from tests.approval_worker import approval_config, send_mail
from tests.harness import scripted_config, wait_until
from tests.store_fixtures import TestDatabases
from tests.test_versioning import builds_that_ran, made_current
from tests.upgrade_workflows import VERSION_KEY, UnpatchedAgentRunWorkflow

pytestmark = pytest.mark.timeout(180)


def _deployment(build_id: str, name: str | None = None) -> WorkerDeployment:
    return WorkerDeployment(name or f"otherone-{uuid.uuid4().hex[:8]}", build_id)


async def _waiting(agents: AgentClient, run_id: str, call_id: str = "mail") -> bool:
    return [request.call_id for request in await agents.pending_approvals(run_id)] == [call_id]


async def _pinned(client: Client, run_id: str) -> bool:
    description = await client.get_workflow_handle(run_id).describe()
    info = description.raw_description.workflow_execution_info.versioning_info
    return info.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_PINNED


@pytest.fixture(autouse=True)
def _mail_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(approval_worker, "WORKDIR", tmp_path)  # where send_mail writes


def _sent(tmp_path: Path) -> list[str]:
    return (tmp_path / "sent").read_text().splitlines()


async def test_a_pinned_waiting_run_survives_a_temporal_server_restart(
    tmp_path: Path, task_queue: str
) -> None:
    db_file, port = tmp_path / "temporal.db", free_port()
    build = _deployment("b1")
    server = DevServer(db_file=db_file, port=port, headless=True)
    await server.start()
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        client = await connect(server.address)
        agents = AgentClient(client, task_queue=task_queue, store=store)
        async with build_worker(
            client, approval_config(), store, task_queue=task_queue, deployment=build
        ):
            await made_current(client, build)
            handle = await agents.start(build_request(entry_agent="mailer", input="mail bob"))
            await wait_until(lambda: _waiting(agents, handle.run_id), message="the run waits")
            await server.stop()
            server = DevServer(db_file=db_file, port=port, headless=True)
            await server.start()  # same file, same port: the run and the deployment are there
            await wait_until(lambda: _waiting(agents, handle.run_id), within=60, message="back")
            await agents.approve(handle.run_id, "mail")
            result: AgentRunResult = await asyncio.wait_for(handle.result(), 120)
            assert await _pinned(client, handle.run_id)
            assert await builds_that_ran(client, handle.run_id) == {"b1"}
    finally:
        store.close()
        await server.stop()
    assert result.outcome is RunOutcome.COMPLETED
    assert _sent(tmp_path) == ["bob"]


async def test_a_pinned_waiting_run_survives_the_database_dropping_every_connection(
    client: Client, task_queue: str, tmp_path: Path, postgres_databases: TestDatabases
) -> None:
    """What a PostgreSQL restart or failover does to the worker: every pooled connection is
    gone. The decision's tool and the run's end are stored on new ones."""
    with postgres_databases.database(migrated=True) as url:
        store = Store.open(url)
        try:
            run_id = await _waits_while_connections_drop(client, task_queue, store)
            record = store.get_run_record(DEFAULT_PARTITION, run_id)
        finally:
            store.close()
    assert record is not None and record.status == "completed"
    assert _sent(tmp_path) == ["bob"]


async def _waits_while_connections_drop(client: Client, task_queue: str, store: Store) -> str:
    build = _deployment("b1")
    agents = AgentClient(client, task_queue=task_queue, store=store)
    async with build_worker(
        client, approval_config(), store, task_queue=task_queue, deployment=build
    ):
        await made_current(client, build)
        handle = await agents.start(build_request(entry_agent="mailer", input="mail bob"))
        await wait_until(lambda: _waiting(agents, handle.run_id), message="the run waits")
        # From an engine of its own: the store's pool would lend this its idle connection.
        with create_engine(store.engine.url, poolclass=NullPool).connect() as admin:
            ended = admin.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
        assert ended, "the worker's store held connections to drop"
        await agents.approve(handle.run_id, "mail")
        result = await asyncio.wait_for(handle.result(), 120)
        assert await builds_that_ran(client, handle.run_id) == {"b1"}
    assert result.outcome is RunOutcome.COMPLETED
    return handle.run_id


def _two_mails() -> RuntimeConfig:
    """Two approvals, a continue-as-new after every turn: the second waits in a new history."""
    mail = {"tool_calls": [{"id": "one", "name": "send_mail", "arguments": {"to": "bob"}}]}
    again = {"tool_calls": [{"id": "two", "name": "send_mail", "arguments": {"to": "eve"}}]}
    return scripted_config(
        {"mailer": [mail, again, "mailed"]},
        agents=[
            AgentDefinition.model_validate(
                {"id": "mailer", "description": "mails", "tools": ["send_mail"]}
            )
        ],
        tools=[send_mail],
        policy=RuntimePolicy(continue_as_new_after_turns=1),
    )


async def test_a_waiting_run_stays_on_its_build_and_moves_at_its_next_continue_as_new(
    client: Client, task_queue: str, tmp_path: Path, temporal_env: WorkflowEnvironment
) -> None:
    """The run continues as new (on build 1, current then) and waits in its second history;
    build 2, whose changed code could not replay that history, becomes current: the waiting
    history ends on build 1, and the run's next continue-as-new starts its third history on
    build 2 (docs/upgrading.md: pinned while it waits, moved at continue-as-new)."""
    build_1 = _deployment("b1")
    build_2 = _deployment("b2", build_1.name)
    config = _two_mails()
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    agents = AgentClient(client, task_queue=task_queue, store=store)
    try:
        async with build_worker(client, config, store, task_queue=task_queue, deployment=build_1):
            await made_current(client, build_1)
            handle = await agents.start(build_request(entry_agent="mailer", input="mail both"))
            await wait_until(lambda: _waiting(agents, handle.run_id, "one"), message="one")
            await agents.approve(handle.run_id, "one")
            workflow = client.get_workflow_handle(handle.run_id)

            async def continued_and_waits() -> bool:
                description = await workflow.describe()
                info = description.raw_description.workflow_execution_info
                moved_on = info.first_run_id != description.run_id
                return moved_on and await _waiting(agents, handle.run_id, "two")

            await wait_until(continued_and_waits, message="the next history waits")
            async with build_worker(
                client,
                config,
                store,
                task_queue=task_queue,
                deployment=build_2,
                workflows=[UnpatchedAgentRunWorkflow],
            ):
                await made_current(client, build_2)
                # Once a new run lands on build 2, the queue routes by the new current build
                # (the change takes a moment to reach it): only then is the move certain.
                probe = await agents.start(build_request(entry_agent="mailer", input="probe"))
                await wait_until(lambda: _waiting(agents, probe.run_id, "one"), message="probe")
                assert await builds_that_ran(client, probe.run_id) == {"b2"}
                await agents.approve(handle.run_id, "two")
                result = await asyncio.wait_for(handle.result(), 120)
                assert await _pinned(client, handle.run_id)
                assert await _builds_by_history(client, handle.run_id) == [
                    {"b1"},
                    {"b1"},
                    {"b2"},
                ]
    finally:
        store.close()
    assert result.outcome is RunOutcome.COMPLETED
    assert result.metadata[VERSION_KEY] == 2  # its last history ran build 2's code
    assert _sent(tmp_path) == ["bob", "eve"]


async def _builds_by_history(client: Client, workflow_id: str) -> list[set[str]]:
    """The builds that completed each history's workflow tasks, oldest history first."""
    executions = [
        execution async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"')
    ]
    executions.sort(key=lambda execution: execution.start_time)
    found = []
    for execution in executions:
        history = await client.get_workflow_handle(
            workflow_id, run_id=execution.run_id
        ).fetch_history()
        found.append(
            {
                event.workflow_task_completed_event_attributes.deployment_version.build_id
                for event in history.events
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            }
        )
    return found
