"""Model calls and tool calls on task queues of their own, served by workers with given roles.

Why: model-heavy and tool-heavy work scale differently (slow LLM calls vs. CPU/IO-bound tools),
so a deployment may route them to separate task queues, each with its own slot limit, and run
more of one kind of worker than the other. What must hold:

- with queues named, a run's model calls and tool calls are scheduled on those queues (seen in
  the run's own Temporal history), children's too; store activities stay on the workflow queue;
- without, everything stays on one queue served by one Temporal worker (today's behaviour);
- a workflows-only worker cannot finish a run alone: it waits for a model worker, then for a
  tool worker (roles really split the work);
- ``max_concurrent_tool_calls`` is the tool worker's slot limit: with 1, parallel tool calls
  queue up in Temporal and never overlap (observed by the tool itself and by Temporal);
- roles that cannot work with the queues are refused with an error naming the setting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.contracts import (
    ACTIVITY_CALL_MODEL,
    ACTIVITY_FINISH_RUN,
    ACTIVITY_PREPARE_CALL,
    ACTIVITY_PREPARE_RUN,
    ACTIVITY_RUN_TOOL,
)
from otherone.definitions import AccessPolicy, AgentDefinition, ModelOverrides
from otherone.errors import ConfigurationError
from otherone.runs import RunOutcome
from otherone.store import Store
from otherone.tools import tool
from otherone.worker.app import AgentWorker, build_worker, sandbox_runner
from otherone.worker.queues import SlotLimits, TaskQueues, WorkerRole, parse_roles, plan_workers
from otherone.worker.settings import Settings
from otherone.workflows import AgentRunWorkflow
from tests.harness import scripted_config, wait_until
from tests.processes import address_of, cli_env, otherone
from tests.upgrade_workflows import UnroutedAgentRunWorkflow


@tool
def lookup(key: str) -> str:
    """Look a key up (fixed data)."""
    return f"value of {key}"


def _team_config() -> RuntimeConfig:
    """``lead`` calls a tool and asks ``helper`` (a child run), then answers."""
    return scripted_config(
        {
            "lead": [
                {
                    "tool_calls": [
                        {"name": "lookup", "id": "look", "arguments": {"key": "k"}},
                        {
                            "name": "agent.call",
                            "id": "ask",
                            "arguments": {"agent": "helper", "task": "help"},
                        },
                    ]
                },
                "lead done",
            ],
            "helper": [
                {"tool_calls": [{"name": "lookup", "id": "h", "arguments": {"key": "h"}}]},
                "helper done",
            ],
        },
        agents=[
            AgentDefinition(
                id="lead",
                description="lead",
                tools=AccessPolicy.allow("lookup"),
                callable_agents=AccessPolicy.allow("helper"),
            ),
            AgentDefinition(id="helper", description="helper", tools=AccessPolicy.allow("lookup")),
        ],
        tools=[lookup],
    )


@contextlib.asynccontextmanager
async def _store(tmp_path: Path) -> AsyncIterator[Store]:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        yield store
    finally:
        store.close()


async def _scheduled_queues(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str]]:
    """(activity type, task queue) of every activity the run scheduled, in order."""
    history = await handle.fetch_history()
    return [
        (
            event.activity_task_scheduled_event_attributes.activity_type.name,
            event.activity_task_scheduled_event_attributes.task_queue.name,
        )
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def _local_activities(handle: WorkflowHandle[Any, Any]) -> int:
    """Local activities the run executed (one marker each)."""
    history = await handle.fetch_history()
    return sum(
        event.marker_recorded_event_attributes.marker_name == "core_local_activity"
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    )


def _replayer(workflow: type) -> Replayer:
    return Replayer(
        workflows=[workflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )


async def test_model_and_tool_calls_run_on_their_own_queues(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    model_queue, tool_queue = f"{task_queue}-model", f"{task_queue}-tools"
    async with _store(tmp_path) as store:
        worker = build_worker(
            client,
            _team_config(),
            store,
            task_queue=task_queue,
            model_task_queue=model_queue,
            tool_task_queue=tool_queue,
        )
        assert worker.task_queues == (task_queue, model_queue, tool_queue)
        async with worker:
            agents = AgentClient(client, task_queue=task_queue, store=store)
            result = await agents.run(build_request(entry_agent="lead", input="go"))
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "lead done"

    expected = {
        ACTIVITY_PREPARE_RUN: task_queue,
        ACTIVITY_PREPARE_CALL: task_queue,
        ACTIVITY_FINISH_RUN: task_queue,
        ACTIVITY_CALL_MODEL: model_queue,
        ACTIVITY_RUN_TOOL: tool_queue,
    }
    root = client.get_workflow_handle(result.run_id)
    child = client.get_workflow_handle(f"{result.run_id}/helper.ask")
    # prepare_run and finish_run are local activities (patch local-prepare-finish): they run in
    # the worker running the workflow, so on its queue, and leave a marker each, not a schedule.
    for handle, kinds in (
        (root, {ACTIVITY_PREPARE_CALL, ACTIVITY_CALL_MODEL}),
        (child, {ACTIVITY_CALL_MODEL}),
    ):
        scheduled = await _scheduled_queues(handle)
        assert kinds | {ACTIVITY_RUN_TOOL} == {name for name, _ in scheduled}
        assert all(queue == expected[name] for name, queue in scheduled), scheduled
        assert await _local_activities(handle) == 2
    # The child runs on the parent's workflow queue (children inherit it).
    assert (await child.describe()).task_queue == task_queue

    # Finding on this SDK (temporalio 1.35): an activity's task queue is not part of the
    # determinism check. This history replays on code that schedules every activity on the
    # workflow's own queue, so changing routing needs no `workflow.patched`.
    history = WorkflowHistory.from_json(result.run_id, (await root.fetch_history()).to_json())
    for workflow in (AgentRunWorkflow, UnroutedAgentRunWorkflow):
        replayed = await _replayer(workflow).replay_workflow(history)
        assert replayed.replay_failure is None


async def test_by_default_everything_runs_on_one_queue_and_one_worker(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with _store(tmp_path) as store:
        worker = build_worker(client, _team_config(), store, task_queue=task_queue)
        assert worker.task_queues == (task_queue,)
        async with worker:
            agents = AgentClient(client, task_queue=task_queue, store=store)
            result = await agents.run(build_request(entry_agent="lead", input="go"))
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    scheduled = await _scheduled_queues(client.get_workflow_handle(result.run_id))
    assert {queue for _, queue in scheduled} == {task_queue}
    assert ACTIVITY_CALL_MODEL in {name for name, _ in scheduled}


async def _equals(value: Awaitable[object], expected: object) -> bool:
    return bool(await value == expected)


async def _pending(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, int]]:
    """(activity type, state) of the run's pending activities."""
    description = await handle.describe()
    return [
        (activity.activity_type.name, activity.state)
        for activity in description.raw_description.pending_activities
    ]


def _split_worker(
    client: Client,
    config: RuntimeConfig,
    store: Store,
    task_queue: str,
    roles: Iterable[str],
    **options: Any,
) -> AgentWorker:
    return build_worker(
        client,
        config,
        store,
        task_queue=task_queue,
        model_task_queue=f"{task_queue}-model",
        tool_task_queue=f"{task_queue}-tools",
        roles=roles,
        **options,
    )


async def test_a_run_needs_a_model_worker_and_a_tool_worker(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _team_config()
    scheduled = PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
    async with _store(tmp_path) as store, contextlib.AsyncExitStack() as workers:
        workflows_only = _split_worker(client, config, store, task_queue, ["workflows"])
        assert workflows_only.task_queues == (task_queue,)
        await workers.enter_async_context(workflows_only)
        agents = AgentClient(client, task_queue=task_queue, store=store)
        handle = await agents.start(build_request(entry_agent="lead", input="go"))
        run = client.get_workflow_handle(handle.run_id)

        # Prepared, but its model call waits on the model queue: nobody polls it yet.
        async def waiting_for(kind: str) -> bool:
            return (kind, scheduled) in await _pending(run)

        await wait_until(lambda: waiting_for(ACTIVITY_CALL_MODEL), message="model call queued")
        model_only = _split_worker(client, config, store, task_queue, ["model"])
        assert model_only.task_queues == (f"{task_queue}-model",)
        await workers.enter_async_context(model_only)

        # The model answered with a tool call; the tool waits on the tool queue.
        await wait_until(lambda: waiting_for(ACTIVITY_RUN_TOOL), message="tool call queued")
        tools_only = _split_worker(client, config, store, task_queue, ["tools"])
        assert tools_only.task_queues == (f"{task_queue}-tools",)
        await workers.enter_async_context(tools_only)

        result = await asyncio.wait_for(handle.result(), 30)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "lead done"


@pytest.mark.parametrize("slots", [1, 3])
async def test_tool_slots_bound_parallel_tool_calls(
    client: Client, task_queue: str, tmp_path: Path, slots: int
) -> None:
    """Three parallel calls of a tool that holds until the test releases it.

    The tool records every start and end; with one slot the next call starts only after the
    previous one ended (Temporal shows the others SCHEDULED meanwhile); with three slots all
    three run at once — which shows that the probe can see an overlap.
    """
    gates = {n: asyncio.Event() for n in range(3)}
    log: list[tuple[str, int]] = []

    @tool
    async def hold(n: int) -> int:
        """Hold until released."""
        log.append(("start", n))
        await gates[n].wait()
        log.append(("end", n))
        return n

    config = scripted_config(
        {
            "agent": [
                {
                    "tool_calls": [
                        {"name": "hold", "id": f"c{n}", "arguments": {"n": n}} for n in range(3)
                    ]
                },
                "ok",
            ]
        },
        agents=[
            AgentDefinition(
                id="agent",
                description="agent",
                tools=AccessPolicy.allow("hold"),
                model_overrides=ModelOverrides(parallel_tool_calls=True),
            )
        ],
        tools=[hold],
    )
    started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    queued = PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED

    def starts() -> list[int]:
        return [n for kind, n in log if kind == "start"]

    async with _store(tmp_path) as store:
        worker = _split_worker(
            client, config, store, task_queue, ["all"], max_concurrent_tool_calls=slots
        )
        async with worker:
            agents = AgentClient(client, task_queue=task_queue, store=store)
            handle = await agents.start(build_request(entry_agent="agent", input="go"))
            run = client.get_workflow_handle(handle.run_id)

            async def tool_states() -> tuple[int, int]:
                states = [s for kind, s in await _pending(run) if kind == ACTIVITY_RUN_TOOL]
                return states.count(started), states.count(queued)

            if slots == 1:
                for done in range(3):
                    await wait_until(
                        lambda n=done + 1: len(starts()) == n,
                        message="the next call started",
                    )
                    left = 2 - done
                    await wait_until(
                        lambda left=left: _equals(tool_states(), (1, left)),
                        message=f"one tool call running, {left} queued in Temporal",
                    )
                    gates[starts()[-1]].set()
            else:
                await wait_until(lambda: len(starts()) == 3, message="three calls at once")
                assert await tool_states() == (3, 0)
                for gate in gates.values():
                    gate.set()
            result = await asyncio.wait_for(handle.result(), 30)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    peak = active = 0
    for kind, _ in log:
        active += 1 if kind == "start" else -1
        peak = max(peak, active)
    assert peak == slots, log
    assert sorted(n for kind, n in log if kind == "end") == [0, 1, 2]


def test_roles_parse_and_refuse_what_cannot_work() -> None:
    assert parse_roles("tools, model") == (WorkerRole.MODEL, WorkerRole.TOOLS)
    assert parse_roles("all") == (WorkerRole.WORKFLOWS, WorkerRole.MODEL, WorkerRole.TOOLS)
    assert Settings(worker_roles="model,tools").worker_roles == (
        WorkerRole.MODEL,
        WorkerRole.TOOLS,
    )
    with pytest.raises(ValueError, match="unknown role 'modle'"):
        parse_roles("modle")
    with pytest.raises(ValueError, match="at least one"):
        parse_roles(" , ")


def test_a_shared_model_and_tool_queue_is_served_whole_by_either_role() -> None:
    """Temporal hands any task of a queue to any of its pollers: a model-only process polling
    the queue tool calls share must be able to run them too."""
    queues = TaskQueues("wf", model="act", tool="act")
    for role in (WorkerRole.MODEL, WorkerRole.TOOLS):
        (worker,) = plan_workers(queues, [role], SlotLimits())
        assert (worker.task_queue, worker.model, worker.tools) == ("act", True, True)


async def test_a_model_worker_needs_its_own_queue(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with _store(tmp_path) as store:
        with pytest.raises(ConfigurationError, match=r"worker_roles.*model_task_queue"):
            build_worker(client, _team_config(), store, task_queue=task_queue, roles=["model"])
        # Naming the workflow queue itself is no split either.
        with pytest.raises(ConfigurationError, match="tool_task_queue"):
            build_worker(
                client,
                _team_config(),
                store,
                task_queue=task_queue,
                tool_task_queue=task_queue,
                roles=["tools"],
            )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--roles", "bogus"],
            "--roles / OTHERONE_WORKER_ROLES: unknown role 'bogus'",
        ),
        (["--roles", "model"], "worker_roles: a 'model' worker without 'workflows'"),
    ],
)
async def test_cli_worker_refuses_bad_roles_in_one_line(
    temporal_env: WorkflowEnvironment, tmp_path: Path, args: list[str], needle: str
) -> None:
    env = cli_env(address_of(temporal_env), None, tmp_path, database="cli.db")
    result = await otherone("worker", *args, env=env)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2, result.describe()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.describe()
    assert needle in lines[0], result.describe()


async def test_the_agent_worker_runs_until_shutdown_and_raises_a_fatal_error(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`AgentWorker.run` (what `otherone worker` serves) over three queues: it serves until
    shut down; a worker that cannot start (unknown namespace) makes it raise, not hang."""
    async with _store(tmp_path) as store:
        worker = _split_worker(client, _team_config(), store, task_queue, ["all"])
        running = asyncio.ensure_future(worker.run())
        agents = AgentClient(client, task_queue=task_queue, store=store)
        result = await asyncio.wait_for(
            agents.run(build_request(entry_agent="lead", input="go")), 30
        )
        assert result.outcome is RunOutcome.COMPLETED, result.failure
        assert worker.is_running
        await asyncio.wait_for(worker.shutdown(), 30)
        await asyncio.wait_for(running, 30)
        assert worker.is_shutdown

        elsewhere = await Client.connect(
            client.service_client.config.target_host,
            namespace="no-such-namespace",
            data_converter=pydantic_data_converter,
        )
        broken = _split_worker(elsewhere, _team_config(), store, task_queue, ["all"])
        with pytest.raises(RuntimeError, match="no-such-namespace"):
            await asyncio.wait_for(broken.run(), 30)


async def test_a_tool_retry_taken_before_the_run_learns_of_its_cancel_does_not_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Temporal hands out a tool's retry and the workflow task carrying the run's cancel
    independently: with no workflow worker at hand (killed, deploying), the retry runs first.
    It must not run the tool the user has stopped; it waits until the run cancels it.

    The tool's first attempt fails (so Temporal retries it) while the workflows' worker is
    stopped and the run is cancelled; the retry starts on the tool worker; then the workflows'
    worker comes back and takes the cancel."""
    release = asyncio.Event()
    bodies: list[int] = []

    @tool(max_attempts=3)
    async def charge(amount: int) -> str:
        """Charge an amount (fails its first attempt, after a hold)."""
        bodies.append(amount)
        if len(bodies) == 1:
            await release.wait()
            raise ConnectionError("card network hiccup")
        return "charged"

    config = scripted_config(
        {"agent": [{"tool_calls": [{"name": "charge", "arguments": {"amount": 5}}]}, "done"]},
        agents=[AgentDefinition(id="agent", description="pays", tools=["charge"])],
        tools=[charge],
    )
    async with _store(tmp_path) as store, contextlib.AsyncExitStack() as workers:
        tools_only = _split_worker(client, config, store, task_queue, ["tools"])
        await workers.enter_async_context(tools_only)
        agents = AgentClient(client, task_queue=task_queue, store=store)
        async with _split_worker(client, config, store, task_queue, ["workflows", "model"]):
            handle = await agents.start(build_request(entry_agent="agent", input="pay"))
            run = client.get_workflow_handle(handle.run_id)
            await wait_until(lambda: len(bodies) == 1, message="first attempt running")
        await handle.cancel()  # no workflow worker: the run cannot take it yet
        release.set()  # the first attempt fails; Temporal retries it after a second

        async def retry_started() -> bool:
            pending = (await run.describe()).raw_description.pending_activities
            started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            return any(a.attempt == 2 and a.state == started for a in pending)

        await wait_until(retry_started, message="the retry started")
        async with _split_worker(client, config, store, task_queue, ["workflows", "model"]):
            result = await asyncio.wait_for(handle.result(), 30)
        ends = [
            (record.event["type"], record.event.get("attempt"), record.event.get("error"))
            for record in store.read_events(handle.run_id)
            if record.event["type"] in ("tool_started", "tool_completed")
        ]
    assert result.outcome is RunOutcome.CANCELLED
    assert bodies == [5]  # the retry did not charge
    assert ("tool_started", 2, None) in ends and ("tool_completed", 2, "cancelled") in ends
