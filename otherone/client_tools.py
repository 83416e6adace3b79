"""Client tools: tools a front end runs itself (AG-UI's ``RunAgentInput.tools``, CopilotKit's
front-end actions), declared per root run in `AgentRunRequest.client_tools`.

The model sees them beside the agent's own tools. A call to one is not run by a worker: the
run waits for the client's result, durably, exactly as for a `human.ask` question (an
`ApprovalNeed` of kind ``client_tool``: waiting status, no worker slot, its timeout and
approvers rules), and the result the client sends back (``answer``) is the tool result the
model reads, as the client wrote it. Only the root run offers them (children and spawns do not
talk to the front end); a handoff's next agent does, the conversation being the same.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

#: Model providers' tool-name rule (OpenAI, Anthropic): letters, digits, ``_`` and ``-``.
CLIENT_TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
#: Tools one request may declare.
MAX_CLIENT_TOOLS = 64
#: Bytes of one tool's JSON Schema: it travels in every model call of the run.
MAX_PARAMETERS_BYTES = 16 * 1024
_EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


class ClientTool(BaseModel):
    """A tool the client runs: its name, what it does, and its arguments' JSON Schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, StringConstraints(pattern=CLIENT_TOOL_NAME_PATTERN)]
    description: Annotated[str, StringConstraints(max_length=4096)] = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(_EMPTY_OBJECT))

    @field_validator("parameters")
    @classmethod
    def _an_object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type", "object") != "object":
            raise ValueError("must be a JSON Schema of type 'object' (a tool takes an object)")
        if len(json.dumps(value).encode()) > MAX_PARAMETERS_BYTES:
            raise ValueError(f"must be at most {MAX_PARAMETERS_BYTES // 1024} KiB as JSON")
        return value


def check_client_tools(tools: tuple[ClientTool, ...]) -> tuple[ClientTool, ...]:
    """At most `MAX_CLIENT_TOOLS`, each name once."""
    if len(tools) > MAX_CLIENT_TOOLS:
        raise ValueError(f"at most {MAX_CLIENT_TOOLS} client tools")
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ValueError(f"the name {tool.name!r} is declared twice")
        seen.add(tool.name)
    return tools


def client_tool_definitions(tools: tuple[ClientTool, ...], taken: set[str]) -> list[dict[str, Any]]:
    """The model's definitions of ``tools`` (function tools, as the agent's own are given);
    a name the agent's tools already use (``taken``) is left out: the server's tool wins."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or f"{tool.name} (run by the user's app)",
                "parameters": tool.parameters or dict(_EMPTY_OBJECT),
            },
        }
        for tool in tools
        if tool.name not in taken
    ]
