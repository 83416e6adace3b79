"""Spawned calls across continue-as-new, on a real dev server: a result the model already read
is carried as a stub only (the carry-over must stay under Temporal's 2 MB payload limit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.definitions import AgentDefinition, RuntimePolicy
from otherone.runs import RunOutcome
from tests.harness import agent_env, scripted_config

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
    assert carried["result"]["run_id"] == f"{result.run_id}/s1"
    assert carried["result"]["outcome"] == "completed"
    [awaited] = entries["aw"]["results"]
    assert awaited["output"]["value"] == OUTPUT  # the model read it in full, once
    assert entries["st"]["status"] == "completed"
    assert entries["st"]["result"]["run_id"] == f"{result.run_id}/s1"
