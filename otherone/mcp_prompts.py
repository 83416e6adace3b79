"""MCP prompts as agent instructions (no I/O here: the fetch is in `otherone.activities`).

An agent declared with ``instructions_from = { server = "review", prompt = "reviewer",
arguments = { language = "Python" } }`` gets the text of that server prompt (``prompts/get``)
after its own ``system_prompt``. The prompt is fetched when a new root run's snapshot is made
(with the MCP tool list), and its text is kept in the snapshot: the run, its children, its
later turns and every replay see the same text, while new root runs see a changed prompt. A
prompt that cannot be fetched (the server is down, no such prompt, bad arguments) fails the runs
of that agent at their start with the reason (`McpInstructions.error`): an agent without its
instructions is a different agent, and running it silently would be worse.

Why instructions and not skills: this code base's skills are ``SKILL.md`` files on the worker's
disk, listed by name in the prompt and read by the model from their path; an MCP prompt has
no path to read and is meant to be used as it is, with arguments chosen by whoever configures
the agent, which is what an agent's instructions are.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from otherone.credentials import is_credential_value, looks_like_credential

__all__ = [
    "MAX_INSTRUCTIONS_BYTES",
    "MCP_SERVER_NAME_PATTERN",
    "McpInstructions",
    "McpPromptRef",
]

#: Server names: short, lowercase, no dots (a dot separates server and tool in ``mcp.s.t``).
MCP_SERVER_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
#: A fetched prompt's text is cut to this many bytes (an agent's own ``system_prompt`` has a
#: bound of the same order).
MAX_INSTRUCTIONS_BYTES = 64 * 1024


class McpPromptRef(BaseModel):
    """Which server prompt an agent's instructions come from, with its arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    server: Annotated[str, StringConstraints(pattern=MCP_SERVER_NAME_PATTERN)]
    prompt: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    arguments: Annotated[
        dict[Annotated[str, StringConstraints(min_length=1, max_length=256)], str],
        Field(max_length=64),
    ] = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def _no_secrets(cls, arguments: dict[str, str]) -> dict[str, str]:
        """Arguments are kept in configuration and in every snapshot: never a credential."""
        for name, value in arguments.items():
            if looks_like_credential(value) or is_credential_value(name):
                raise ValueError(
                    f"arguments.{name} looks like a credential (not shown): prompt arguments "
                    "are stored with the run's snapshot, secrets never are"
                )
        return arguments


class McpInstructions(BaseModel):
    """The text an agent's ``instructions_from`` prompt gave for a snapshot, or why none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = ""
    error: str | None = None
