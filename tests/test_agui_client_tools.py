"""Client tools (`otherone.client_tools`): AG-UI's ``RunAgentInput.tools`` are offered to the
model; a call to one ends the AG-UI run with the call and ``RUN_FINISHED`` naming it pending,
while the Temporal run waits durably; the front end's next request, ending with the tool's
result (a tool message), continues the same run, and the model reads the result as the client
wrote it. Real API server, worker, store and dev server; the provider records what the model
was offered and sent."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.definitions import AgentDefinition
from otherone.partitions import DEFAULT_PARTITION
from tests.api_env import api_env
from tests.harness import scripted_config
from tests.providers import RecordingProvider
from tests.test_api import _agent_input, _post_ag_ui

pytestmark = pytest.mark.timeout(120)
THEME_TOOL = {
    "name": "setTheme",
    "description": "Set the page's colour theme.",
    "parameters": {
        "type": "object",
        "properties": {"color": {"type": "string"}},
        "required": ["color"],
    },
}
SCRIPT = {
    "painter": [
        {
            "text": "Changing it.",
            "tool_calls": [{"id": "t1", "name": "setTheme", "arguments": {"color": "green"}}],
        },
        "Theme set to green.",
    ]
}


def _types(events: list[Any]) -> list[str]:
    return [event.type.value for event in events]


async def test_a_client_tool_call_waits_for_the_front_ends_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(SCRIPT, agents=[AgentDefinition(id="painter", description="Paints")])
    async with api_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as api:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        hello = {"id": "m1", "role": "user", "content": "Make it green."}
        first_body = {**_agent_input(thread, "r1", [hello]), "tools": [THEME_TOOL]}
        status, first = await _post_ag_ui(api, "painter", first_body)
        assert status == 200, first
        offered = [tool["function"]["name"] for tool in provider.requests[0].tools]
        assert offered == ["setTheme"]
        assert provider.requests[0].tools[0]["function"]["parameters"] == THEME_TOOL["parameters"]
        assert _types(first)[-4:] == [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED",
        ]
        assert first[-4].tool_call_name == "setTheme" and first[-3].delta == '{"color": "green"}'
        end = first[-1]
        assert end.outcome.type == "success" and end.outcome.pending_tool_call_ids == ["t1"]
        run_id = first[0].run_id
        waiting = (await api.http.get(f"/v1/runs/{run_id}")).json()
        assert waiting["status"] == "waiting_for_approval", waiting

        # The front end ran it, and sends the thread back with the result.
        thread_messages = [
            hello,
            {
                "id": "a1",
                "role": "assistant",
                "content": "Changing it.",
                "toolCalls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "setTheme", "arguments": '{"color":"green"}'},
                    }
                ],
            },
            {"id": "tool1", "role": "tool", "toolCallId": "t1", "content": "theme is now green"},
        ]
        body = {**_agent_input(thread, "r2", thread_messages), "tools": [THEME_TOOL]}
        status, second = await _post_ag_ui(api, "painter", body)
        assert status == 200, second
        assert second[0].type.value == "RUN_STARTED" and second[0].run_id == run_id
        assert second[-1].type.value == "RUN_FINISHED" and second[-1].outcome.type == "success"
        assert not second[-1].outcome.pending_tool_call_ids
        text = "".join(e.delta for e in second if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert text == "Theme set to green."
        # The model read the result as the client wrote it.
        entries = api.env.store.load_entries(DEFAULT_PARTITION, thread)
        [result] = [entry for entry in entries if entry.role == "tool"]
        assert result.content == "theme is now green"
        assert provider.requests[1].messages[-1]["content"] == "theme is now green"

        # The same results again once the run has ended: nothing waits for them any more.
        status, [problem] = await _post_ag_ui(api, "painter", body)
        assert (status, problem["code"], problem["field"]) == (409, "run_not_active", "messages")


async def test_bad_client_tools_are_refused_naming_the_field(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(SCRIPT, agents=[AgentDefinition(id="painter", description="Paints")])
    async with api_env(client, task_queue, config, tmp_path) as api:
        hello = {"id": "m1", "role": "user", "content": "hi"}
        for tools, field in (
            ([{**THEME_TOOL, "name": "set theme!"}], "tools.0.name"),
            ([THEME_TOOL, THEME_TOOL], "tools"),
            ([{**THEME_TOOL, "parameters": {"type": "string"}}], "tools.0.parameters"),
        ):
            body = {**_agent_input("t-bad", "r1", [hello]), "tools": tools}
            status, [problem] = await _post_ag_ui(api, "painter", body)
            assert (status, problem["field"]) == (422, field), problem
        orphan = [
            hello,
            {"id": "a", "role": "assistant", "content": "", "toolCalls": []},
            {"id": "x", "role": "tool", "toolCallId": "nope", "content": "?"},
        ]
        status, [problem] = await _post_ag_ui(api, "painter", _agent_input("t-none", "r", orphan))
        assert (status, problem["code"]) == (409, "run_not_active"), problem
