"""MCP resources on the worker: listed at discovery (into the snapshot), read by the built-in
``mcp.<server>.resources.*`` tools (`otherone.mcp_resources`).

A read returns the resource's live contents: text inline (``text``), binary stored as an
artifact of the run's partition and referenced (``artifact_id``), as blocks of tool results
are. Text longer than half the run's ``max_result_bytes`` is stored as an artifact too: a big
document must not end the run the way an oversized tool result does.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp import ClientSession
from mcp import types as mcp_types
from mcp.shared.exceptions import MCPError

from otherone.activities.mcp_results import BlobSaver, decode_blob, validate_arguments
from otherone.config import McpToolRef, ToolSchema
from otherone.mcp_resources import (
    LIST_RESOURCES,
    MAX_RESOURCES,
    READ_RESOURCE,
    RESOURCE_TOOLS,
    McpResource,
    McpServerResources,
)
from otherone.mcp_servers import IDEMPOTENT_MAX_ATTEMPTS, McpServer, mcp_tool_name
from otherone.tools import ToolError

__all__ = ["list_resources", "listed", "read_resource", "read_uri", "resource_tools"]

logger = logging.getLogger(__name__)

#: Pages of a resource list read at most (`MAX_RESOURCES` bounds what is kept anyway).
MAX_RESOURCE_PAGES = 20

_READ_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
    "required": ["uri"],
    "additionalProperties": False,
}
_LIST_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


async def list_resources(session: ClientSession, server: str) -> McpServerResources | None:
    """The server's resources (the first `MAX_RESOURCES` by uri), or None when it offers none
    (no ``resources`` capability, or an empty list: many servers declare the capability with
    nothing in it, and their tools alone are offered). A failing list is logged and counts as
    none: the server's tools are offered all the same."""
    capabilities = session.server_capabilities
    if capabilities is None or capabilities.resources is None:
        return None
    found: list[mcp_types.Resource] = []
    cursor: str | None = None
    try:
        for _ in range(MAX_RESOURCE_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_resources(params=params)
            found.extend(page.resources)
            cursor = page.next_cursor
            if not cursor or len(found) > MAX_RESOURCES:
                break
    except MCPError as error:
        logger.warning("MCP server '%s' did not list its resources: %s", server, error)
        return None
    listed = sorted(
        {
            resource.uri: McpResource(
                uri=resource.uri,
                name=resource.title or resource.name,
                description=resource.description,
                mime_type=resource.mime_type,
            )
            for resource in found
        }.values(),
        key=lambda resource: resource.uri,
    )
    if not listed:
        return None
    return McpServerResources(
        resources=tuple(listed[:MAX_RESOURCES]), truncated=len(listed) > MAX_RESOURCES
    )


def resource_tools(
    server: McpServer, taken: set[str]
) -> tuple[dict[str, ToolSchema], dict[str, McpToolRef]]:
    """The built-in list and read tools of a server with resources; one whose name the server's
    own tools already use (``taken``) is not offered (the server's tool keeps its name)."""
    schemas: dict[str, ToolSchema] = {}
    refs: dict[str, McpToolRef] = {}
    for tool, (parameters, description) in {
        LIST_RESOURCES: (
            _LIST_PARAMETERS,
            f"List the resources of MCP server '{server.name}' (as listed when this run started).",
        ),
        READ_RESOURCE: (
            _READ_PARAMETERS,
            f"Read one resource of MCP server '{server.name}' by its URI (its current content).",
        ),
    }.items():
        name = mcp_tool_name(server.name, tool)
        if name in taken:
            logger.warning(
                "MCP server '%s' has a tool named %r: %s not offered", server.name, tool, name
            )
            continue
        schemas[name] = ToolSchema(
            name=name,
            description=description,
            parameters=parameters,
            timeout_seconds=server.timeout_seconds,
            max_attempts=max(server.attempts, IDEMPOTENT_MAX_ATTEMPTS),  # reads change nothing
        )
        refs[name] = McpToolRef(server=server.name, tool=RESOURCE_TOOLS[tool])
    return schemas, refs


def listed(resources: McpServerResources | None) -> str:
    """The answer of ``resources.list``: the frozen list, as JSON."""
    found = resources or McpServerResources()
    body: dict[str, Any] = {
        "resources": [
            resource.model_dump(mode="json", exclude_none=True) for resource in found.resources
        ]
    }
    if found.truncated:
        body["truncated"] = f"only the first {MAX_RESOURCES} (by uri) are listed"
    return json.dumps(body, ensure_ascii=False)


def read_uri(tool: str, arguments: str) -> str:
    """The ``uri`` argument of a read (ToolError(INVALID_ARGUMENTS) when missing)."""
    data = validate_arguments(tool, _READ_PARAMETERS, arguments)
    uri = data["uri"]
    if not uri.strip():
        raise ToolError.invalid_arguments(f"invalid arguments for tool '{tool}': uri: is blank")
    return str(uri)


async def read_resource(
    session: ClientSession, uri: str, save_blob: BlobSaver, text_limit_bytes: int
) -> str:
    """The resource's contents as the model gets them (JSON); MCPError when the server refuses
    (an unknown uri, say)."""
    result = await session.read_resource(uri)
    contents = [
        await _content(index, content, save_blob, text_limit_bytes)
        for index, content in enumerate(result.contents)
    ]
    return json.dumps({"uri": uri, "contents": contents}, ensure_ascii=False)


async def _content(
    index: int,
    content: mcp_types.TextResourceContents | mcp_types.BlobResourceContents,
    save_blob: BlobSaver,
    text_limit_bytes: int,
) -> dict[str, Any]:
    block: dict[str, Any] = {"uri": content.uri}
    if content.mime_type:
        block["mime_type"] = content.mime_type
    if isinstance(content, mcp_types.TextResourceContents):
        encoded = content.text.encode()
        if len(encoded) <= text_limit_bytes:
            return {**block, "text": content.text}
        media_type = content.mime_type or "text/plain"
        note = f"text of {len(encoded)} bytes, over {text_limit_bytes}: stored as an artifact"
        artifact = await save_blob(f"resource {index}", encoded, media_type)
    else:
        media_type = content.mime_type or "application/octet-stream"
        note = None
        artifact = await save_blob(f"resource {index}", decode_blob(content.blob), media_type)
    block |= {
        "artifact_id": artifact.artifact_id,
        "mime_type": artifact.media_type,
        "size_bytes": artifact.size_bytes,
    }
    return {**block, "note": note} if note else block
