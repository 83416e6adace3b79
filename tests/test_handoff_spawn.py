"""Handoffs and background agent calls, on a real dev server.

After a handoff the next agent spawns by its own permission and end policy, not the handing
agent's; and the handing agent's spawned children end by *its* end policy before the next agent
starts (cancelled, or waited for with ``spawned_on_exit = "wait"``): the next agent starts with
no handles.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.definitions import AgentDefinition
from otherone.runs import RunOutcome, RunStatus
from tests.harness import AgentEnv, agent_env, scripted_config
from tests.providers import RecordingProvider

pytestmark = pytest.mark.timeout(180)

#: A child that would outlive any test unless it is cancelled.
ENDLESS = {"text": "never", "delay_seconds": 600}
#: A child that takes a little while.
SHORT = {"text": "short result", "delay_seconds": 2}


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "id": call_id, "arguments": arguments}


def calls(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(tool_calls)}


def spawn(call_id: str) -> dict[str, Any]:
    return tool_call(call_id, "agent.spawn", agent="worker", task="work")


def handoff(call_id: str, target: str) -> dict[str, Any]:
    return tool_call(call_id, "agent.handoff", agent=target)


def agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


def tool_results(env: AgentEnv, session_id: str) -> dict[str, Any]:
    return {
        entry.tool_call_id: json.loads(entry.content)
        for entry in env.store.load_entries("local", session_id)
        if entry.role == "tool" and entry.tool_call_id
    }


def offered(provider: RecordingProvider, agent_id: str) -> list[str]:
    first = next(r for r in provider.calls(agent_id) if r.purpose == "turn")
    return [tool["function"]["name"] for tool in first.tools]


async def test_the_next_agent_may_not_spawn_when_only_the_handing_agent_could(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {
            "first": [calls(handoff("h", "second"))],
            "second": [calls(spawn("s1")), "second answers"],
            "worker": ["worked"],
        },
        agents=[
            agent("first", callable_agents=["worker"], spawn=True, handoff={"agents": ["second"]}),
            # It may call the worker, not spawn it: its approval rules never see a spawn.
            agent("second", callable_agents=["worker"], spawn=False),
            agent("worker"),
        ],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="first", input="go"))
        tree = await env.agents.list_run_tree(result.run_id)
        results = tool_results(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED and result.agent_id == "second"
    assert offered(provider, "second") == ["agent.call"]
    assert "not available" in results["s1"]["error"]
    assert len(tree) == 1  # no child ran


async def test_the_next_agent_may_spawn_when_only_it_can(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "first": [calls(handoff("h", "second"))],
            "second": [
                calls(spawn("s1")),
                calls(tool_call("aw", "agent.await", handles=["s1"])),
                "second answers",
            ],
            "worker": ["worked"],
        },
        agents=[
            agent("first", handoff={"agents": ["second"]}),
            agent("second", callable_agents=["worker"], spawn=True),
            agent("worker"),
        ],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="first", input="go"))
        tree = await env.agents.list_run_tree(result.run_id)
        results = tool_results(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "second answers"
    assert results["s1"]["handle"] == "s1"
    [awaited] = results["aw"]["results"]
    assert awaited["outcome"] == "completed" and awaited["output"]["value"] == "worked"
    assert [r.status for r in tree[1:]] == [RunStatus.COMPLETED]


async def test_the_next_agents_end_policy_is_its_own(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    # first waits for its children at the end; second (spawning too) cancels them.
    config = scripted_config(
        {
            "first": [calls(handoff("h", "second"))],
            "second": [calls(spawn("s1")), "second answers"],
            "worker": [ENDLESS],
        },
        agents=[
            agent(
                "first",
                callable_agents=["worker"],
                spawn=True,
                spawned_on_exit="wait",
                handoff={"agents": ["second"]},
            ),
            agent("second", callable_agents=["worker"], spawn=True),
            agent("worker"),
        ],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        request = build_request(entry_agent="first", input="go", limits={"root_timeout": 120})
        result = await env.agents.run(request)
        [_, child] = await env.agents.list_run_tree(result.run_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "second answers"
    assert child.status is RunStatus.CANCELLED  # not waited for until the deadline


@pytest.mark.parametrize("on_exit", ["cancel", "wait"])
async def test_a_handoff_ends_the_handing_agents_spawned_children_by_its_policy(
    client: Client, task_queue: str, tmp_path: Path, on_exit: str
) -> None:
    # The handing agent spawns, then hands off in the next turn; the next agent could await
    # but finds no handle of the handing agent's.
    config = scripted_config(
        {
            "first": [calls(spawn("s1")), calls(handoff("h", "second"))],
            "second": [
                calls(tool_call("st", "agent.status", handle="s1")),
                calls(tool_call("aw", "agent.await")),
                "second answers",
            ],
            "worker": [ENDLESS if on_exit == "cancel" else SHORT],
        },
        agents=[
            agent(
                "first",
                callable_agents=["worker"],
                spawn=True,
                spawned_on_exit=on_exit,
                handoff={"agents": ["second"]},
            ),
            agent("second", callable_agents=["worker"], spawn=True),
            agent("worker"),
        ],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="first", input="go"))
        [_, child] = await env.agents.list_run_tree(result.run_id)
        results = tool_results(env, result.session_id)
        events = env.store.read_events(result.run_id, limit=10_000)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "second answers"
    assert "unknown handle 's1'" in results["st"]["error"]
    assert results["aw"] == {"results": [], "running": []}
    expected = RunStatus.CANCELLED if on_exit == "cancel" else RunStatus.COMPLETED
    assert child.status is expected
    # The child had ended before the next agent's first model call.
    ends = {"run_completed", "run_cancelled"}
    order = [
        "child ended" if e.run_id == child.run_id else "second called"
        for e in events
        if (e.run_id == child.run_id and e.event["type"] in ends)
        or (e.agent_id == "second" and e.event["type"] == "model_started")
    ]
    assert order[:2] == ["child ended", "second called"], order
