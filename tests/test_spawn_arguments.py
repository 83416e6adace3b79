"""Malformed arguments of the spawn tools and `agent.handoff`, on a real dev server: each is a
clear tool error the model reads (`invalid_arguments`), never a failed workflow task (which
would leave the run stuck)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.definitions import AgentDefinition
from otherone.runs import RunOutcome
from otherone.workflows.spawn_arguments import MAX_AWAIT_HANDLES, parse_await
from tests.harness import agent_env, scripted_config

pytestmark = pytest.mark.timeout(120)

DEEP = "[" * 5000  # json.loads raises RecursionError, not JSONDecodeError


def agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


BAD = [
    ("agent.await", '{"timeout_seconds": 1e300}', "timeout_seconds"),
    ("agent.await", '{"timeout_seconds": 1e999}', "timeout_seconds"),  # inf
    ("agent.await", '{"timeout_seconds": -Infinity}', "timeout_seconds"),
    ("agent.await", '{"timeout_seconds": NaN}', "timeout_seconds"),
    ("agent.await", '{"timeout_seconds": -1}', "timeout_seconds"),
    ("agent.await", '{"timeout_seconds": "5"}', "timeout_seconds"),
    ("agent.await", '{"timeout_seconds": true}', "timeout_seconds"),
    ("agent.await", '{"handles": "s1"}', "handles"),
    ("agent.await", '{"handles": [1]}', "handles"),
    ("agent.await", '{"handles": []}', "handles"),
    ("agent.await", json.dumps({"handles": ["s1"] * (MAX_AWAIT_HANDLES + 1)}), "handles"),
    ("agent.await", '{"handles": ["nope"]}', "unknown handle"),
    ("agent.await", DEEP, "nested too deeply"),
    ("agent.await", "[]", "JSON object"),
    ("agent.status", '{"handle": 5}', "handle"),
    ("agent.status", json.dumps({"handle": "h" * 10_000}), "unknown handle"),
    ("agent.cancel", "{}", "handle"),
    ("agent.cancel", DEEP, "nested too deeply"),
    ("agent.spawn", '{"agent": 5, "task": "x"}', "'agent' and 'task'"),
    ("agent.spawn", DEEP, "nested too deeply"),
    ("agent.handoff", '{"agent": 12}', "'agent'"),
    ("agent.handoff", DEEP, "nested too deeply"),
    ("agent.handoff", '{"agent": "second", "context": ["full"]}', "'context'"),
]


@pytest.mark.parametrize(("name", "arguments", "says"), BAD)
async def test_bad_arguments_are_a_tool_error_to_the_model(
    client: Client, task_queue: str, tmp_path: Path, name: str, arguments: str, says: str
) -> None:
    call = {"name": name, "id": "bad", "arguments": arguments}
    # A child runs while the bad call is made: an agent.await has something to wait for.
    spawn = {"name": "agent.spawn", "id": "s1", "arguments": {"agent": "worker", "task": "x"}}
    config = scripted_config(
        {
            "first": [{"tool_calls": [spawn]}, {"tool_calls": [call]}, "done"],
            "worker": [{"text": "never", "delay_seconds": 600}],  # cancelled as the run ends
        },
        agents=[
            agent(
                "first",
                callable_agents=["worker"],
                spawn=True,
                handoff={"agents": ["second"], "model_may_choose_context": True},
            ),
            agent("second"),
            agent("worker"),
        ],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        run = env.agents.run(build_request(entry_agent="first", input="go"))
        result = await asyncio.wait_for(run, timeout=60)  # a failed workflow task never ends
        [entry] = [
            e for e in env.store.load_entries("local", result.session_id) if e.tool_call_id == "bad"
        ]
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    error = json.loads(entry.content or "")["error"]
    assert entry.error_kind in ("invalid_arguments", "permission_denied"), entry.error_kind
    assert says in error and len(error) < 500, error


async def test_a_handle_named_twice_is_reported_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
        return {"name": name, "id": call_id, "arguments": arguments}

    config = scripted_config(
        {
            "first": [
                {"tool_calls": [call("s1", "agent.spawn", agent="worker", task="x")]},
                {"tool_calls": [call("aw", "agent.await", handles=["s1", "s1", "s1"])]},
                "done",
            ],
            "worker": ["ok"],
        },
        agents=[agent("first", callable_agents=["worker"], spawn=True), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="first", input="go"))
        [entry] = [
            e for e in env.store.load_entries("local", result.session_id) if e.tool_call_id == "aw"
        ]
    awaited = json.loads(entry.content or "")
    assert [r["call_id"] for r in awaited["results"]] == ["s1"] and awaited["running"] == []


def test_parse_await_keeps_the_order_of_first_mentions() -> None:
    request = parse_await('{"handles": ["b", "a", "b"], "timeout_seconds": 3}')
    assert request.handles == ("b", "a") and request.timeout_seconds == 3.0
