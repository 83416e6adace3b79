"""Agents' ``instructions_from`` MCP prompts, fetched for a new root run's snapshot
(`otherone.mcp_prompts`): each distinct (server, prompt, arguments) once, concurrently, within
the server's ``startup_timeout_seconds``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable

from mcp import types as mcp_types
from mcp.shared.exceptions import MCPError

from otherone.activities.mcp_sessions import McpSessions
from otherone.activities.mcp_transports import McpUnavailable
from otherone.definitions import AgentDefinition
from otherone.mcp_prompts import MAX_INSTRUCTIONS_BYTES, McpInstructions, McpPromptRef
from otherone.redaction import redact

__all__ = ["fetch_instructions", "prompt_text"]


async def fetch_instructions(
    sessions: McpSessions, agents: Iterable[AgentDefinition]
) -> dict[str, McpInstructions]:
    """Agent id -> its prompt's text (or why there is none), for agents with one."""
    wanted = {agent.id: agent.instructions_from for agent in agents if agent.instructions_from}
    distinct = sorted({_key(ref): ref for ref in wanted.values() if ref}.items())
    fetched = await asyncio.gather(*(_fetch(sessions, ref) for _, ref in distinct))
    by_key = {key: found for (key, _), found in zip(distinct, fetched, strict=True)}
    return {agent_id: by_key[_key(ref)] for agent_id, ref in sorted(wanted.items()) if ref}


def _key(ref: McpPromptRef) -> str:
    return json.dumps(ref.model_dump(mode="json"), sort_keys=True)


async def _fetch(sessions: McpSessions, ref: McpPromptRef) -> McpInstructions:
    server = sessions.servers.get(ref.server)
    timeout = server.startup_timeout_seconds if server is not None else 30.0
    where = f"MCP prompt '{ref.prompt}' of server '{ref.server}'"
    try:
        async with sessions.using(ref.server) as session:
            result = await asyncio.wait_for(
                session.get_prompt(ref.prompt, dict(ref.arguments)), timeout
            )
    except McpUnavailable as error:
        return McpInstructions(error=f"{where} could not be fetched: {error.reason}")
    except TimeoutError:
        return McpInstructions(error=f"{where} was not fetched within {timeout:g}s")
    except MCPError as error:
        return McpInstructions(error=f"{where} was refused: {redact(str(error))}")
    text = prompt_text(result)
    if not text.strip():
        return McpInstructions(error=f"{where} has no text")
    return McpInstructions(text=text)


def prompt_text(result: mcp_types.GetPromptResult) -> str:
    """The prompt's messages as one text (text blocks and embedded text resources, in order;
    images and other blocks have no place in a system prompt), redacted and bounded."""
    parts: list[str] = []
    for message in result.messages:
        content = message.content
        if isinstance(content, mcp_types.TextContent):
            parts.append(content.text)
        elif isinstance(content, mcp_types.EmbeddedResource) and isinstance(
            content.resource, mcp_types.TextResourceContents
        ):
            parts.append(content.resource.text)
    text = redact("\n\n".join(parts))
    encoded = text.encode()
    if len(encoded) > MAX_INSTRUCTIONS_BYTES:
        text = encoded[:MAX_INSTRUCTIONS_BYTES].decode(errors="ignore")
    return text
