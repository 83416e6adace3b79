"""``otherone mcp``: the MCP servers of a configuration.

* ``import FILE``: a Claude Desktop / Claude Code / VS Code / Cursor MCP configuration as
  ``[mcp.<server>]`` tables (`otherone.mcp_import`). The tables go to stdout (or into
  ``--write`` FILE); the variables they reference, which the worker needs, and the notes
  (servers left out or renamed) go to stderr. Secrets of the imported file are never printed
  or written: they became ``${VAR}`` references.
* ``list``: the servers ``--config`` declares (nothing is started).
* ``tools SERVER``: start the server as a worker would (its ``${VAR}`` references resolved
  from this process's environment and secrets file) and list its tools as agents see them.
* ``call SERVER TOOL [ARGS]``: one call, to check a server; the result as the model gets it.

Whatever a server prints or returns is redacted of the secrets this process resolved for it,
as on a worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from otherone.client.cli.context import Context
from otherone.client.cli.exits import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
)
from otherone.errors import InvalidRequestError
from otherone.mcp_import import ImportedConfig, read_client_config

if TYPE_CHECKING:
    from otherone.activities.mcp_sessions import Discovery, McpSessions
    from otherone.config import ToolSchema
    from otherone.mcp_servers import McpServer
    from otherone.runs import ArtifactRef


#: Text of a resource longer than this is not printed by ``otherone mcp call`` (as a run
#: would store it as an artifact, half of the default ``max_result_bytes``).
_CLI_TEXT_LIMIT_BYTES = 128 * 1024


async def cmd_mcp(args: argparse.Namespace, ctx: Context) -> int:
    """``mcp import|list|tools|call`` (argparse has refused any other action)."""
    if args.mcp_action == "import":
        return _import(args, ctx)
    servers = _declared_servers(ctx)
    if args.mcp_action == "list":
        return _list(servers, args.json, ctx)
    server = _server(servers, args.server)
    if args.mcp_action == "tools":
        return await _tools(server, args.json, ctx)
    return await _call(server, args.tool, args.arguments, ctx)


def _import(args: argparse.Namespace, ctx: Context) -> int:
    source = "stdin" if args.file == "-" else args.file
    try:
        imported = read_client_config(_read(args.file), source)
    except InvalidRequestError as error:
        raise CliError(EXIT_USAGE, str(error)) from None
    for note in imported.notes:
        ctx.err.print(f"note: {note}", markup=False)
    if not imported.servers:
        raise CliError(EXIT_USAGE, f"no MCP server of {source} could be imported")
    text = imported.toml(source)
    if args.write is None:
        ctx.out.print(text, markup=False, end="")
    else:
        _write(Path(args.write), imported, text)
        ctx.err.print(
            f"wrote {len(imported.servers)} MCP server(s) to {args.write}: "
            + ", ".join(f"[mcp.{server.name}]" for server in imported.servers),
            markup=False,
        )
    if imported.variables:
        ctx.err.print(
            "set these on the worker (environment variables or entries of its secrets file, "
            "OTHERONE_SECRETS_FILE) before it starts:",
            markup=False,
        )
        for variable in sorted(imported.variables.values(), key=lambda found: found.name):
            ctx.err.print(f"  {variable.name}  {variable.where}", markup=False)
    return EXIT_OK


def _read(file: str) -> str:
    if file == "-":
        return sys.stdin.read()
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(EXIT_USAGE, f"cannot read {file}: {error}") from None


def _write(path: Path, imported: ImportedConfig, text: str) -> None:
    """Append the tables to ``path`` (created if missing), refusing a server it declares."""
    existing = ""
    if path.exists():
        try:
            existing = path.read_text(encoding="utf-8")
            declared = tomllib.loads(existing).get("mcp", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
            raise CliError(EXIT_USAGE, f"cannot add to {path}: {error}") from None
        taken = sorted(server.name for server in imported.servers if server.name in declared)
        if taken:
            raise CliError(
                EXIT_USAGE,
                f"{path} already declares {', '.join(f'[mcp.{name}]' for name in taken)}: "
                "nothing written (remove those tables, or print with no --write and merge)",
            )
    separator = "\n" if existing and not existing.endswith("\n\n") else ""
    if existing and not existing.endswith("\n"):
        separator = "\n\n"
    try:
        with path.open("a", encoding="utf-8") as file:
            file.write(separator + text)
    except OSError as error:
        raise CliError(EXIT_USAGE, f"cannot write {path}: {error}") from None


# --------------------------------------------------------------------------- list, tools, call


def _declared_servers(ctx: Context) -> dict[str, McpServer]:
    from otherone.toml_config import load_config

    path = ctx.settings.config
    if not path.is_file():
        raise CliError(EXIT_USAGE, f"config file {path} not found (--config / OTHERONE_CONFIG)")
    return load_config(path).mcp_servers


def _server(servers: dict[str, McpServer], name: str) -> McpServer:
    if name not in servers:
        declared = ", ".join(sorted(servers)) or "none"
        raise CliError(
            EXIT_USAGE, f"no MCP server '{name}' in the configuration (declared: {declared})"
        )
    return servers[name]


def _list(servers: dict[str, McpServer], as_json: bool, ctx: Context) -> int:
    if as_json:
        shown = [server.model_dump(mode="json") for server in servers.values()]
        ctx.out.print(json.dumps(shown, indent=2), markup=False)
        return EXIT_OK
    if not servers:
        ctx.err.print("no MCP servers declared", markup=False)
    for server in servers.values():
        target = " ".join([server.command or "", *server.args]) if server.command else server.url
        names = [f"env: {', '.join(server.env)}"] if server.env else []
        headers = [*server.headers, *server.headers_env]
        names += [f"headers: {', '.join(headers)}"] if headers else []
        extra = f"  ({'; '.join(names)})" if names else ""
        ctx.out.print(f"{server.name}  {server.transport}  {target}{extra}", markup=False)
    return EXIT_OK


async def _tools(server: McpServer, as_json: bool, ctx: Context) -> int:
    from otherone.wire_names import encode_tool_name

    schemas = await _listed(server)
    if as_json:
        shown = [
            {**schema.model_dump(mode="json"), "wire_name": encode_tool_name(schema.name)}
            for schema in schemas.values()
        ]
        ctx.out.print(_redacted(json.dumps(shown, indent=2, ensure_ascii=False)), markup=False)
        return EXIT_OK
    for schema in schemas.values():
        lines = [f"{schema.name}  (to providers: {encode_tool_name(schema.name)})"]
        if schema.description:
            lines.append(f"  {schema.description.strip()}")
        lines += [f"  {line}" for line in _parameter_lines(schema.parameters)]
        ctx.out.print(_redacted("\n".join(lines)), markup=False)
    if not schemas:
        ctx.err.print(f"MCP server '{server.name}' offers no tools", markup=False)
    return EXIT_OK


async def _call(server: McpServer, tool: str, arguments: str, ctx: Context) -> int:
    from otherone.activities.mcp_results import error_message, map_result, validate_arguments
    from otherone.activities.mcp_transports import McpUnavailable
    from otherone.mcp_resources import RESOURCE_TOOLS
    from otherone.mcp_servers import mcp_tool_name
    from otherone.tools.errors import ToolError

    name = mcp_tool_name(server.name, tool)
    sessions = _sessions(server)
    try:
        found = await _discovered(server, sessions)
        schemas = found.schemas
        if name not in schemas:
            prefix = mcp_tool_name(server.name, "")
            offered = ", ".join(sorted(schema.removeprefix(prefix) for schema in schemas))
            raise CliError(
                EXIT_USAGE,
                f"MCP server '{server.name}' has no tool '{tool}' (it offers: {offered})",
            )
        try:
            checked = validate_arguments(name, schemas[name].parameters, arguments)
        except ToolError as error:
            raise CliError(EXIT_USAGE, _redacted(str(error))) from None
        if found.refs[name].tool in RESOURCE_TOOLS.values():
            shown = await _resource_call(server, sessions, found, name, arguments)
            ctx.out.print(_redacted(shown), markup=False)
            return EXIT_OK
        try:
            result = await sessions.call_tool(
                server.name, tool, checked, timeout_seconds=server.timeout_seconds
            )
        except McpUnavailable as error:
            raise CliError(EXIT_UNAVAILABLE, _redacted(str(error))) from None
        except TimeoutError:
            raise CliError(
                EXIT_FAILED, f"{name} did not answer within {server.timeout_seconds:g}s"
            ) from None
        mapped, is_error = await map_result(result, _not_stored)
    finally:
        await sessions.aclose()
    if is_error:
        raise CliError(EXIT_FAILED, _redacted(f"{name} reported an error: {error_message(mapped)}"))
    ctx.out.print(_redacted(json.dumps(mapped, indent=2, ensure_ascii=False)), markup=False)
    return EXIT_OK


async def _resource_call(
    server: McpServer, sessions: McpSessions, found: Discovery, name: str, arguments: str
) -> str:
    """A built-in resource tool (`otherone.mcp_resources`), as a run would answer it."""
    from mcp.shared.exceptions import MCPError

    from otherone.activities.mcp_resource_calls import listed, read_resource, read_uri
    from otherone.activities.mcp_transports import McpUnavailable
    from otherone.mcp_resources import LIST_RESOURCES, RESOURCE_TOOLS
    from otherone.tools.errors import ToolError

    if found.refs[name].tool == RESOURCE_TOOLS[LIST_RESOURCES]:
        return json.dumps(json.loads(listed(found.resources.get(server.name))), indent=2)
    try:
        uri = read_uri(name, arguments)
    except ToolError as error:
        raise CliError(EXIT_USAGE, _redacted(str(error))) from None
    try:
        async with sessions.using(server.name) as session:
            read = read_resource(session, uri, _not_stored, _CLI_TEXT_LIMIT_BYTES)
            text = await asyncio.wait_for(read, server.timeout_seconds)
    except McpUnavailable as error:
        raise CliError(EXIT_UNAVAILABLE, _redacted(str(error))) from None
    except TimeoutError:
        raise CliError(
            EXIT_FAILED, f"{name} did not answer within {server.timeout_seconds:g}s"
        ) from None
    except MCPError as error:
        raise CliError(EXIT_FAILED, _redacted(f"{name}: could not read {uri}: {error}")) from None
    return json.dumps(json.loads(text), indent=2, ensure_ascii=False)


def _sessions(server: McpServer) -> McpSessions:
    from otherone.activities import mcp_sessions
    from otherone.redaction import install_log_redaction

    install_log_redaction()  # the SDK's and our log lines, as on a worker
    # A worker warns that a failing server's tools are not offered to new runs; here the
    # failure is the command's one-line error.
    mcp_sessions.logger.setLevel(logging.ERROR)
    return mcp_sessions.McpSessions({server.name: server})


async def _listed(server: McpServer, sessions: McpSessions | None = None) -> dict[str, ToolSchema]:
    """The server's tools as a new run's snapshot would hold them; a server that does not
    start (or list its tools) is an error naming the reason."""
    return dict(sorted((await _discovered(server, sessions)).schemas.items()))


async def _discovered(server: McpServer, sessions: McpSessions | None = None) -> Discovery:
    own = sessions is None
    sessions = _sessions(server) if sessions is None else sessions
    try:
        found = await sessions.discover()
    finally:
        if own:
            await sessions.aclose()
    error = found.servers[server.name].error
    if error is not None:
        raise CliError(
            EXIT_UNAVAILABLE, _redacted(f"MCP server '{server.name}' is unavailable: {error}")
        )
    return found


def _parameter_lines(parameters: dict[str, Any]) -> list[str]:
    """``name: type (required) - description`` per property of a tool's input schema."""
    properties = parameters.get("properties")
    if not isinstance(properties, dict):
        return []
    required = set(parameters.get("required") or [])
    lines = []
    for key, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type", "any")
        flag = " (required)" if key in required else ""
        description = f" - {spec['description']}" if spec.get("description") else ""
        lines.append(f"{key}: {kind}{flag}{description}")
    return lines


async def _not_stored(name: str, data: bytes, media_type: str) -> ArtifactRef:
    """Binary results are not kept by a one-off call: said in place of the artifact id."""
    from otherone.runs import ArtifactRef

    return ArtifactRef(
        artifact_id="(not stored by otherone mcp call)",
        partition_key="",
        name=name,
        media_type=media_type,
        size_bytes=len(data),
    )


def _redacted(text: str) -> str:
    from otherone.redaction import redact

    return redact(text)
