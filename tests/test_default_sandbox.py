"""The shipped workflow mode (`otherone.worker.sandbox`'s default, unsandboxed) is tested too.

The rest of the suite runs the strict sandbox (tests/conftest.py), which guards the workflow code
against non-deterministic calls. Production runs without it, so here representative runs (a tool
turn, an agent call, a cancellation, a worker killed mid-run) and every recorded history go
through the default mode.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from otherone.client.agent_client import AgentClient, build_request
from otherone.client.cli import serve
from otherone.definitions import AgentDefinition
from otherone.errors import ConfigurationError
from otherone.runs import RunOutcome, RunStatus
from otherone.store import Store
from otherone.tools import tool
from otherone.worker.app import build_worker, workflow_runner
from otherone.worker.sandbox import (
    DEFAULT_WORKFLOW_SANDBOX,
    WORKFLOW_SANDBOX_ENV,
    WorkflowSandbox,
    parse_workflow_sandbox,
    workflow_sandbox_from_env,
)
from otherone.worker.settings import Settings
from otherone.worker.shutdown import ActivityTracker
from otherone.worker.telemetry import WorkerTelemetry
from otherone.workflows import ALL_WORKFLOWS
from tests.fault_worker import SLOW_CHUNKS, effect_file
from tests.harness import agent_env, scripted_config, wait_until
from tests.histories import recorded_history
from tests.processes import worker_module
from tests.providers import RecordingProvider
from tests.test_faults import release_the_retried_tool
from tests.test_replay import RECORDED

SHIPPED = DEFAULT_WORKFLOW_SANDBOX


def test_production_runs_unsandboxed_and_the_suite_strict() -> None:
    assert SHIPPED == "off"
    assert workflow_sandbox_from_env({}) == SHIPPED
    assert workflow_sandbox_from_env({WORKFLOW_SANDBOX_ENV: " "}) == SHIPPED  # empty = unset
    assert Settings.model_fields["workflow_sandbox"].default == SHIPPED
    assert isinstance(workflow_runner("off"), UnsandboxedWorkflowRunner)
    assert isinstance(workflow_runner("passthrough"), SandboxedWorkflowRunner)
    assert isinstance(workflow_runner("strict"), SandboxedWorkflowRunner)
    # tests/conftest.py: every other test builds its workers in the strict sandbox.
    assert os.environ[WORKFLOW_SANDBOX_ENV] == "strict"


def test_an_unknown_mode_is_a_configuration_error() -> None:
    assert parse_workflow_sandbox(" Strict ") == "strict"
    with pytest.raises(ConfigurationError, match=WORKFLOW_SANDBOX_ENV):
        parse_workflow_sandbox("loose")
    with pytest.raises(ValueError, match="workflow_sandbox"):
        Settings(_env_file=None, workflow_sandbox="loose")  # type: ignore[call-arg]


async def test_the_worker_uses_the_mode_it_is_given(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    config = scripted_config({"agent": ["done"]})
    modes: list[tuple[WorkflowSandbox | None, type]] = [
        ("off", UnsandboxedWorkflowRunner),
        ("strict", SandboxedWorkflowRunner),
        (None, SandboxedWorkflowRunner),  # None: OTHERONE_WORKFLOW_SANDBOX, strict in the suite
    ]
    try:
        for index, (mode, runner) in enumerate(modes):
            queue = f"{task_queue}-{index}"  # one worker per queue and client
            worker = build_worker(client, config, store, task_queue=queue, workflow_sandbox=mode)
            [temporal_worker] = worker.workers
            assert isinstance(temporal_worker.config()["workflow_runner"], runner)
    finally:
        store.close()


async def test_a_worker_takes_its_mode_and_local_slots_from_the_settings_and_env_files(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's worker (`serve._build_worker`) takes both from `Settings`; a worker built
    without a mode reads it as `Settings` does, a project's ``.env`` included (it used to read
    the environment only, so a ``.env`` sandbox setting reached the CLI's workers alone)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(WORKFLOW_SANDBOX_ENV)
    (tmp_path / ".env").write_text(
        f"{WORKFLOW_SANDBOX_ENV}=strict\nOTHERONE_MAX_CONCURRENT_LOCAL_ACTIVITIES=7\n"
        "OTHERONE_MAX_CACHED_WORKFLOWS=25\n"
    )
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    config = scripted_config({"agent": ["done"]})
    try:
        settings = Settings(task_queue=f"{task_queue}-cli")
        assert settings.max_concurrent_local_activities == 7
        cli_worker = serve._build_worker(
            client,
            config,
            store,
            settings,
            WorkerTelemetry(tracing=False, runtime=None),
            ActivityTracker(),
        )
        plain = build_worker(client, config, store, task_queue=f"{task_queue}-plain")
        for worker in (cli_worker, plain):
            [temporal_worker] = worker.workers
            assert isinstance(temporal_worker.config()["workflow_runner"], SandboxedWorkflowRunner)
        [temporal_worker] = cli_worker.workers
        assert temporal_worker.config()["max_concurrent_local_activities"] == 7
        assert temporal_worker.config()["max_cached_workflows"] == 25
        [temporal_worker] = plain.workers  # build_worker's own default: Temporal's
        assert temporal_worker.config()["max_concurrent_local_activities"] == 100
        assert temporal_worker.config()["max_cached_workflows"] == 1000
        with pytest.raises(ConfigurationError, match="max_concurrent_local_activities"):
            build_worker(
                client, config, store, task_queue=task_queue, max_concurrent_local_activities=0
            )
    finally:
        store.close()


@tool
def lookup(key: str) -> dict[str, str]:
    """Look a key up."""
    return {"key": key, "value": "42"}


async def test_a_tool_turn(client: Client, task_queue: str, tmp_path: Path) -> None:
    step = {"tool_calls": [{"name": "lookup", "id": "c1", "arguments": {"key": "answer"}}]}
    config = scripted_config(
        {"agent": [step, "it is 42"]},
        agents=[AgentDefinition(id="agent", description="agent", tools=["lookup"])],
        tools=[lookup],
    )
    async with agent_env(client, task_queue, config, tmp_path, workflow_sandbox=SHIPPED) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="answer?"))
    assert result.outcome is RunOutcome.COMPLETED and result.text == "it is 42"
    assert result.usage.tool_calls == 1 and result.usage.model_calls == 2


async def test_an_agent_call(client: Client, task_queue: str, tmp_path: Path) -> None:
    call = {"name": "agent.call", "id": "call_1", "arguments": {"agent": "worker", "task": "go"}}
    config = scripted_config(
        {"coordinator": [{"tool_calls": [call]}, "final answer"], "worker": ["worker result"]},
        agents=[
            AgentDefinition(
                id="coordinator", description="coordinator", callable_agents=["worker"]
            ),
            AgentDefinition(id="worker", description="worker"),
        ],
    )
    async with agent_env(client, task_queue, config, tmp_path, workflow_sandbox=SHIPPED) as env:
        result = await env.agents.run(build_request(entry_agent="coordinator", input="start"))
        records = await env.agents.list_run_tree(result.root_run_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "final answer"
    assert [(r.agent_id, r.depth, r.status) for r in records] == [
        ("coordinator", 0, RunStatus.COMPLETED),
        ("worker", 1, RunStatus.COMPLETED),
    ]
    assert result.usage.agent_calls == 1


async def test_a_cancellation(client: Client, task_queue: str, tmp_path: Path) -> None:
    provider = RecordingProvider()
    provider.gate("agent", 1)  # never released: the model "hangs"
    config = scripted_config({"agent": ["never"]})
    async with agent_env(
        client,
        task_queue,
        config,
        tmp_path,
        providers={"scripted": provider},
        workflow_sandbox=SHIPPED,
    ) as env:
        handle = await env.agents.start(
            build_request(entry_agent="agent", input="wait", session={"session_id": "s1"})
        )
        await asyncio.wait_for(provider.started.wait(), 10)
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), 20)
        provider.gate("agent", 1).set()
        again = await env.agents.run(
            build_request(entry_agent="agent", input="again", session={"session_id": "s1"})
        )
    assert result.outcome is RunOutcome.CANCELLED and result.failure is None
    assert again.outcome is RunOutcome.COMPLETED  # the cancelled run released its session


@pytest.mark.timeout(240)
async def test_a_killed_worker(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """tests/test_faults.py's SIGKILL, with workers in the shipped mode: a run mid-tool and a
    run whose child streams are taken over, unsandboxed, by the next worker (replaying their
    histories there); the tool's effect happens once, the child runs once."""
    address = temporal_env.client.service_client.config.target_host
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store.open(store_url)
    agents = AgentClient(client, task_queue=task_queue, store=store)
    shipped = {WORKFLOW_SANDBOX_ENV: SHIPPED}
    try:
        async with worker_module(
            "tests.fault_worker", address, task_queue, store_url, tmp_path, **shipped
        ) as first:
            assert first.saw("workflow runner: UnsandboxedWorkflowRunner"), first.output
            buyer = await agents.start(build_request(entry_agent="buyer", input="buy A"))
            boss = await agents.start(build_request(entry_agent="boss", input="delegate"))
            child = f"{boss.run_id}/slowchild.delegate"
            await wait_until(
                lambda: (
                    has_event(store, boss.run_id, child, "model_delta")
                    and any((tmp_path / "effects").iterdir())
                ),
                within=60,
                message="a child's stream and a tool in flight",
            )
            first.send_signal(signal.SIGKILL)
            assert await first.exit_code() == -signal.SIGKILL
        async with worker_module(
            "tests.fault_worker", address, task_queue, store_url, tmp_path, **shipped
        ) as second:
            assert second.saw("workflow runner: UnsandboxedWorkflowRunner"), second.output
            attempts = await release_the_retried_tool(tmp_path)
            bought, delegated = await asyncio.wait_for(
                asyncio.gather(buyer.result(), boss.result()), 120
            )
            tree = await agents.list_run_tree(boss.run_id)
        assert bought.outcome is RunOutcome.COMPLETED and bought.text == "bought"
        key = f"{buyer.run_id}:pay"
        assert [line.split()[0] for line in attempts.read_text().splitlines()] == [key, key]
        assert effect_file(tmp_path, key).read_text() == "A"
        assert len(list((tmp_path / "effects").iterdir())) == 1
        assert delegated.outcome is RunOutcome.COMPLETED and delegated.text == "boss done"
        assert [(record.run_id, record.status) for record in tree] == [
            (boss.run_id, RunStatus.COMPLETED),
            (child, RunStatus.COMPLETED),
        ]
        assert tree[1].output is not None and tree[1].output.value == "".join(SLOW_CHUNKS)
        # Each run announced its start and end once (the boss's tree: the child's too).
        for root, runs in ((buyer.run_id, 1), (boss.run_id, 2)):
            kinds = [record.event["type"] for record in store.read_events(root, limit=10_000)]
            assert kinds.count("run_started") == kinds.count("run_completed") == runs
    finally:
        store.close()


def has_event(store: Store, root: str, run_id: str, kind: str) -> bool:
    return any(
        record.run_id == run_id and record.event["type"] == kind
        for record in store.read_events(root, limit=10_000)
    )


@pytest.mark.parametrize("path", RECORDED, ids=lambda path: path.stem)
async def test_recorded_history_replays_unsandboxed(path: Path) -> None:
    replayer = Replayer(
        workflows=list(ALL_WORKFLOWS),  # a worker registers them all (webhook deliveries too)
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(SHIPPED),
    )
    result = await replayer.replay_workflow(recorded_history(path))
    assert result.replay_failure is None
