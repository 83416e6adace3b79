"""Shared state (`otherone.shared_state`): AG-UI's ``state`` reaches the model with its turn,
and `ui.set_state` replaces it: the stream sends ``STATE_SNAPSHOT`` with the new state, which
the real `@ag-ui/client` takes as its state. Without a state the tool is not offered. Real API
server, worker, store and dev server; the provider records what the model was offered."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.definitions import AgentDefinition
from tests.api_env import api_env
from tests.harness import scripted_config
from tests.providers import RecordingProvider
from tests.test_api import _agent_input, _post_ag_ui

pytestmark = pytest.mark.timeout(120)
TODOS = {"todos": ["buy milk"]}
SCRIPT: dict[str, list[Any]] = {
    "planner": [
        {
            "tool_calls": [
                {"id": "s1", "name": "ui.set_state", "arguments": {"state": "not an object"}},
                {
                    "id": "s2",
                    "name": "ui.set_state",
                    "arguments": {"state": {"todos": ["buy milk", "call bo"]}},
                },
            ]
        },
        "Added 'call bo'.",
    ]
}


def _config() -> Any:
    return scripted_config(SCRIPT, agents=[AgentDefinition(id="planner", description="Plans")])


async def test_the_model_reads_the_state_and_replaces_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    async with api_env(
        client, task_queue, _config(), tmp_path, providers={"scripted": provider}
    ) as api:
        hello = {"id": "m1", "role": "user", "content": "Add: call bo"}
        body = {**_agent_input(f"t-{uuid.uuid4().hex[:8]}", "r1", [hello]), "state": TODOS}
        status, events = await _post_ag_ui(api, "planner", body)
    assert status == 200, events
    first = provider.requests[0]
    assert [tool["function"]["name"] for tool in first.tools] == ["ui.set_state"]
    [shown] = [
        m["content"] for m in first.messages if m["role"] == "system" and "state" in m["content"]
    ]
    assert shown.endswith(json.dumps(TODOS))
    snapshots = [e.snapshot for e in events if e.type.value == "STATE_SNAPSHOT"]
    assert snapshots == [{"todos": ["buy milk", "call bo"]}]
    results = {e.tool_call_id: e.content for e in events if e.type.value == "TOOL_CALL_RESULT"}
    assert results["s2"] == "ok" and results["s1"].startswith("error: "), results
    [refusal] = [m for m in provider.requests[1].messages if m.get("tool_call_id") == "s1"]
    assert "'state' must be an object" in refusal["content"]
    assert events[-1].type.value == "RUN_FINISHED" and events[-1].outcome.type == "success"


async def test_without_a_state_the_tool_is_not_offered(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    async with api_env(
        client, task_queue, _config(), tmp_path, providers={"scripted": provider}
    ) as api:
        hello = {"id": "m1", "role": "user", "content": "hi"}
        status, events = await _post_ag_ui(
            api, "planner", _agent_input(f"t-{uuid.uuid4().hex[:8]}", "r1", [hello])
        )
    assert status == 200, events
    assert provider.requests[0].tools == []
    assert not [e for e in events if e.type.value == "STATE_SNAPSHOT"]
    results = {e.tool_call_id: e.content for e in events if e.type.value == "TOOL_CALL_RESULT"}
    assert all(content.startswith("error: ") for content in results.values()), results
