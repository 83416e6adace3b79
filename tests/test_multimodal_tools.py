"""An MCP tool's image reaches the next model call (issue 44): inside Anthropic's
``tool_result`` block, and for Chat Completions as a user message after the tool results (a
tool message holds text only). Real MCP server (FastMCP over streamable HTTP), fake provider
servers asserting the exact JSON they receive."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.mcp_servers import McpServer
from otherone.parts import ImagePart, TextPart
from otherone.runs import RunOutcome
from otherone.tools import tool
from tests.fixtures.providers.wire_server import (
    Reply,
    Seen,
    WireServer,
    anthropic_stream,
    openai_stream,
)
from tests.harness import agent_env, scripted_config
from tests.mcp_http_server import PIXEL_PNG, McpTestServer, serving
from tests.providers import RecordingProvider

KEY_ENV = "OTHERONE_TEST_TOOL_IMAGES_KEY"
PIXEL = base64.b64encode(PIXEL_PNG).decode()


@pytest.fixture
def http_server() -> Iterator[McpTestServer]:
    with serving(McpTestServer()) as server:
        yield server


def _config(provider: str, base_url: str, mcp_url: str, modalities: Any = None) -> RuntimeConfig:
    profile = ModelProfile.model_validate(
        {
            "id": "wire",
            "provider": provider,
            "model": "vision-model",
            "base_url": base_url if provider == "anthropic" else f"{base_url}/v1",
            "api_key_env": KEY_ENV,
            "max_tokens": 64,
            "input_modalities": modalities,
        }
    )
    agent = AgentDefinition(id="looker", description="Looks.", tools=["mcp.test.pixel"])
    config = RuntimeConfig(agents=[agent], models=[profile])
    config.add_mcp_server(McpServer(name="test", url=mcp_url))
    return config


def _answer(provider: str) -> Any:
    def answer(seen: Seen) -> Reply:
        anthropic = provider == "anthropic"
        stream = anthropic_stream if anthropic else openai_stream
        if "tool_call_id" in json.dumps(seen.body) or '"tool_result"' in json.dumps(seen.body):
            return Reply(body=stream(["One pixel."], []))
        return Reply(body=stream(["Looking."], [("call_p", "mcp__test__pixel", ["{}"])]))

    return answer


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_mcp_tools_image_reaches_the_next_model_call(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    http_server: McpTestServer,
    provider: str,
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-tool-images")
    async with (
        WireServer(_answer(provider)) as server,
        agent_env(
            client, task_queue, _config(provider, server.url, http_server.url), tmp_path
        ) as env,
    ):
        result = await env.agents.run(build_request(entry_agent="looker", input="look"))
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "One pixel."
    messages = server.requests[1].body["messages"]
    if provider == "anthropic":
        [block] = messages[-1]["content"]
        block.pop("cache_control", None)
        assert block["type"] == "tool_result" and block["tool_use_id"] == "call_p"
        text, image = block["content"]
        assert text["type"] == "text" and '"artifact_id"' in text["text"]
        image.pop("cache_control", None)
        assert image == {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
        }
    else:
        tool, images = messages[-2:]
        assert tool["role"] == "tool" and tool["tool_call_id"] == "call_p"
        assert '"artifact_id"' in tool["content"] and "images" not in tool
        assert images == {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by tool call call_p:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
            ],
        }


async def test_a_text_only_profile_gets_the_tools_text_without_its_image(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    http_server: McpTestServer,
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-tool-images")
    async with WireServer(_answer("openai")) as server:
        config = _config("openai", server.url, http_server.url, modalities=["text"])
        async with agent_env(client, task_queue, config, tmp_path) as env:
            result = await env.agents.run(build_request(entry_agent="looker", input="look"))
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    messages = server.requests[1].body["messages"]
    assert messages[-1]["role"] == "tool" and PIXEL not in json.dumps(messages)


@tool
def chart() -> list[TextPart | ImagePart]:
    """Draws a chart."""
    return [TextPart(text="sales by month"), ImagePart.from_bytes(PIXEL_PNG)]


@tool
def broken_chart() -> ImagePart:
    """Draws nothing."""
    return ImagePart.from_bytes(b"not a picture")


async def test_a_python_tool_returning_an_image_shows_it_to_the_model(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    calls = [
        {"name": "chart", "arguments": {}, "id": "c1"},
        {"name": "broken_chart", "arguments": {}, "id": "c2"},
    ]
    config = scripted_config(
        {"looker": [{"tool_calls": calls}, "seen"]},
        agents=[AgentDefinition(id="looker", description="l", tools=["chart", "broken_chart"])],
        tools=[chart, broken_chart],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="looker", input="plot"))
        history = await client.get_workflow_handle(result.run_id).fetch_history()
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    tool_messages = [m for m in provider.calls()[1].messages if m["role"] == "tool"]
    shown, broken = tool_messages
    body = json.loads(shown["content"])
    assert body["text"] == "sales by month" and body["content"][0]["mime_type"] == "image/png"
    assert shown["images"] == [{"type": "image", "media_type": "image/png", "data": PIXEL}]
    assert "the tool returned a bad image" in broken["content"] and "images" not in broken
    assert PIXEL not in history.to_json()
