"""What the model sees of background agent calls: `agent.spawn`, `agent.await`, `agent.status`
and `agent.cancel` (the workflow runs them: `otherone.workflows.spawns`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otherone.activities.context import agent_call_properties
from otherone.config import (
    AGENT_AWAIT_TOOL,
    AGENT_CANCEL_TOOL,
    AGENT_SPAWN_TOOL,
    AGENT_STATUS_TOOL,
)
from otherone.definitions import AgentDefinition
from otherone.workflows.spawn_arguments import MAX_AWAIT_HANDLES, MAX_AWAIT_SECONDS

_HANDLE = {"type": "string", "description": "A handle returned by agent.spawn."}


def spawn_tool_definitions(
    reachable: list[AgentDefinition], choices: Mapping[str, tuple[str, ...]] | None = None
) -> list[dict[str, Any]]:
    """The four tools, `agent.spawn` listing the same agents (and arguments) as `agent.call`."""
    descriptions = "\n".join(f"- {agent.id}: {agent.description}" for agent in reachable)
    return [
        _function(
            AGENT_SPAWN_TOOL,
            "Start one focused task on another Agent in the background and go on at once; "
            "returns a handle. Collect the result later with agent.await.\n" + descriptions,
            agent_call_properties(reachable, choices),
            required=["agent", "task"],
        ),
        _function(
            AGENT_AWAIT_TOOL,
            "Wait for spawned agents to finish and return their results. Without handles: "
            "every spawned agent whose result was not returned yet. With timeout_seconds: "
            "return after at most that long, listing the agents still running.",
            {
                "handles": {
                    "type": "array",
                    "items": _HANDLE,
                    "minItems": 1,
                    "maxItems": MAX_AWAIT_HANDLES,
                    "uniqueItems": True,
                },
                "timeout_seconds": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": MAX_AWAIT_SECONDS,
                },
            },
        ),
        _function(
            AGENT_STATUS_TOOL,
            "The status of a spawned agent (running, or its result), without waiting.",
            {"handle": _HANDLE},
            required=["handle"],
        ),
        _function(
            AGENT_CANCEL_TOOL,
            "Cancel a spawned agent; returns its result once it has stopped.",
            {"handle": _HANDLE},
            required=["handle"],
        ),
    ]


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str] | None = None
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required or [],
                "additionalProperties": False,
            },
        },
    }
