"""Spawned calls on a real dev server: across continue-as-new a result the model already read is
carried as a stub only (the carry-over must stay under Temporal's 2 MB payload limit); a spawn
whose start a cancellation cut short still has its child stopped and its allowance back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.worker import (
    Interceptor,
    StartChildWorkflowInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.workflow import ParentClosePolicy

from otherone.client.agent_client import AgentClient, build_request
from otherone.definitions import AgentDefinition, RuntimePolicy
from otherone.runs import RunOutcome, RunStatus
from otherone.store import Store
from otherone.worker.app import build_worker
from tests.harness import agent_env, scripted_config, wait_until

pytestmark = pytest.mark.timeout(120)

OUTPUT = "spawned-output-" + "y" * 3000


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "id": call_id, "arguments": arguments}]}


async def test_a_reported_result_is_carried_over_as_a_stub(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "boss": [
                call("s1", "agent.spawn", agent="worker", task="x"),
                call("aw", "agent.await", handles=["s1"]),
                call("st", "agent.status", handle="s1"),  # in the next history
                "done",
            ],
            "worker": [OUTPUT],
        },
        agents=[
            AgentDefinition(id="boss", description="b", callable_agents=["worker"], spawn=True),
            AgentDefinition(id="worker", description="w"),
        ],
        policy=RuntimePolicy(continue_as_new_after_turns=2),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        history = await client.get_workflow_handle(result.run_id).fetch_history()
        entries = {
            e.tool_call_id: json.loads(e.content)
            for e in env.store.load_entries("local", result.session_id)
            if e.role == "tool"
        }
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id  # the history after continue-as-new
    [payload] = started.input.payloads
    [carried] = json.loads(payload.data)["carry"]["spawns"]
    # (The await's own tool entry, not yet written, still holds the output: that is the
    # session's copy, on its way to the store.)
    assert carried["reported"] and carried["result"]["output"] is None
    assert carried["result"]["run_id"] == f"{result.run_id}/worker.s1"
    assert carried["result"]["outcome"] == "completed"
    [awaited] = entries["aw"]["results"]
    assert awaited["output"]["value"] == OUTPUT  # the model read it in full, once
    assert entries["st"]["status"] == "completed"
    assert entries["st"]["result"]["run_id"] == f"{result.run_id}/worker.s1"


class _SlowSpawnStart(Interceptor):
    """The start of a spawned child (and only of one) takes a while to be confirmed to its
    caller: a cancellation of the caller then arrives while the child has already started."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(_SlowStartOutbound(outbound))

        return Inbound


class _SlowStartOutbound(WorkflowOutboundInterceptor):
    async def start_child_workflow(self, input: StartChildWorkflowInput) -> Any:
        handle = await super().start_child_workflow(input)
        if input.parent_close_policy is ParentClosePolicy.ABANDON:  # agent.spawn's children
            await workflow.wait_condition(lambda: False, timeout=120)
        return handle


async def test_a_spawn_cut_short_by_a_cancellation_still_stops_its_child(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "boss": [call("s1", "agent.spawn", agent="worker", task="x"), "done"],
            "worker": [{"text": "never", "delay_seconds": 600}],
        },
        agents=[
            AgentDefinition(id="boss", description="b", callable_agents=["worker"], spawn=True),
            AgentDefinition(id="worker", description="w"),
        ],
    )
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    worker = build_worker(
        client, config, store, task_queue=task_queue, interceptors=[_SlowSpawnStart()]
    )
    agents = AgentClient(client, task_queue=task_queue, store=store)
    try:
        async with worker:
            handle = await agents.start(build_request(entry_agent="boss", input="go"))
            child = f"{handle.run_id}/worker.s1"

            async def child_running() -> bool:
                try:
                    description = await client.get_workflow_handle(child).describe()
                except RPCError:
                    return False
                return description.status is WorkflowExecutionStatus.RUNNING

            await wait_until(child_running, within=60, message="the spawned child started")
            await handle.cancel()
            result = await asyncio.wait_for(handle.result(), timeout=90)
            description = await client.get_workflow_handle(child).describe()
            tree = await agents.list_run_tree(handle.run_id)
    finally:
        store.close()
    assert result.outcome is RunOutcome.CANCELLED
    # Before: the call was forgotten, so the run's end left its child running.
    assert description.close_time is not None
    assert [(r.run_id, r.status) for r in tree[1:]] == [(child, RunStatus.CANCELLED)]
    assert result.budget_remaining is not None
    limits = config.snapshot().limits
    # The child's allowance came back (all but what the child used: its run, its model call).
    assert result.budget_remaining.model_calls >= limits.max_model_calls - 2
