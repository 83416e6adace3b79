"""MCP servers a run's agent was granted tools of that offered none: the run says so.

A server that cannot start (its command not found, say) or list its tools contributes no tools
to the snapshot new root runs take (`McpServerTools.error`), and fails nothing: the agent runs
without them. Only the worker's log said why, while the run looked fine ("0 tool calls"). Its
`prepare_run` stores one `mcp_unavailable` event per such server (keyed: once per run,
whichever attempt writes it) and puts them in the plan, whence the run's record and result.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from otherone.config import RuntimeSnapshot
from otherone.definitions import AccessPolicy, AgentDefinition
from otherone.mcp_servers import is_glob, mcp_tool_name, parse_mcp_name
from otherone.store.records import EVENT_KEY, event_key

__all__ = ["unavailable_bodies", "unavailable_servers"]


def unavailable_servers(snapshot: RuntimeSnapshot, agent: AgentDefinition) -> dict[str, str]:
    """Server -> why, for each server that offered no tools and some of whose tools both the
    agent's and the runtime's tool policies grant."""
    return {
        name: found.error
        for name, found in sorted(snapshot.mcp_servers.items())
        if found.error is not None
        and _grants(agent.tools, name)
        and _grants(snapshot.policy.tools, name)
    }


def unavailable_bodies(run_id: str, servers: dict[str, str]) -> list[dict[str, Any]]:
    """The run's `mcp_unavailable` events (server, reason), keyed per server."""
    return [
        {
            "type": "mcp_unavailable",
            "server": name,
            "reason": reason,
            EVENT_KEY: event_key(run_id, "mcp_unavailable", name),
        }
        for name, reason in servers.items()
    ]


def _grants(policy: AccessPolicy, server: str) -> bool:
    """Whether ``policy`` lets some tool of ``server`` through. Its tools are unknown (it
    listed none), so by the entries that name the server (``mcp.time.*``,
    ``mcp.time.get_current_time``, ``mcp.t*.*``) or globs any of its tools would match
    (``mcp.*``, ``*``)."""
    if policy.mode == "all":
        return True
    if policy.mode != "allow":
        return False
    return any(_names_server(entry, server) for entry in policy.names)


def _names_server(entry: str, server: str) -> bool:
    parsed = parse_mcp_name(entry)
    if parsed is not None and fnmatchcase(server, parsed[0]):
        return True
    return is_glob(entry) and fnmatchcase(mcp_tool_name(server, "any"), entry)
