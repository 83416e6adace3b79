"""MCP resources end to end: a FastMCP server over streamable HTTP on 127.0.0.1, a real
Temporal dev server and store, a scripted model. The list is frozen per run, reads are live,
binary (and big text) contents become artifacts of the run's partition, the system prompt
lists them when the server says so, and the tool policies grant them like tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.activities.mcp_sessions import McpSessions
from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.mcp_resources import (
    PROMPT_FIELD_CHARS,
    McpResource,
    McpServerResources,
    resources_prompt_block,
)
from otherone.mcp_servers import McpServer
from otherone.runs import RunOutcome
from otherone.store import EntryRow
from tests.harness import AgentEnv, agent_env, scripted_config, wait_until
from tests.mcp_http_server import BLOB, serving
from tests.mcp_more_server import BIG_TEXT, McpMoreServer
from tests.processes import otherone
from tests.providers import RecordingProvider
from tests.test_mcp_cli import command_env


def call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "id": call_id}


def read(uri: str, call_id: str) -> dict[str, Any]:
    return call("mcp.more.resources.read", {"uri": uri}, call_id)


@pytest.fixture
def more_server() -> Iterator[McpMoreServer]:
    with serving(McpMoreServer()) as server:
        yield server


def config_for(
    server: McpMoreServer, script: dict[str, list[Any]], tools: list[str], **options: Any
) -> RuntimeConfig:
    agents = [
        AgentDefinition(id=agent_id, description=f"{agent_id} agent", tools=tools)
        for agent_id in script
    ]
    config = scripted_config(script, agents=agents)
    config.add_mcp_server(McpServer(name="more", url=server.url, **options))
    return config


def tool_rows(env: AgentEnv, session_id: str, partition: str = "local") -> list[EntryRow]:
    return [row for row in env.store.load_entries(partition, session_id) if row.role == "tool"]


def offered(provider: RecordingProvider, index: int) -> list[str]:
    return sorted(tool["function"]["name"] for tool in provider.calls()[index].tools)


async def test_an_agent_reads_text_binary_and_big_resources_of_its_partition(
    client: Client, task_queue: str, tmp_path: Path, more_server: McpMoreServer
) -> None:
    provider = RecordingProvider()
    script = {
        "reader": [
            {
                "tool_calls": [
                    read("notes://readme", "r1"),
                    read("notes://data.bin", "r2"),
                    read("notes://big", "r3"),
                    read("notes://missing", "r4"),
                    call("mcp.more.resources.read", {}, "r5"),
                ]
            },
            "read them",
        ]
    }
    config = config_for(more_server, script, ["mcp.more.resources.*"], resources_in_prompt=True)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        tenant = AgentClient(
            client, task_queue=task_queue, store=env.store, partition_key="tenant-a"
        )
        result = await tenant.run(
            build_request(
                entry_agent="reader",
                input="read",
                runtime_context={"partition_key": "tenant-a"},
            )
        )
        rows = {row.tool_call_id: row for row in tool_rows(env, result.session_id, "tenant-a")}
        text, blob, big = (json.loads(rows[key].content) for key in ("r1", "r2", "r3"))
        stored_blob = env.store.get_artifact("tenant-a", blob["contents"][0]["artifact_id"])
        stored_big = env.store.get_artifact("tenant-a", big["contents"][0]["artifact_id"])
        other_partition = env.store.get_artifact("local", blob["contents"][0]["artifact_id"])
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    # Only the resource tools are granted: not the server's own tool `signup`.
    assert offered(provider, 0) == ["mcp.more.resources.list", "mcp.more.resources.read"]
    system = provider.calls()[0].messages[0]["content"]
    assert "MCP server 'more' resources (read one with mcp.more.resources.read):" in system
    assert "- readme <notes://readme> (text/plain): How the notes are kept" in system
    assert text["contents"] == [
        {"uri": "notes://readme", "mime_type": "text/plain", "text": "Notes are kept one per day."}
    ]
    assert blob["contents"][0]["size_bytes"] == len(BLOB)
    assert stored_blob is not None and stored_blob.content == BLOB
    assert other_partition is None, "an artifact is its partition's only"
    assert "stored as an artifact" in big["contents"][0]["note"]
    assert stored_big is not None and stored_big.content == BIG_TEXT.encode()
    assert rows["r4"].error_kind == "recoverable"
    assert "could not read notes://missing" in rows["r4"].content
    assert rows["r5"].error_kind == "invalid_arguments"
    assert "uri" in rows["r5"].content


async def test_a_run_keeps_the_resource_list_it_was_told_and_reads_live_content(
    client: Client, task_queue: str, tmp_path: Path, more_server: McpMoreServer
) -> None:
    provider = RecordingProvider()
    turn = {"tool_calls": [call("mcp.more.resources.list", {}, "l"), read("notes://today", "t")]}
    script = {"reader": [turn, turn, "done"]}
    config = config_for(more_server, script, ["mcp.more.*"])
    gate = provider.gate("reader", 2)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        started = await env.agents.start(build_request(entry_agent="reader", input="notes"))
        await wait_until(lambda: len(provider.calls()) == 2, message="the second turn")
        more_server.today = "second version"

        @more_server.app.resource("notes://late", name="late")
        def late() -> str:
            return "added while the run went on"

        gate.set()
        result = await started.result()
        first_run = tool_rows(env, result.session_id)
        again = await env.agents.run(build_request(entry_agent="reader", input="notes"))
        second_run = tool_rows(env, again.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    lists = [json.loads(row.content) for row in first_run if row.tool_call_id == "l"]
    reads = [json.loads(row.content) for row in first_run if row.tool_call_id == "t"]
    uris = [[resource["uri"] for resource in listed["resources"]] for listed in lists]
    assert uris[0] == uris[1] and "notes://late" not in uris[1], "the list is frozen per run"
    assert [r["contents"][0]["text"] for r in reads] == ["first version", "second version"]
    [new_list, *_] = [json.loads(row.content) for row in second_run if row.tool_call_id == "l"]
    assert "notes://late" in [resource["uri"] for resource in new_list["resources"]]


async def test_discovery_lists_resources_and_adds_their_tools(
    more_server: McpMoreServer,
) -> None:
    sessions = McpSessions({"more": McpServer(name="more", url=more_server.url)})
    try:
        found = await sessions.discover()
    finally:
        await sessions.aclose()
    listed = found.resources["more"]
    assert [resource.uri for resource in listed.resources] == [
        "notes://big",
        "notes://data.bin",
        "notes://readme",
        "notes://today",
    ]
    assert not listed.in_prompt, "listed in prompts only when the server is declared so"
    assert found.refs["mcp.more.resources.read"].tool == "resources/read"
    assert "mcp.more.signup" in found.servers["more"].tools
    assert "mcp.more.resources.list" in found.servers["more"].tools


def test_the_prompt_block_is_bounded_and_only_for_agents_that_may_read() -> None:
    many = McpServerResources(
        resources=tuple(
            McpResource(uri=f"notes://{index:03}", name="x" * 500, description="d")
            for index in range(80)
        ),
        in_prompt=True,
    )
    block = resources_prompt_block({"more": many}, ["mcp.more.resources.read"])
    assert block.count("\n- ") == 51  # 50 resources and the "more" line
    assert "x" * PROMPT_FIELD_CHARS not in block and "mcp.more.resources.list lists them" in block
    assert resources_prompt_block({"more": many}, ["mcp.more.resources.list"]) == ""


async def test_a_servers_request_for_user_input_is_refused_and_the_model_is_told(
    client: Client, task_queue: str, tmp_path: Path, more_server: McpMoreServer
) -> None:
    """Elicitation is not supported yet (README): the worker does not declare the capability,
    so the server's tool fails on its own terms; the model sees it and the run goes on."""
    provider = RecordingProvider()
    script = {"joiner": [{"tool_calls": [call("mcp.more.signup", {}, "s")]}, "could not"]}
    config = config_for(more_server, script, ["mcp.more.signup"])
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="joiner", input="sign me up"))
        [row] = tool_rows(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert more_server.elicitation_started.is_set() and more_server.elicited == []
    assert row.error_kind == "recoverable"
    assert "elicitation" in row.content.lower(), row.content


async def test_otherone_mcp_call_lists_and_reads_resources(
    tmp_path: Path, more_server: McpMoreServer
) -> None:
    config = tmp_path / "otherone.toml"
    config.write_text(
        '[models.demo]\nprovider = "scripted"\nmodel = "demo"\n\n'
        f'[mcp.more]\nurl = "{more_server.url}"\n',
        encoding="utf-8",
    )
    env = {**command_env(tmp_path), "OTHERONE_CONFIG": str(config)}
    tools = await otherone("mcp", "tools", "more", env=env)
    assert "mcp.more.resources.read  (to providers: " in tools.stdout, tools.describe()
    listed = await otherone("mcp", "call", "more", "resources.list", env=env)
    assert listed.code == 0, listed.describe()
    assert "notes://readme" in [item["uri"] for item in json.loads(listed.stdout)["resources"]]
    read_back = await otherone(
        "mcp", "call", "more", "resources.read", '{"uri": "notes://readme"}', env=env
    )
    assert read_back.code == 0, read_back.describe()
    assert json.loads(read_back.stdout)["contents"][0]["text"] == "Notes are kept one per day."
    missing = await otherone(
        "mcp", "call", "more", "resources.read", '{"uri": "notes://missing"}', env=env
    )
    assert missing.code == 1 and "could not read notes://missing" in missing.stderr
    unknown = await otherone("mcp", "call", "more", "nope", env=env)
    assert unknown.code == 2 and "resources.read" in unknown.stderr, unknown.describe()


async def test_a_resource_list_over_the_agents_result_bound_is_stored_as_an_artifact(
    client: Client, task_queue: str, tmp_path: Path, more_server: McpMoreServer
) -> None:
    """An oversized tool result ends the run: a long list (or text) goes to an artifact."""
    script = {"lister": [{"tool_calls": [call("mcp.more.resources.list", {}, "l")]}, "ok"]}
    config = scripted_config(
        script,
        agents=[
            AgentDefinition.model_validate(
                {
                    "id": "lister",
                    "description": "lists",
                    "tools": ["mcp.more.resources.list"],
                    "limits": {"max_result_bytes": 400},
                }
            )
        ],
    )
    config.add_mcp_server(McpServer(name="more", url=more_server.url))
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="lister", input="list"))
        [row] = tool_rows(env, result.session_id)
        reference = json.loads(row.content)
        stored = env.store.get_artifact("local", reference["artifact_id"])
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert "stored as an artifact" in reference["note"]
    assert stored is not None
    assert len(json.loads(stored.content)["resources"]) == 4
