"""MCP declarations: `[mcp.<server>]` tables, `McpServer`, names and globs in policies, the
snapshot's MCP fields, literal values and ``${VAR}`` references resolved on the worker."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from otherone.activities.mcp_sessions import McpSessions
from otherone.config import McpServerTools, McpToolRef, RuntimeConfig, ToolSchema
from otherone.definitions import AccessPolicy, AgentDefinition, ModelProfile
from otherone.errors import ConfigurationError
from otherone.mcp_servers import McpServer, mcp_tool_name, parse_mcp_name
from otherone.toml_config import parse_config
from otherone.tools import tool
from otherone.wire_names import encode_tool_name
from tests.snapshot_versions import version_without_later_fields

STDIO_TEST_SERVER = Path(__file__).with_name("mcp_stdio_server.py")


def document(**mcp: dict[str, Any]) -> dict[str, Any]:
    return {
        "models": {"demo": {"provider": "scripted", "model": "demo"}},
        "agents": {
            "dev": {"description": "dev", "system_prompt": "", "tools": ["mcp.git.*"]},
        },
        "mcp": mcp,
    }


def load(data: dict[str, Any], base_dir: Path = Path("/srv/app")) -> RuntimeConfig:
    return parse_config(data, source="otherone.toml", base_dir=base_dir)


def test_stdio_and_remote_servers_load_from_toml() -> None:
    config = load(
        document(
            git={
                "command": "uvx",
                "args": ["mcp-server-git"],
                "env": {"GITHUB_TOKEN": "${MY_TOKEN}", "TZ": "Europe/Oslo", "DEBUG": "1"},
                "cwd": "repo",
                "idempotent": True,
            },
            search={
                "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}", "X-Title": "otherone"},
                "headers_env": {"X-Api-Key": "A"},
            },
        )
    )
    git, search = config.mcp_servers["git"], config.mcp_servers["search"]
    assert (git.command, git.args, git.env, git.cwd) == (
        "uvx",
        ("mcp-server-git",),
        {"GITHUB_TOKEN": "${MY_TOKEN}", "TZ": "Europe/Oslo", "DEBUG": "1"},
        "/srv/app/repo",
    )
    assert search.headers == {"Authorization": "Bearer ${SEARCH_TOKEN}", "X-Title": "otherone"}
    assert (git.transport, git.attempts) == ("stdio", 3)
    assert (search.transport, search.attempts, search.timeout_seconds) == (
        "streamable_http",
        1,
        60.0,
    )


@pytest.mark.parametrize(
    ("table", "field", "message"),
    [
        ({"command": "x", "url": "http://a/mcp"}, None, "exactly one of command"),
        ({}, None, "exactly one of command"),
        ({"url": "ftp://a/mcp"}, "url", "http:// or https://"),
        ({"url": "https://user:pw@a/mcp"}, "url", "must not carry credentials"),
        ({"command": "x", "env": {"TOKEN": "ghp secret value"}}, "env.TOKEN", "named like a"),
        ({"command": "x", "env": {"TOKEN": "MY_TOKEN"}}, "env.TOKEN", 'write "${MY_TOKEN}"'),
        ({"command": "x", "env": {"DIR": "WORK_DIR"}}, "env.DIR", 'write "${WORK_DIR}"'),
        ({"command": "x", "env": {"A": "${input:key}"}}, "env.A", "must name a worker"),
        ({"command": "x", "env": {"A": "${env:HOME}"}}, "env.A", "(write ${HOME})"),
        ({"command": "x", "env": {"A": "${HOME"}}, "env.A", "without its closing"),
        ({"command": "x", "args": ["a", "${}"]}, "args.1", "must name a worker"),
        ({"command": "x", "headers_env": {"Authorization": "A"}}, None, "headers_env are for"),
        ({"command": "x", "headers": {"X-Title": "a"}}, None, "headers and headers_env are"),
        (
            {"url": "http://a/mcp", "headers": {"Authorization": "Basic dXNlcjpwYXNz"}},
            "headers.Authorization",
            'write "Bearer ${GIT_TOKEN}" and set GIT_TOKEN on the worker',
        ),
        (
            {"url": "http://a/mcp", "headers": {"X-Api-Key": "short"}},
            "headers.X-Api-Key",
            'write "${GIT_X_API_KEY}"',
        ),
        (
            {"url": "http://a/mcp", "headers": {"A": "${X}"}, "headers_env": {"a": "X"}},
            None,
            "both set A",
        ),
        ({"url": "http://a/mcp", "args": ["x"]}, None, "args, env and cwd are for stdio"),
        ({"command": "x", "timeout_seconds": 0}, "timeout_seconds", "greater than zero"),
        ({"command": "x", "max_attempts": 0}, "max_attempts", "greater than or equal to 1"),
        ({"command": "x", "name": "other"}, "name", "table key is the server's name"),
        ({"command": "x", "surprise": 1}, "surprise", "Extra inputs are not permitted"),
        # Not coerced (a user found them taken as 1 / true): a mistake, said where it is.
        ({"command": "x", "max_attempts": True}, "max_attempts", "valid integer"),
        ({"command": "x", "idempotent": "yes"}, "idempotent", "valid boolean"),
        ({"command": "x", "cwd": "  "}, "cwd", "at least 1 character"),
    ],
)
def test_bad_server_tables_name_file_table_and_field(
    table: dict[str, Any], field: str | None, message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load(document(git=table))
    error = caught.value
    assert (error.file, error.table, error.field) == ("otherone.toml", "mcp.git", field)
    assert message in error.message


def test_bad_server_names_and_references_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="not a valid MCP server id") as caught:
        load(document(Git={"command": "x"}))
    assert caught.value.table == "mcp.Git"
    data = document(git={"command": "x"})
    data["agents"]["dev"]["tools"] = ["mcp.gti.git_log"]
    with pytest.raises(ConfigurationError, match="MCP server 'gti', which is not declared") as c:
        load(data)
    assert (c.value.table, c.value.field) == ("agents.dev", "tools")
    data["agents"]["dev"]["tools"] = ["mcp.git.*"]
    data["policy"] = {"tools": ["mcp.nope.*"]}
    with pytest.raises(ConfigurationError, match="'nope'") as c:
        load(data)
    assert (c.value.table, c.value.field) == ("policy", "tools")


def test_user_tools_may_not_take_mcp_names() -> None:
    @tool(name="mcp.git.fake")
    def fake() -> str:
        """Pretends to be an MCP tool."""
        return ""

    config = RuntimeConfig(
        models=[ModelProfile(id="demo", provider="scripted", model="demo")], tools=[fake]
    )
    with pytest.raises(ConfigurationError, match="are for the tools of MCP servers"):
        config.validate()


def test_mcp_tools_reach_providers_under_the_usual_wire_names() -> None:
    assert encode_tool_name("mcp.git.git_log") == "mcp__git__git_log"
    assert mcp_tool_name("time", "get_current_time") == "mcp.time.get_current_time"
    assert parse_mcp_name("mcp.git.*") == ("git", "*")
    assert parse_mcp_name("get_weather") is None and parse_mcp_name("mcp.git") is None


def test_policies_accept_globs() -> None:
    policy = AccessPolicy.allow("mcp.git.*", "mcp.time.get_current_time", "lookup")
    assert policy.allows("mcp.git.git_log") and policy.allows("mcp.git.git_status")
    assert policy.allows("mcp.time.get_current_time") and policy.allows("lookup")
    assert not policy.allows("mcp.time.convert_time") and not policy.allows("mcp.gitx.log")
    assert not AccessPolicy.none().allows("mcp.git.git_log")


def test_an_agent_sees_its_policy_intersected_with_the_runtime_policy() -> None:
    config = RuntimeConfig(
        models=[ModelProfile(id="demo", provider="scripted", model="demo")],
        agents=[AgentDefinition(id="dev", description="dev", tools=["mcp.git.*"])],
        mcp_servers=[McpServer(name="git", command="x")],
    )
    config.policy = config.policy.model_copy(
        update={"tools": AccessPolicy.allow("mcp.*.git_log", "mcp.*.git_status")}
    )
    base = config.snapshot()
    schemas = {
        name: ToolSchema(
            name=name, description=name, parameters={}, timeout_seconds=1, max_attempts=1
        )
        for name in ("mcp.git.git_log", "mcp.git.git_status", "mcp.git.git_commit")
    }
    refs = {name: McpToolRef(server="git", tool=name.rsplit(".", 1)[1]) for name in schemas}
    snapshot = base.with_mcp({"git": McpServerTools(tools=tuple(schemas))}, schemas, refs)
    assert snapshot.tool_names_for(snapshot.agent("dev")) == [
        "mcp.git.git_log",
        "mcp.git.git_status",
    ]
    # Discovered tools make a new version; a snapshot without MCP hashes as before MCP existed.
    assert snapshot.version != base.version
    assert base.version == version_without_later_fields(base)
    assert base.version == base.with_mcp({}, {}, {}).version


async def test_env_values_reference_worker_variables_or_the_secrets_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = McpServer(
        name="local",
        command=sys.executable,
        args=(str(STDIO_TEST_SERVER),),
        env={"MCP_TEST_DIR": "${OTHERONE_MCP_TEST_DIR_SECRET}"},
    )
    monkeypatch.delenv("OTHERONE_MCP_TEST_DIR_SECRET", raising=False)
    missing = McpSessions({"local": server})
    try:
        unavailable = (await missing.discover()).servers["local"]
    finally:
        await missing.aclose()
    assert unavailable.error is not None
    # The field and the variable (a reference is never a secret: load refuses those).
    assert (
        "env.MCP_TEST_DIR references ${OTHERONE_MCP_TEST_DIR_SECRET}, which is neither"
        in unavailable.error
    )

    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"OTHERONE_MCP_TEST_DIR_SECRET={tmp_path}\n")
    monkeypatch.setenv("OTHERONE_SECRETS_FILE", str(secrets))
    sessions = McpSessions({"local": server})
    try:
        found = await sessions.discover()
        echoed = await sessions.call_tool("local", "echo", {"text": "hi"})
    finally:
        await sessions.aclose()
    assert "mcp.local.echo" in found.servers["local"].tools
    assert echoed.structured_content == {"result": "hi"}
    assert len(list((tmp_path / "pids").iterdir())) == 1  # the server saw the secret's value


async def test_literals_and_references_reach_a_real_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mcp-server-time`` names its local time zone in its tools' descriptions: from ``TZ``
    written as a literal, and from ``--local-timezone`` given by a reference in ``args``."""
    monkeypatch.setenv("OTHERONE_TEST_LOCAL_TZ", "America/Sao_Paulo")
    command = str(Path(sys.executable).with_name("mcp-server-time"))
    servers = {
        "oslo": McpServer(name="oslo", command=command, env={"TZ": "Europe/Oslo"}),
        "saopaulo": McpServer(
            name="saopaulo",
            command=command,
            args=("--local-timezone", "${OTHERONE_TEST_LOCAL_TZ}"),
        ),
        "mixed": McpServer(name="mixed", command=command, env={"TZ": "Asia/${OTHERONE_TEST_CITY}"}),
    }
    monkeypatch.setenv("OTHERONE_TEST_CITY", "Tokyo")
    sessions = McpSessions(servers)
    try:
        found = await sessions.discover()
        now = await sessions.call_tool("oslo", "get_current_time", {"timezone": "Europe/Oslo"})
    finally:
        await sessions.aclose()
    for server, zone in (("oslo", "Europe/Oslo"), ("saopaulo", "America/Sao_Paulo")):
        assert found.servers[server].error is None, found.servers[server].error
        schema = found.schemas[f"mcp.{server}.get_current_time"]
        assert f"Use '{zone}' as local timezone" in json.dumps(schema.parameters)
    assert "Asia/Tokyo" in json.dumps(found.schemas["mcp.mixed.get_current_time"].parameters)
    assert now.structured_content is not None
    assert now.structured_content["timezone"] == "Europe/Oslo"
