"""MCP resources as a run sees them: the frozen list, the built-in tools that read them, the
system-prompt block that lists them (no I/O here: the sessions are in `otherone.activities`).

A server that lists resources (``resources/list``: at least one) gets two tools in the snapshot a
new root run takes, named like its other tools so the same policies grant them:

* ``mcp.<server>.resources.list`` — the server's resources *as listed when the run started*
  (name, uri, description, mime type), answered from the snapshot: a resource list that changes
  mid-run does not change what the run was told (as for tools);
* ``mcp.<server>.resources.read`` ``{"uri": ...}`` — the live content of one resource, read
  on the worker's session to the server (text inline, binary as an artifact).

``mcp.docs.*`` grants them with the server's tools; ``mcp.docs.resources.*`` grants only the
resources; ``mcp.docs.resources.list`` only the list. A server declared with
``resources_in_prompt = true`` also has its list put in the system prompt of every agent that
may read its resources (at most `PROMPT_RESOURCES` entries of at most `PROMPT_FIELD_CHARS`
characters each field, per server).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict

from otherone.mcp_servers import mcp_tool_name

__all__ = [
    "LIST_RESOURCES",
    "MAX_RESOURCES",
    "PROMPT_FIELD_CHARS",
    "PROMPT_RESOURCES",
    "READ_RESOURCE",
    "RESOURCE_TOOLS",
    "McpResource",
    "McpServerResources",
    "resources_prompt_block",
]

#: The tool part of the built-in resource tools' names (``mcp.<server>.resources.read``).
LIST_RESOURCES = "resources.list"
READ_RESOURCE = "resources.read"
#: What `McpToolRef.tool` holds for them: MCP method names, which no MCP tool can be named
#: (a tool name's characters are letters, digits, ``_``, ``-`` and ``.``).
RESOURCE_TOOLS = {LIST_RESOURCES: "resources/list", READ_RESOURCE: "resources/read"}
#: Resources kept per server in a snapshot (a server listing more: the first ones, by uri).
MAX_RESOURCES = 200
#: Resources listed per server in a system prompt, and the length each field is cut to there.
PROMPT_RESOURCES = 50
PROMPT_FIELD_CHARS = 200


class McpResource(BaseModel):
    """One resource as the server listed it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: str
    name: str
    description: str | None = None
    mime_type: str | None = None


class McpServerResources(BaseModel):
    """A server's resources as listed when the snapshot was made, and whether they go in the
    system prompt (``resources_in_prompt``) of agents that may read them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resources: tuple[McpResource, ...] = ()
    in_prompt: bool = False
    #: More resources were listed than `MAX_RESOURCES`: the list is cut.
    truncated: bool = False


def resources_prompt_block(
    servers: Mapping[str, McpServerResources], granted_tools: Iterable[str]
) -> str:
    """The system-prompt block listing the resources of each ``in_prompt`` server whose read
    tool the agent has (``granted_tools``), bounded; empty when there is none."""
    granted = set(granted_tools)
    sections: list[str] = []
    for server, found in sorted(servers.items()):
        read_tool = mcp_tool_name(server, READ_RESOURCE)
        if not found.in_prompt or read_tool not in granted or not found.resources:
            continue
        lines = [f"MCP server '{server}' resources (read one with {read_tool}):"]
        shown = found.resources[:PROMPT_RESOURCES]
        lines += [_line(resource) for resource in shown]
        left = len(found.resources) - len(shown)
        if left > 0 or found.truncated:
            lines.append(f"- ... more: {mcp_tool_name(server, LIST_RESOURCES)} lists them")
        sections.append("\n".join(lines))
    return "\n\n" + "\n\n".join(sections) if sections else ""


def _line(resource: McpResource) -> str:
    line = f"- {_cut(resource.name)} <{_cut(resource.uri)}>"
    if resource.mime_type:
        line += f" ({_cut(resource.mime_type)})"
    if resource.description:
        line += f": {_cut(' '.join(resource.description.split()))}"
    return line


def _cut(text: str) -> str:
    return text if len(text) <= PROMPT_FIELD_CHARS else text[: PROMPT_FIELD_CHARS - 1] + "…"
