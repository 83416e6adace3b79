"""``otherone mcp``: ``import`` reads the MCP configurations Claude Desktop, VS Code and Cursor
write (fixtures of each in tests/fixtures/mcp_import/) as our ``[mcp.<server>]`` tables that
load, with every secret of the file made a ``${VAR}`` reference and never printed or written,
and an imported server starts for real with the values it was given; ``list``, ``tools`` and
``call`` check declared servers (real ones: ``mcp-server-time`` and the stdio test server) with
one-line errors when a server does not start, and never print a secret a server echoes."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from otherone.activities.mcp_sessions import McpSessions
from otherone.errors import InvalidRequestError
from otherone.mcp_import import read_client_config, strip_json_comments
from otherone.toml_config import load_config, parse_config
from tests.processes import REPO_ROOT, Completed, otherone

pytestmark = pytest.mark.timeout(120)

FIXTURES = Path(__file__).with_name("fixtures") / "mcp_import"
STDIO_TEST_SERVER = Path(__file__).with_name("mcp_stdio_server.py")
#: Every secret the fixtures hold: none may reach our TOML, stdout or stderr.
FIXTURE_SECRETS = (
    "ghp_FAKEFIXTURE0123456789abcdefABCDEF0123",
    "fixture-pass-1",
    "BSAfixturefixturefixture12",
    "lin_api_fixture0123456789abcdefghijkl",
    "fixture-notion-secret",
    "fixture0123456789abcdef0123",
)


def imported_tables(name: str) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The fixture's tables (as loaded back from the TOML), variables and notes."""
    path = FIXTURES / name
    imported = read_client_config(path.read_text(encoding="utf-8"), name)
    text = imported.toml(name)
    for secret in FIXTURE_SECRETS:
        assert secret not in text
    # What we print loads as configuration (every table validated by our loader).
    config = parse_config(
        {
            **tomllib.loads(text),
            "models": {"demo": {"provider": "scripted", "model": "demo"}},
        },
        source="imported.toml",
        base_dir=Path("/srv"),
    )
    assert sorted(config.mcp_servers) == sorted(tomllib.loads(text)["mcp"])
    variables = {name: variable.where for name, variable in imported.variables.items()}
    return tomllib.loads(text)["mcp"], variables, imported.notes


def test_claude_desktop_literals_stay_and_secrets_become_references() -> None:
    tables, variables, notes = imported_tables("claude_desktop_config.json")
    assert tables == {
        "github": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-github"],
            "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_PERSONAL_ACCESS_TOKEN}"},
        },
        "time-server": {
            "command": "uvx",
            "args": ["mcp-server-time"],
            "env": {"TZ": "Europe/Oslo"},  # a literal, as the client wrote it
        },
        "postgres": {  # a URL with a password is one secret
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-postgres", "${POSTGRES_ARG_2}"],
        },
        "brave-search": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-brave-search"],
            "env": {"BRAVE_API_KEY": "${BRAVE_API_KEY}"},
        },
    }
    assert variables == {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "the value of "
        "mcpServers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN in claude_desktop_config.json",
        "POSTGRES_ARG_2": "the value of mcpServers.postgres.args[2] in claude_desktop_config.json",
        "BRAVE_API_KEY": "the value of mcpServers.brave-search.env.BRAVE_API_KEY in "
        "claude_desktop_config.json",
    }
    assert notes == [
        "mcpServers.Time Server: imported as [mcp.time-server]",
        "mcpServers.old: left out (disabled)",
    ]


def test_vscode_inputs_env_and_workspace_variables_become_references() -> None:
    tables, variables, notes = imported_tables("vscode_mcp.json")
    assert tables == {
        "perplexity": {
            "command": "npx",
            "args": ["-y", "server-perplexity-ask"],
            "env": {
                "PERPLEXITY_API_KEY": "${PERPLEXITY_KEY}",
                "LOG_DIR": "${WORKSPACE_FOLDER}/logs",
            },
        },
        "github": {
            "url": "https://api.githubcopilot.com/mcp/",
            "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
        },
        "fetch": {  # the '//' in a string is not a comment
            "command": "uvx",
            "args": ["mcp-server-fetch", "--user-agent", "https://example.com/bot//v1"],
        },
    }
    assert variables == {
        "PERPLEXITY_KEY": "VS Code input 'perplexity-key': Perplexity API Key",
        "WORKSPACE_FOLDER": "what ${workspaceFolder} stood for in the client",
        "GITHUB_TOKEN": "a worker variable (the file read ${env:GITHUB_TOKEN})",
    }
    assert any("servers.fetch: envFile is not read" in note for note in notes)
    assert any("servers.legacy: left out (SSE transport" in note for note in notes)


def test_cursor_headers_keep_their_scheme_and_flagged_arguments_are_secrets() -> None:
    tables, variables, notes = imported_tables("cursor_mcp.json")
    assert tables == {
        "linear": {
            "url": "https://mcp.linear.app/mcp",
            "headers": {"Authorization": "Bearer ${LINEAR_TOKEN}", "X-Client": "cursor"},
        },
        "notion": {
            "command": "npx",
            "args": ["-y", "@notionhq/notion-mcp-server", "--api-key", "${NOTION_API_KEY}"],
            "env": {"NOTION_VERSION": "2022-06-28", "OPENAPI_MCP_HEADERS": "${NOTION_HEADERS}"},
        },
    }
    assert set(variables) == {"LINEAR_TOKEN", "NOTION_API_KEY", "NOTION_HEADERS"}
    assert variables["LINEAR_TOKEN"] == (
        "the value of the token after 'Bearer ' in mcpServers.linear.headers.Authorization in "
        "cursor_mcp.json"
    )
    # A key in a URL cannot become a header of a server we do not know: left out, said why.
    [keyed] = [note for note in notes if note.startswith("mcpServers.keyed")]
    assert "left out" in keyed and "query parameter api_key" in keyed


def test_same_secret_shares_a_variable_and_different_ones_do_not() -> None:
    token, other = "ghp_" + "a1" * 18, "ghp_" + "b2" * 18
    data = {
        "mcpServers": {
            "one": {"command": "x", "env": {"GITHUB_TOKEN": token}},
            "two": {"command": "x", "env": {"GITHUB_TOKEN": token}},
            "three": {"command": "x", "env": {"GITHUB_TOKEN": other}},
            "four": {"command": "x", "env": {"MODE": "READ_ONLY"}},
            "five": {"command": "x", "args": ["--token=" + other, "--token-file", "/k"]},
        }
    }
    imported = read_client_config(json.dumps(data), "c.json")
    env = {server.name: dict(server.env) for server in imported.servers}
    assert env["one"] == env["two"] == {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}
    assert env["three"] == {"GITHUB_TOKEN": "${THREE_GITHUB_TOKEN}"}
    # Text our loader would take for a variable's name is passed through a variable too.
    assert env["four"] == {"MODE": "${MODE}"}
    five = next(server for server in imported.servers if server.name == "five")
    assert five.args == ("--token=${FIVE_TOKEN}", "--token-file", "/k")
    assert token not in imported.toml("c.json") and other not in imported.toml("c.json")


def test_variables_where_we_read_none_leave_the_server_out_and_values_are_text() -> None:
    data = {
        "servers": {
            "script": {"command": "${workspaceFolder}/run.sh"},
            "remote": {"type": "http", "url": "https://h/${env:TENANT}/mcp"},
            "typed": {"command": "x", "env": {"DEBUG": True, "PORT": 8080}, "args": [1]},
            "ws": {"type": "websocket", "url": "ws://h"},
        }
    }
    imported = read_client_config(json.dumps(data), "mcp.json")
    [typed] = imported.servers
    assert (typed.env, typed.args) == ({"DEBUG": "true", "PORT": "8080"}, ("1",))
    assert imported.notes == [
        "servers.script: left out (command uses a ${...} variable, which otherone resolves only "
        "in env, headers and args: write it out)",
        "servers.remote: left out (url uses a ${...} variable, which otherone resolves only in "
        "env, headers and args: write it out)",
        "servers.ws: left out (type 'websocket' is not stdio or http)",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "c.json is not JSON"),
        ("[]", "c.json is not a JSON object"),
        ('{"other": {}}', "declares no MCP servers: expected an object under 'mcpServers'"),
    ],
)
def test_a_file_that_is_no_mcp_config_is_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        read_client_config(text, "c.json")


def test_json_comments_and_trailing_commas_are_read() -> None:
    text = '{"a": "x // not a comment /* nor this */", // gone\n /* gone */ "b": [1, 2,],}'
    assert json.loads(strip_json_comments(text)) == {
        "a": "x // not a comment /* nor this */",
        "b": [1, 2],
    }


# --------------------------------------------------------------------------- the command


def command_env(tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTHERONE_")}
    return {**env, "PYTHONPATH": str(REPO_ROOT), "OTHERONE_DATA_DIR": str(tmp_path / "data")}


def assert_no_fixture_secret(result: Completed) -> None:
    for secret in FIXTURE_SECRETS:
        assert secret not in result.output, result.describe()


async def test_mcp_import_prints_tables_and_the_variables_to_set(tmp_path: Path) -> None:
    source = FIXTURES / "claude_desktop_config.json"
    result = await otherone("mcp", "import", str(source), env=command_env(tmp_path))
    assert result.code == 0, result.describe()
    assert_no_fixture_secret(result)
    assert tomllib.loads(result.stdout)["mcp"]["github"]["env"] == {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_PERSONAL_ACCESS_TOKEN}"
    }
    assert "set these on the worker" in result.stderr
    assert "  BRAVE_API_KEY  the value of mcpServers.brave-search.env.BRAVE_API_KEY" in (
        result.stderr
    )
    assert "note: mcpServers.old: left out (disabled)" in result.stderr


async def test_mcp_import_writes_a_config_that_loads_and_refuses_a_second_import(
    tmp_path: Path,
) -> None:
    target = tmp_path / "otherone.toml"
    target.write_text('[models.demo]\nprovider = "scripted"\nmodel = "demo"\n', encoding="utf-8")
    env = command_env(tmp_path)
    source = FIXTURES / "cursor_mcp.json"
    first = await otherone("mcp", "import", str(source), "--write", str(target), env=env)
    assert first.code == 0, first.describe()
    assert first.stdout == ""
    assert "wrote 2 MCP server(s) to" in first.stderr and "[mcp.linear], [mcp.notion]" in (
        first.stderr
    )
    assert_no_fixture_secret(first)
    written = target.read_text(encoding="utf-8")
    for secret in FIXTURE_SECRETS:
        assert secret not in written
    config = load_config(target)
    assert config.mcp_servers["linear"].headers["Authorization"] == "Bearer ${LINEAR_TOKEN}"
    assert "models" in tomllib.loads(written)  # appended, not replaced

    again = await otherone("mcp", "import", str(source), "--write", str(target), env=env)
    assert again.code == 2, again.describe()
    assert "already declares [mcp.linear], [mcp.notion]: nothing written" in again.stderr
    assert target.read_text(encoding="utf-8") == written

    bad = tmp_path / "bad.json"
    bad.write_text('{"servers": ', encoding="utf-8")
    refused = await otherone("mcp", "import", str(bad), env=env)
    assert refused.code == 2, refused.describe()
    assert refused.stderr.strip().splitlines()[-1].startswith(f"error: {bad} is not JSON")


# --------------------------------------------------------------------------- real servers


async def test_imported_servers_start_with_their_literals_and_references(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Claude Desktop file for ``mcp-server-time`` (literal ``TZ``) and the stdio test
    server (a token, made ``${VAR}``): written, loaded, started; each got its value."""
    token = "ghp_" + "c3" * 18
    desktop = {
        "mcpServers": {
            "time": {
                "command": str(Path(sys.executable).with_name("mcp-server-time")),
                "env": {"TZ": "Pacific/Auckland"},
            },
            "local": {
                "command": sys.executable,
                "args": [str(STDIO_TEST_SERVER)],
                "env": {"SERVICE_TOKEN": token, "MCP_TEST_DIR": str(tmp_path)},
            },
        }
    }
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps(desktop), encoding="utf-8")
    target = tmp_path / "otherone.toml"
    target.write_text('[models.demo]\nprovider = "scripted"\nmodel = "demo"\n', encoding="utf-8")
    result = await otherone(
        "mcp", "import", str(source), "--write", str(target), env=command_env(tmp_path)
    )
    assert result.code == 0, result.describe()
    assert token not in result.output and token not in target.read_text(encoding="utf-8")
    assert "  SERVICE_TOKEN  the value of mcpServers.local.env.SERVICE_TOKEN" in result.stderr

    monkeypatch.setenv("SERVICE_TOKEN", token)  # as the listed variable says
    config = load_config(target)
    sessions = McpSessions(config.mcp_servers)
    try:
        found = await sessions.discover()
        shown = await sessions.call_tool("local", "show_env", {"name": "SERVICE_TOKEN"})
    finally:
        await sessions.aclose()
    schema = found.schemas["mcp.time.get_current_time"]
    assert "Use 'Pacific/Auckland' as local timezone" in json.dumps(schema.parameters)
    assert shown.structured_content == {"result": f"SERVICE_TOKEN={token}"}


# --------------------------------------------------------------------------- list, tools, call


def declared(tmp_path: Path, servers: str) -> dict[str, str]:
    """An ``otherone.toml`` declaring ``servers``; the environment of a command using it."""
    config = tmp_path / "otherone.toml"
    config.write_text(
        f'[models.demo]\nprovider = "scripted"\nmodel = "demo"\n\n{servers}', encoding="utf-8"
    )
    return {**command_env(tmp_path), "OTHERONE_CONFIG": str(config)}


TIME_SERVER = f"""
[mcp.time]
command = "{Path(sys.executable).with_name("mcp-server-time")}"
env = {{ TZ = "Europe/Oslo" }}
"""


def assert_one_line_error(result: Completed, code: int, text: str) -> None:
    assert result.code == code, result.describe()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.describe()
    assert text in lines[0], result.describe()


async def test_mcp_list_shows_declared_servers_without_starting_them(tmp_path: Path) -> None:
    env = declared(
        tmp_path,
        TIME_SERVER
        + '[mcp.search]\nurl = "https://mcp.example.com/mcp"\n'
        + 'headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }\n',
    )
    listed = await otherone("mcp", "list", env=env)
    assert listed.code == 0, listed.describe()
    assert listed.stdout.splitlines() == [
        f"time  stdio  {Path(sys.executable).with_name('mcp-server-time')}  (env: TZ)",
        "search  streamable_http  https://mcp.example.com/mcp  (headers: Authorization)",
    ]
    as_json = await otherone("mcp", "list", "--json", env=env)
    assert [server["name"] for server in json.loads(as_json.stdout)] == ["time", "search"]


async def test_mcp_tools_lists_them_as_agents_see_them(tmp_path: Path) -> None:
    env = declared(tmp_path, TIME_SERVER)
    listed = await otherone("mcp", "tools", "time", env=env)
    assert listed.code == 0, listed.describe()
    assert "mcp.time.get_current_time  (to providers: mcp__time__get_current_time)" in (
        listed.stdout
    )
    # The literal TZ reached the server: it names it as the local time zone.
    assert "timezone: string (required) - IANA timezone name" in listed.stdout
    assert "Use 'Europe/Oslo' as local timezone" in listed.stdout
    as_json = json.loads((await otherone("mcp", "tools", "time", "--json", env=env)).stdout)
    assert {tool["wire_name"] for tool in as_json} == {
        "mcp__time__convert_time",
        "mcp__time__get_current_time",
    }


async def test_mcp_call_answers_and_says_what_went_wrong(tmp_path: Path) -> None:
    env = declared(
        tmp_path,
        TIME_SERVER
        + '[mcp.broken]\ncommand = "/nonexistent/mcp-server"\n'
        + f'[mcp.unset]\ncommand = "{sys.executable}"\n'
        + 'env = { MCP_TEST_DIR = "${OTHERONE_UNSET_FOR_THIS_TEST}" }\n',
    )
    answer = await otherone(
        "mcp", "call", "time", "get_current_time", '{"timezone": "Asia/Tokyo"}', env=env
    )
    assert answer.code == 0, answer.describe()
    assert json.loads(answer.stdout)["structured_content"]["timezone"] == "Asia/Tokyo"

    for args, code, text in (
        (("call", "time", "get_current_time", '{"tz": 1}'), 2, "'timezone' is a required"),
        (("call", "time", "nope"), 2, "has no tool 'nope' (it offers: convert_time, get_cu"),
        (("call", "time", "get_current_time", "[1]"), 2, "invalid arguments"),
        (("tools", "nosuch"), 2, "no MCP server 'nosuch' in the configuration (declared: "),
        (("tools", "broken"), 4, "its command was not found (/nonexistent/mcp-server)"),
        (("tools", "unset"), 4, "env.MCP_TEST_DIR references ${OTHERONE_UNSET_FOR_THIS_TEST}"),
    ):
        assert_one_line_error(await otherone("mcp", *args, env=env), code, text)
    refused = await otherone(
        "mcp", "call", "time", "get_current_time", '{"timezone": "Mars/Base"}', env=env
    )
    assert refused.code == 1, refused.describe()
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith("error: mcp.time.get_current_time reported an error: ")
    )
    no_config = await otherone("mcp", "list", env={**env, "OTHERONE_CONFIG": str(tmp_path / "x")})
    assert_one_line_error(no_config, 2, "not found")


async def test_mcp_call_never_prints_a_secret_a_server_echoes(tmp_path: Path) -> None:
    secret = "ghp_" + "d4" * 18
    env = declared(
        tmp_path,
        f'[mcp.local]\ncommand = "{sys.executable}"\nargs = ["{STDIO_TEST_SERVER}"]\n'
        + 'env = { SERVICE_TOKEN = "${CLI_SERVICE_TOKEN}", MCP_TEST_DIR = "${CLI_DIR}" }\n',
    )
    env.update(CLI_SERVICE_TOKEN=secret, CLI_DIR=str(tmp_path))
    shown = await otherone("mcp", "call", "local", "show_env", '{"name": "SERVICE_TOKEN"}', env=env)
    assert shown.code == 0, shown.describe()
    assert json.loads(shown.stdout) == {
        "structured_content": {"result": "SERVICE_TOKEN=<redacted>"}
    }
    failed = await otherone(
        "mcp", "call", "local", "fail_env", '{"name": "SERVICE_TOKEN"}', env=env
    )
    assert failed.code == 1, failed.describe()
    assert "debug: SERVICE_TOKEN=<redacted>" in failed.stderr  # the server's own stderr
    assert "cannot use SERVICE_TOKEN=<redacted>" in failed.stderr
    for result in (shown, failed):
        assert secret[:16] not in result.output and secret[-16:] not in result.output
