"""MCP tools end to end, with real servers offline: `mcp-server-time` and `mcp-server-git` over
stdio, a FastMCP server of ours over stdio (crashes) and over streamable HTTP on 127.0.0.1
(cancellation, errors, images, progress, a tool list that changes). The model is scripted."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mcp import types as mcp_types
from mcp.shared.exceptions import MCPError
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.activities.mcp_results import map_result, validate_arguments
from otherone.activities.mcp_sessions import McpSessions, McpUnavailable
from otherone.client.agent_client import build_request
from otherone.client.watch import WatchState, render_tree
from otherone.config import McpToolRef, RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.errors import InvalidRequestError
from otherone.mcp_servers import McpServer
from otherone.runs import ArtifactRef, RunOutcome
from otherone.store import EntryRow
from otherone.toml_config import load_config
from otherone.tools import ToolError
from tests.harness import AgentEnv, agent_env, scripted_config, wait_until
from tests.mcp_http_server import BLOB, PIXEL_PNG, McpTestServer, serving
from tests.processes import address_of, cli_env, otherone
from tests.providers import RecordingProvider

BIN = Path(sys.executable).parent
STDIO_TEST_SERVER = Path(__file__).with_name("mcp_stdio_server.py")
REPEATING_TEST_SERVER = Path(__file__).with_name("mcp_repeating_server.py")


def call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "id": call_id}


def agent(agent_id: str, tools: list[str]) -> AgentDefinition:
    return AgentDefinition(id=agent_id, description=f"{agent_id} agent", tools=tools)


def with_servers(config: RuntimeConfig, *servers: McpServer) -> RuntimeConfig:
    for server in servers:
        config.add_mcp_server(server)
    return config


def tool_rows(env: AgentEnv, session_id: str) -> list[EntryRow]:
    return [row for row in env.store.load_entries("local", session_id) if row.role == "tool"]


def offered(provider: RecordingProvider, index: int) -> list[str]:
    return sorted(tool["function"]["name"] for tool in provider.calls()[index].tools)


def child_processes(marker: str) -> list[int]:
    """Live processes started by this test process whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if int(parent) == os.getpid() and state != "Z" and marker in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture
def time_server() -> McpServer:
    return McpServer(
        name="time", command=str(BIN / "mcp-server-time"), args=("--local-timezone", "UTC")
    )


@pytest.fixture
def http_server() -> Iterator[McpTestServer]:
    with serving(McpTestServer()) as server:
        yield server


def git_repository(path: Path) -> Path:
    path.mkdir()
    environment = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "Test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
    }

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=path, env=environment, check=True, capture_output=True)

    git("init", "-q")
    for message in ("first commit: the plan", "second commit: the work"):
        (path / "notes.txt").write_text(message)
        git("add", "notes.txt")
        git("commit", "-q", "-m", message)
    return path


# --------------------------------------------------------------------------- stdio servers


async def test_an_agent_asks_mcp_server_time_for_the_time_in_a_zone(
    client: Client, task_queue: str, tmp_path: Path, time_server: McpServer
) -> None:
    provider = RecordingProvider()
    config = with_servers(
        scripted_config(
            {
                "clock": [
                    {
                        "tool_calls": [
                            call("mcp.time.get_current_time", {"timezone": "Asia/Tokyo"}, "t1")
                        ]
                    },
                    "it is late in Tokyo",
                ]
            },
            agents=[agent("clock", ["mcp.time.get_current_time"])],
        ),
        time_server,
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="clock", input="time in Tokyo?"))
        rows = tool_rows(env, result.session_id)
        assert child_processes("mcp-server-time"), "the server runs while the worker does"
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    # Only what the agent's policy allows is offered (not convert_time).
    assert offered(provider, 0) == ["mcp.time.get_current_time"]
    [row] = rows
    assert row.error_kind is None
    answer = json.loads(row.content)["structured_content"]
    assert answer["timezone"] == "Asia/Tokyo" and answer["datetime"].endswith("+09:00")
    assert provider.calls()[1].messages[-1]["content"] == row.content
    assert child_processes("mcp-server-time") == [], "the worker's shutdown stops the server"


async def test_an_agent_reads_git_log_through_mcp_server_git(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    repository = git_repository(tmp_path / "repo")
    server = McpServer(
        name="git", command=str(BIN / "mcp-server-git"), args=("--repository", str(repository))
    )
    provider = RecordingProvider()
    config = with_servers(
        scripted_config(
            {
                "historian": [
                    {"tool_calls": [call("mcp.git.git_log", {"repo_path": str(repository)}, "g")]},
                    "two commits",
                ]
            },
            agents=[agent("historian", ["mcp.git.*"])],
        ),
        server,
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="historian", input="history?"))
        rows = tool_rows(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    names = offered(provider, 0)
    assert "mcp.git.git_log" in names and "mcp.git.git_status" in names  # the glob
    [row] = rows
    assert row.error_kind is None, row.content
    assert "first commit: the plan" in row.content and "second commit: the work" in row.content
    assert child_processes("mcp-server-git") == []


async def test_bad_arguments_are_refused_before_the_server_sees_them(
    client: Client, task_queue: str, tmp_path: Path, http_server: McpTestServer
) -> None:
    config = with_servers(
        scripted_config(
            {
                "agent": [
                    {"tool_calls": [call("mcp.test.count", {"n": "three"}, "bad")]},
                    {"tool_calls": [call("mcp.test.count", {"n": 3}, "good")]},
                    "counted",
                ]
            },
            agents=[agent("agent", ["mcp.test.count"])],
        ),
        McpServer(name="test", url=http_server.url),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="count"))
        rows = tool_rows(env, result.session_id)
        events = [e.event for e in env.store.read_events(result.run_id, limit=1000)]
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    bad, good = rows
    assert bad.error_kind == "invalid_arguments"
    assert "n: 'three' is not of type 'integer'" in json.loads(bad.content)["error"]
    assert good.error_kind is None and json.loads(good.content)["structured_content"] == {
        "result": 3
    }
    assert http_server.count_calls == 1
    progress = [e for e in events if e["type"] == "tool_progress"]
    assert [(e["progress"], e["total"], e["message"]) for e in progress] == [
        (1, 3, "step 1"),
        (2, 3, "step 2"),
        (3, 3, "step 3"),
    ]
    assert {e["tool_call_id"] for e in progress} == {"good"}
    of_good = [e["type"] for e in events if e.get("tool_call_id") == "good"]
    assert of_good == ["tool_started", *["tool_progress"] * 3, "tool_completed"]


async def test_a_crashed_stdio_server_is_restarted_and_one_that_cannot_start_fails_its_calls(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTHERONE_TEST_MCP_DIR", str(tmp_path))
    server = McpServer(
        name="fragile",
        command=sys.executable,
        args=(str(STDIO_TEST_SERVER),),
        env={"MCP_TEST_DIR": "${OTHERONE_TEST_MCP_DIR}"},  # read from the worker
    )
    broken = McpServer(name="broken", command=str(tmp_path / "no-such-server"))
    config = with_servers(
        scripted_config(
            {
                "agent": [
                    {"tool_calls": [call("mcp.fragile.crash", {}, "boom")]},
                    {"tool_calls": [call("mcp.fragile.echo", {"text": "still here"}, "echo")]},
                    {"tool_calls": [call("mcp.fragile.crash", {"refuse_restart": True}, "x")]},
                    {"tool_calls": [call("mcp.fragile.echo", {"text": "anyone?"}, "gone")]},
                    "recovered",
                ]
            },
            agents=[agent("agent", ["mcp.fragile.*", "mcp.broken.*"])],
        ),
        server,
        broken,
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        rows = tool_rows(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    crashed, echoed, crashed_again, refused = rows
    assert crashed.error_kind == crashed_again.error_kind == "recoverable"
    assert "MCP server 'fragile'" in json.loads(crashed.content)["error"]
    assert json.loads(echoed.content)["structured_content"] == {"result": "still here"}
    # A server that cannot start fails the calls to it, with the server named; the run goes on.
    assert refused.error_kind == "recoverable"
    assert "MCP server 'fragile' is unavailable" in json.loads(refused.content)["error"]
    assert len(list((tmp_path / "pids").iterdir())) == 2, "one start, one restart"
    assert child_processes(str(STDIO_TEST_SERVER)) == []


CLOCK_TOML = """
[models.scripted]
provider = "scripted"
model = "test"
script = { clock = ["I cannot tell the time right now."], other = ["Fine."], waiter = [
  { delay_seconds = 60, text = "never" },
] }

[mcp.time]
command = "{command}"

[agents.clock]
description = "Tells the time"
model = "scripted"
tools = ["mcp.time.*"]

[agents.other]
description = "Granted no MCP tools"
model = "scripted"
tools = "none"

[agents.waiter]
description = "Granted every MCP tool, and slow"
model = "scripted"
tools = ["mcp.*"]
"""


async def test_a_run_granted_a_server_that_offers_no_tools_says_why(
    client: Client, task_queue: str, tmp_path: Path, temporal_env: WorkflowEnvironment
) -> None:
    """`otherone run clock "What time is it in Tokyo?"` exited 0 with "0 tool calls" while
    the cause (the server's command not found) was only in the worker's log: the run now says
    so in an `mcp_unavailable` event (once), `otherone run`'s output and the run's record."""
    path = tmp_path / "otherone.toml"
    path.write_text(CLOCK_TOML.replace("{command}", str(tmp_path / "uvx")), encoding="utf-8")
    env = cli_env(address_of(temporal_env), task_queue, tmp_path, config=path)
    async with agent_env(client, task_queue, load_config(path), tmp_path) as agents:
        ran = await otherone("run", "clock", "What time is it in Tokyo?", env=env)
        assert ran.code == 0, ran.describe()
        [run_id] = re.findall(r"^run (\S+) started", ran.stderr, re.MULTILINE)
        record = await agents.agents.get_run(run_id)
        stored = agents.store.get_run_record("local", run_id)
        other = await agents.agents.run(build_request(entry_agent="other", input="hi"))
        waiting = await agents.agents.start(build_request(entry_agent="waiter", input="wait"))

        async def live_record_says_so() -> bool:  # the workflow's `record` query
            return bool((await waiting.record()).mcp_unavailable)

        await wait_until(live_record_says_so, message="the live record")
        await waiting.cancel()
        await waiting.result()
        events = agents.store.read_events(run_id)
        found = [record.event for record in events if record.event["type"] == "mcp_unavailable"]
        shown = await otherone("show", run_id, env=env)
    [event] = found
    assert event["server"] == "time" and "its command was not found" in event["reason"]
    why = {"time": event["reason"]}
    assert ran.stderr.count(f"⚠ MCP server 'time' offered no tools: {event['reason']}") == 1
    assert f"mcp      server 'time' offered no tools: {event['reason']}" in ran.stderr
    assert stored is not None and stored.mcp_unavailable == record.mcp_unavailable == why
    assert "mcp unavailable" in shown.stdout and "its command was not found" in shown.stdout
    assert other.mcp_unavailable == {}  # an agent not granted the server: nothing to say
    state = WatchState(run_id)
    for envelope in events:
        state.apply(envelope)
    assert state.root is not None and state.root.mcp_unavailable == why
    assert "⚠ no tools from MCP time" in str(render_tree(state, datetime.now(UTC)).label)


async def test_a_server_restarting_slower_than_its_calls_may_take_still_answers(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call's ``timeout_seconds`` bounds the call, not the server's restart after a crash
    (its ``startup_timeout_seconds`` does): a server that takes 2 s to start with calls of at
    most 1 s could never be called again once it had crashed (found by a user)."""
    monkeypatch.setenv("OTHERONE_TEST_MCP_DIR", str(tmp_path))
    monkeypatch.setenv("OTHERONE_TEST_MCP_START", "2")
    server = McpServer(
        name="slow",
        command=sys.executable,
        args=(str(STDIO_TEST_SERVER),),
        env={
            "MCP_TEST_DIR": "${OTHERONE_TEST_MCP_DIR}",
            "MCP_TEST_START_SECONDS": "${OTHERONE_TEST_MCP_START}",
        },
        timeout_seconds=1,
    )
    config = with_servers(
        scripted_config(
            {
                "agent": [
                    {"tool_calls": [call("mcp.slow.crash", {}, "boom")]},
                    {"tool_calls": [call("mcp.slow.echo", {"text": "back"}, "echo")]},
                    "done",
                ]
            },
            agents=[agent("agent", ["mcp.slow.*"])],
        ),
        server,
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        rows = tool_rows(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    _, echoed = rows
    assert echoed.error_kind is None, echoed.content
    assert json.loads(echoed.content)["structured_content"] == {"result": "back"}
    assert child_processes(str(STDIO_TEST_SERVER)) == []


async def test_a_server_that_never_answers_initialize_fails_within_its_startup_timeout(
    tmp_path: Path,
) -> None:
    """The start is given up after ``startup_timeout_seconds``, not that plus the 10 s a
    session's close may take (every new root run waited for both: found by a user)."""
    silent = McpServer(
        name="silent",
        command=sys.executable,
        args=("-c", "import time; time.sleep(120)"),
        startup_timeout_seconds=1,
    )
    sessions = McpSessions({"silent": silent})
    began = time.monotonic()
    with pytest.raises(McpUnavailable, match="did not start within 1s"):
        await sessions.session("silent")
    waited = time.monotonic() - began
    await sessions.aclose()
    assert waited < 6, waited  # 1 s, and the process stopped; it was 11 s
    assert child_processes("import time; time.sleep(120)") == []


async def test_http_error_responses_say_their_status_and_server_errors_mean_unavailable(
    http_server: McpTestServer,
) -> None:
    """The SDK says "Server returned an error response" for any status: the status is added,
    and a 5xx (a gateway, an overloaded server) is the server being unavailable, which an
    idempotent server's call is retried for (a user found 502 reported as a refusal)."""
    sessions = McpSessions({"test": McpServer(name="test", url=http_server.url)})
    try:
        http_server.refusals[:] = [502, 401]
        with pytest.raises(McpUnavailable, match="it answered HTTP 502"):
            await sessions.call_tool("test", "fail", {"reason": "x"})
        with pytest.raises(MCPError, match=r"error response \(HTTP 401\)"):
            await sessions.call_tool("test", "fail", {"reason": "x"})
        answered = await sessions.call_tool("test", "fail", {"reason": "x"})
    finally:
        await sessions.aclose()
    assert answered.is_error


async def test_a_missing_working_directory_is_named_as_such(tmp_path: Path) -> None:
    """Not "its command was not found" (the command exists: a user was misled)."""
    server = McpServer(name="lost", command=sys.executable, cwd=str(tmp_path / "gone"))
    sessions = McpSessions({"lost": server})
    try:
        with pytest.raises(McpUnavailable, match="its cwd is not a directory"):
            await sessions.session("lost")
    finally:
        await sessions.aclose()


def test_a_servers_slow_regexes_and_unresolvable_references_are_left_to_the_server() -> None:
    """A server's patterns run under a time budget: one like ``^(a|aa)+$`` takes exponential
    time in Python's `re` (which holds the interpreter: every run of the worker stalled, found
    by a user); past the budget the server judges, as it does a reference to another document
    (never fetched). Quick patterns are checked (they were skipped altogether, and
    `additionalProperties` next to `patternProperties` still ran them unbounded)."""
    catastrophic = {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "^(a|aa)+$"}},
    }
    argument = {"a": "a" * 60 + "!"}
    started = time.monotonic()
    assert validate_arguments("t", catastrophic, json.dumps(argument)) == argument
    assert time.monotonic() - started < 5
    keyed = {"type": "object", "patternProperties": {"^x_": {}}, "additionalProperties": False}
    with pytest.raises(ToolError, match="'y' do"):
        validate_arguments("t", keyed, json.dumps({"x_a": 1, "y": 2}))
    quick = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^b"}}}
    with pytest.raises(ToolError, match="does not match"):
        validate_arguments("t", quick, json.dumps({"a": "a"}))
    remote = {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:1/x.json"}}}
    assert validate_arguments("t", remote, json.dumps({"a": 1})) == {"a": 1}
    typed = {"type": "object", "properties": {"a": {"type": "integer"}}}
    with pytest.raises(ToolError, match="a: 'one' is not of type 'integer'"):
        validate_arguments("t", typed, json.dumps({"a": "one"}))


async def test_a_value_wrapped_by_fastmcp_reaches_the_model_once() -> None:
    """FastMCP sends a plain value as text and as ``{"result": value}``: one copy is kept (a
    large result counted twice against ``max_result_bytes``: found by a user)."""

    async def no_blobs(name: str, content: bytes, media_type: str) -> ArtifactRef:
        raise AssertionError("no blob expected")

    for text, structured in [("hi", {"result": "hi"}), ("3", {"result": 3})]:
        result = mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=text)],
            structuredContent=structured,
        )
        assert await map_result(result, no_blobs) == ({"structured_content": structured}, False)


# --------------------------------------------------------------------------- streamable HTTP


async def test_failing_and_image_tools_over_streamable_http(
    client: Client, task_queue: str, tmp_path: Path, http_server: McpTestServer
) -> None:
    config = with_servers(
        scripted_config(
            {
                "agent": [
                    {
                        "tool_calls": [
                            call("mcp.test.fail", {"reason": "no luck"}, "f"),
                            call("mcp.test.pixel", {}, "p"),
                        ]
                    },
                    "seen",
                ]
            },
            agents=[agent("agent", ["mcp.test.fail", "mcp.test.pixel"])],
        ),
        McpServer(name="test", url=http_server.url),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="try"))
        failed, image = tool_rows(env, result.session_id)
        [block] = json.loads(image.content)["content"]
        artifact = env.store.get_artifact("local", block["artifact_id"])
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert failed.error_kind == "recoverable"
    assert json.loads(failed.content) == {"error": "failed on purpose: no luck"}
    assert block["type"] == "image" and block["mime_type"] == "image/png"
    assert artifact is not None and artifact.content == PIXEL_PNG


async def test_embedded_resources_and_links_are_mapped(
    client: Client, task_queue: str, tmp_path: Path, http_server: McpTestServer
) -> None:
    config = with_servers(
        scripted_config(
            {"agent": [{"tool_calls": [call("mcp.test.documents", {}, "d")]}, "read"]},
            agents=[agent("agent", ["mcp.test.documents"])],
        ),
        McpServer(name="test", url=http_server.url),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="read"))
        [row] = tool_rows(env, result.session_id)
        text, blob, link = json.loads(row.content)["content"]
        artifact = env.store.get_artifact("local", blob["artifact_id"])
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert text == {
        "type": "resource",
        "uri": "file:///notes.txt",
        "mime_type": "text/plain",
        "text": "the notes",
    }
    assert (blob["type"], blob["uri"], blob["size_bytes"]) == ("resource", "file:///data.bin", 256)
    assert artifact is not None and artifact.content == BLOB
    assert link == {"type": "resource_link", "uri": "file:///big.csv", "name": "big.csv"}


async def test_a_call_over_the_servers_timeout_is_cancelled_and_reported(
    client: Client, task_queue: str, tmp_path: Path, http_server: McpTestServer
) -> None:
    config = with_servers(
        scripted_config(
            {"agent": [{"tool_calls": [call("mcp.test.slow", {"seconds": 600}, "s")]}, "gave up"]},
            agents=[agent("agent", ["mcp.test.slow"])],
        ),
        McpServer(name="test", url=http_server.url, timeout_seconds=2),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="wait"))
        [row] = tool_rows(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert row.error_kind == "timed_out"
    assert json.loads(row.content) == {"error": "MCP tool 'mcp.test.slow' timed out after 2s"}
    await wait_until(http_server.slow_cancelled.is_set, within=15, message="MCP's cancellation")


async def test_cancelling_the_run_cancels_the_mcp_call(
    client: Client, task_queue: str, tmp_path: Path, http_server: McpTestServer
) -> None:
    config = with_servers(
        scripted_config(
            {"agent": [{"tool_calls": [call("mcp.test.slow", {"seconds": 600}, "s")]}, "never"]},
            agents=[agent("agent", ["mcp.test.slow"])],
        ),
        McpServer(name="test", url=http_server.url, timeout_seconds=900),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="wait"))
        await wait_until(http_server.slow_started.is_set, within=30, message="the slow call")
        await handle.cancel()
        result = await handle.result()
        await wait_until(http_server.slow_cancelled.is_set, within=15, message="MCP's cancellation")
    assert result.outcome is RunOutcome.CANCELLED


async def test_a_run_keeps_its_tool_list_and_a_new_root_run_sees_the_change(
    client: Client, task_queue: str, tmp_path: Path, http_server: McpTestServer
) -> None:
    provider = RecordingProvider()
    config = with_servers(
        scripted_config(
            {
                "agent": [{"tool_calls": [call("mcp.test.grow", {}, "grow")]}, "grown"],
                "later": ["hi"],
            },
            agents=[agent("agent", ["mcp.test.*"]), agent("later", ["mcp.test.*"])],
        ),
        McpServer(name="test", url=http_server.url),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        first = await env.agents.run(build_request(entry_agent="agent", input="grow"))
        second = await env.agents.run(build_request(entry_agent="later", input="again"))
    assert (first.outcome, second.outcome) == (RunOutcome.COMPLETED, RunOutcome.COMPLETED)
    before = [
        f"mcp.test.{name}" for name in ("count", "documents", "fail", "grow", "pixel", "slow")
    ]
    # Both turns of the first run: the list it started with, though `grow` changed the server.
    assert offered(provider, 0) == offered(provider, 1) == before
    # A new root run lists the tools again.
    assert offered(provider, 2) == sorted([*before, "mcp.test.late"])


async def test_discovery_records_a_hash_of_each_servers_tool_definitions(
    http_server: McpTestServer, tmp_path: Path
) -> None:
    sessions = McpSessions(
        {
            "test": McpServer(name="test", url=http_server.url),
            "broken": McpServer(name="broken", command=str(tmp_path / "missing")),
        }
    )
    try:
        first, again = await sessions.discover(), await sessions.discover()
        with pytest.raises(McpUnavailable, match="not retried") as held_back:
            await sessions.session("broken")
        await sessions.call_tool("test", "grow", {})
        grown = await sessions.discover()
    finally:
        await sessions.aclose()
    assert first.servers["test"].tools_hash == again.servers["test"].tools_hash
    assert grown.servers["test"].tools_hash != first.servers["test"].tools_hash
    assert "mcp.test.late" in grown.servers["test"].tools
    assert first.refs["mcp.test.slow"] == McpToolRef(server="test", tool="slow")
    assert first.schemas["mcp.test.count"].parameters["properties"]["n"]["type"] == "integer"
    # A server that cannot start contributes no tools, and says why.
    broken = first.servers["broken"]
    assert broken.tools == () and broken.error is not None and "not found" in broken.error
    # Right after a failed start the server is not tried again (new runs do not wait on it),
    # said to the caller; what the snapshot records stays the same, so the same failure does
    # not make every new root run store a new snapshot (found by a user).
    assert "not found" in str(held_back.value)
    assert again.servers["broken"] == broken


async def test_an_approved_mcp_call_runs_with_edited_arguments_checked_by_its_schema(
    client: Client, task_queue: str, tmp_path: Path, time_server: McpServer
) -> None:
    """Edits of an MCP tool call are checked against the schema its server listed (frozen in
    the run's snapshot): a bad edit is refused, a good one is what runs."""
    clock = AgentDefinition(
        id="clock",
        description="clock agent",
        tools=["mcp.time.get_current_time"],
        approval={"mcp.time.get_current_time": "always"},
    )
    ask = call("mcp.time.get_current_time", {"timezone": "Asia/Tokyo"}, "t1")
    config = with_servers(
        scripted_config({"clock": [{"tool_calls": [ask]}, "done"]}, agents=[clock]),
        time_server,
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="clock", input="time?"))

        async def asked() -> bool:
            return bool(await env.agents.pending_approvals(handle.run_id))

        await wait_until(asked, within=30, message="the approval request")
        with pytest.raises(InvalidRequestError, match="timezone"):
            await env.agents.approve(handle.run_id, "t1", {"timezone": 7})
        await env.agents.approve(handle.run_id, "t1", {"timezone": "Europe/Oslo"})
        result = await handle.result()
        [row] = tool_rows(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert "Europe/Oslo" in (row.content or ""), row.content


async def test_a_tool_name_listed_twice_is_offered_once_or_not_at_all(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server listing one name twice: the same definition twice (a paging server's overlap)
    is one tool; two different definitions are none, with a warning (the model could not know
    which a call reaches, and providers refuse two functions of one name). The last listed
    used to win silently, and the server's tool list named it twice."""
    server = McpServer(name="repeating", command=sys.executable, args=(str(REPEATING_TEST_SERVER),))
    sessions = McpSessions({"repeating": server})
    try:
        discovery = await sessions.discover()
    finally:
        await sessions.aclose()
    assert discovery.servers["repeating"].tools == ("mcp.repeating.alone", "mcp.repeating.same")
    assert sorted(discovery.schemas) == ["mcp.repeating.alone", "mcp.repeating.same"]
    assert "lists the tool 'clash' 2 times with different definitions" in caplog.text


RAW_TEST_SERVER = Path(__file__).with_name("mcp_raw_server.py")


async def test_a_tool_list_the_sdk_cannot_read_offers_no_tools_and_fails_nothing() -> None:
    """A server listing a tool whose schema has no "type": the SDK refuses the whole list. It
    failed every root run's prepare on the worker (retried for 12 minutes and more, past the
    run's deadline), for any agent: now the server contributes no tools, as one that did not
    start, and says why."""
    bad = McpServer(
        name="bad",
        command=sys.executable,
        args=(str(RAW_TEST_SERVER), "--bad-schema"),
    )
    good = McpServer(name="good", command=sys.executable, args=(str(RAW_TEST_SERVER),))
    sessions = McpSessions({"bad": bad, "good": good})
    try:
        discovery = await sessions.discover()
    finally:
        await sessions.aclose()
    error = discovery.servers["bad"].error
    assert error is not None and error.startswith("listing its tools failed"), error
    assert discovery.servers["good"].tools == ("mcp.good.fast", "mcp.good.slow")


async def test_a_server_busy_with_a_call_is_not_restarted_for_a_late_ping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server answering one request at a time, in a long call: another call's liveness ping
    went unanswered, the server was taken for dead and restarted, and the long call (within its
    timeout) failed "the connection closed during the call". A busy server is not pinged."""
    import otherone.activities.mcp_sessions as mcp_sessions

    monkeypatch.setattr(mcp_sessions, "IDLE_PING_SECONDS", 0.0)
    monkeypatch.setattr(mcp_sessions, "PING_TIMEOUT_SECONDS", 0.2)
    server = McpServer(name="seq", command=sys.executable, args=(str(RAW_TEST_SERVER),))
    sessions = McpSessions({"seq": server})
    try:
        slow = asyncio.ensure_future(
            sessions.call_tool("seq", "slow", {"seconds": 1.5}, timeout_seconds=20)
        )
        busy = lambda: getattr(sessions._connections.get("seq"), "in_flight", 0) == 1  # noqa: E731
        await wait_until(busy, within=20, message="the slow call under way")
        fast = await sessions.call_tool("seq", "fast", {}, timeout_seconds=20)
        done = await slow
    finally:
        await sessions.aclose()
    assert [block.text for block in done.content] == ["slow done"]  # type: ignore[union-attr]
    assert [block.text for block in fast.content] == ["fast done"]  # type: ignore[union-attr]


async def test_a_server_that_keeps_failing_to_start_is_held_back_longer_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A remote server that accepts connections and never answers held every new root run's
    start for its whole startup timeout, again every 10 s: each failure in a row doubles the
    time its starts fail at once (up to 5 minutes)."""
    import otherone.activities.mcp_sessions as mcp_sessions

    clock = [1000.0]
    monkeypatch.setattr(mcp_sessions.time, "monotonic", lambda: clock[0])
    sessions = McpSessions({})
    pauses = []
    for _ in range(7):
        sessions._hold_back("hung", "it did not start within 30s")
        pauses.append(sessions._failed["hung"][0] - clock[0])
    assert pauses == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
