"""Handoff details on a real dev server: a forced approval rule never holds a handoff that is
refused anyway; `last_turns` counts the user's own turns only; `handed_off` is stored once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.activities.shared import ActivityContext
from otherone.client.agent_client import build_request
from otherone.contracts import RunRef
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


async def test_handed_off_is_stored_once_when_the_activity_fails_after_storing_it(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ActivityContext.emit
    failed: list[str] = []

    async def emit_then_fail_once(self: ActivityContext, ref: RunRef, *bodies: Any) -> None:
        await original(self, ref, *bodies)
        if any(body.get("type") == "handed_off" for body in bodies) and not failed:
            failed.append(ref.run_id)
            raise RuntimeError("the worker died right after storing handed_off")

    monkeypatch.setattr(ActivityContext, "emit", emit_then_fail_once)
    config = scripted_config(
        {"first": [handoff("h", "second")], "second": ["second answers"]},
        agents=[agent("first", handoff={"agents": ["second"]}), agent("second")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="first", input="go"))
        events = [e.event for e in env.store.read_events(result.run_id, limit=10_000)]
    assert failed and result.outcome is RunOutcome.COMPLETED and result.agent_id == "second"
    assert [e["type"] for e in events].count("handed_off") == 1
