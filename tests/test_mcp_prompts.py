"""MCP prompts as agent instructions (``instructions_from``) end to end: a FastMCP server over
streamable HTTP on 127.0.0.1, a real Temporal dev server and store, a scripted model. The text
is fetched once per root run and kept in its snapshot; a prompt that cannot be fetched fails
the agent's runs with the reason; bad declarations are refused naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.errors import ConfigurationError, FailureCode
from otherone.mcp_servers import McpServer
from otherone.runs import RunOutcome
from tests.harness import agent_env, scripted_config, wait_until
from tests.mcp_http_server import serving
from tests.mcp_more_server import McpMoreServer
from tests.providers import RecordingProvider

REVIEWER = {"server": "more", "prompt": "reviewer", "arguments": {"language": "Python"}}


@pytest.fixture
def more_server() -> Iterator[McpMoreServer]:
    with serving(McpMoreServer()) as server:
        yield server


def config_for(server: McpMoreServer, turns: list[Any], source: dict[str, Any]) -> RuntimeConfig:
    agent = AgentDefinition.model_validate(
        {
            "id": "reviewer",
            "description": "reviews code",
            "system_prompt": "You work for the platform team.",
            "instructions_from": source,
            "tools": ["mcp.more.resources.list"],
        }
    )
    config = scripted_config({"reviewer": turns}, agents=[agent])
    config.add_mcp_server(McpServer(name="more", url=server.url))
    config.validate()
    return config


def system_prompt(provider: RecordingProvider, index: int) -> str:
    content = provider.calls()[index].messages[0]["content"]
    assert isinstance(content, str)
    return content


async def test_an_agents_instructions_come_from_a_server_prompt_kept_for_the_whole_run(
    client: Client, task_queue: str, tmp_path: Path, more_server: McpMoreServer
) -> None:
    provider = RecordingProvider()
    strict = {**REVIEWER, "arguments": {"language": "Python", "strictness": "strict"}}
    listing = {"tool_calls": [{"name": "mcp.more.resources.list", "arguments": {}, "id": "l"}]}
    config = config_for(more_server, [listing, "first answer"], strict)
    gate = provider.gate("reviewer", 1)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        first = await env.agents.start(build_request(entry_agent="reviewer", input="review"))
        await wait_until(lambda: len(provider.calls()) == 1, message="the first turn")
        more_server.closing = "Changed after the run started."
        gate.set()
        result = await first.result()
        # The same session's next turn is another root run: it sees the changed prompt.
        later = await env.agents.run(
            build_request(
                entry_agent="reviewer", input="again", session={"session_id": result.session_id}
            )
        )
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert later.outcome is RunOutcome.COMPLETED, later.failure
    expected = "You work for the platform team.\n\nYou review Python code. Be strict. "
    # The run's second turn was asked after the server changed: it keeps the run's text.
    assert [system_prompt(provider, index) for index in (0, 1)] == [
        expected + "Cite line numbers."
    ] * 2
    assert system_prompt(provider, 2) == expected + "Changed after the run started."


async def test_a_prompt_that_cannot_be_fetched_fails_the_agents_runs_with_the_reason(
    client: Client, task_queue: str, tmp_path: Path, more_server: McpMoreServer
) -> None:
    provider = RecordingProvider()
    config = config_for(more_server, ["never"], {"server": "more", "prompt": "no_such_prompt"})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="reviewer", input="review"))
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None
    assert result.failure.code is FailureCode.INVALID_CONFIGURATION
    assert "instructions_from: MCP prompt 'no_such_prompt' of server 'more'" in (
        result.failure.message
    )
    assert provider.calls() == [], "the model is never asked without its instructions"


def test_instructions_from_must_name_a_declared_server_and_hold_no_secret() -> None:
    agent = AgentDefinition.model_validate(
        {"id": "a", "description": "d", "instructions_from": {**REVIEWER, "server": "nowhere"}}
    )
    with pytest.raises(ConfigurationError) as refused:
        scripted_config({"a": ["x"]}, agents=[agent]).validate()
    assert "instructions_from.server" in str(refused.value)
    assert "unknown MCP server 'nowhere'" in str(refused.value)
    secret = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
    with pytest.raises(ValidationError) as leaked:
        AgentDefinition.model_validate(
            {
                "id": "a",
                "description": "d",
                "instructions_from": {**REVIEWER, "arguments": {"token": secret}},
            }
        )
    assert "arguments.token looks like a credential" in str(leaked.value)
    assert secret not in str(leaked.value)
