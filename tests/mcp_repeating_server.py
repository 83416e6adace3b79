"""A stdio MCP server on the SDK's low-level `Server` (FastMCP cannot list a name twice) whose
tool list repeats names: ``same`` twice with one definition (a paging server's overlap),
``clash`` twice with different ones, and ``alone``."""

from __future__ import annotations

import anyio
from mcp import types as mcp_types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


def _tool(name: str, description: str) -> mcp_types.Tool:
    return mcp_types.Tool(name=name, description=description, input_schema=_SCHEMA)


async def _list_tools(context: object, params: object) -> mcp_types.ListToolsResult:
    return mcp_types.ListToolsResult(
        tools=[
            _tool("same", "One tool, listed twice."),
            _tool("clash", "Reverses the text."),
            _tool("alone", "Listed once."),
            _tool("same", "One tool, listed twice."),
            _tool("clash", "Deletes the text."),
        ]
    )


async def _main() -> None:
    server: Server[object] = Server("repeating", on_list_tools=_list_tools)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_main)
