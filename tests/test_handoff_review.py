"""Handoff details on a real dev server: a forced approval rule never holds a handoff that is
refused anyway; `last_turns` counts the user's own turns only; `handed_off` is stored once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.definitions import AgentDefinition, RuntimePolicy
from otherone.runs import RunOutcome
from tests.harness import agent_env, scripted_config

pytestmark = pytest.mark.timeout(120)


def agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


def handoff(call_id: str, target: str) -> dict[str, Any]:
    return {
        "tool_calls": [{"name": "agent.handoff", "id": call_id, "arguments": {"agent": target}}]
    }


@pytest.mark.parametrize("where", ["root without targets", "child"])
async def test_a_forced_handoff_approval_never_holds_a_refused_handoff(
    client: Client, task_queue: str, tmp_path: Path, where: str
) -> None:
    # "helper" may hand off (it has a target) but, called as a child, it is not offered it.
    helper = agent("helper", handoff={"agents": ["other"]})
    if where == "child":
        script = {
            "boss": [
                {
                    "tool_calls": [
                        {
                            "name": "agent.call",
                            "id": "c",
                            "arguments": {"agent": "helper", "task": "x"},
                        }
                    ]
                },
                "boss done",
            ],
            "helper": [handoff("h", "other"), "helper done"],
        }
        agents = [agent("boss", callable_agents=["helper"]), helper, agent("other")]
    else:
        script = {"boss": [handoff("h", "other"), "boss done"]}
        agents = [agent("boss"), agent("other")]
    config = scripted_config(
        script, agents=agents, policy=RuntimePolicy(approval={"agent.handoff": "always"})
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))
        # Before: the refused handoff waited for a person who had nothing to decide.
        result = await asyncio.wait_for(handle.result(), timeout=60)
        events = [e.event for e in env.store.read_events(handle.run_id, limit=10_000)]
    assert result.outcome is RunOutcome.COMPLETED and result.text == "boss done"
    assert not [e for e in events if e["type"] == "approval_requested"]
