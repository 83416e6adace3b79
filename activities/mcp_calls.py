"""One MCP tool call inside the tool activity: validate, call, map, classify.

What the model gets back, by case:

* bad arguments (per the input schema frozen in the run's snapshot) → ``invalid_arguments``,
  the server is not called;
* the server answers ``isError`` or with a JSON-RPC error → ``recoverable`` tool error;
* the call outlives the server's ``timeout_seconds`` → ``timed_out`` (the SDK sends MCP's
  ``notifications/cancelled`` when the wait is abandoned, as it does when the run is cancelled);
* the server cannot be reached or died during the call → a retryable activity failure while
  attempts are left (``max_attempts``: 1 unless the server is idempotent), then a
  ``recoverable`` tool error naming the server. Never fatal: a broken server is the model's
  problem to route around, not the run's end.

Progress notifications of the call become ``tool_progress`` events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from otherone.activities.context import tool_error_content
from otherone.activities.mcp_resource_calls import listed, read_resource, read_uri
from otherone.activities.mcp_results import BlobSaver, error_message, map_result, validate_arguments
from otherone.activities.mcp_sessions import McpSessions, McpUnavailable
from otherone.config import McpToolRef, ToolSchema
from otherone.contracts import ToolCallSpec
from otherone.errors import FailureCode
from otherone.mcp_resources import LIST_RESOURCES, RESOURCE_TOOLS, McpServerResources
from otherone.tools import ToolError, ToolErrorKind

__all__ = ["McpToolCall"]

Emit = Callable[[dict[str, Any]], Awaitable[None]]
Heartbeating = Callable[[], AbstractAsyncContextManager[None]]


class McpToolCall:
    """The MCP part of `run_tool` for one call (the caller stores the result and emits the
    started/completed events, as for every tool)."""

    def __init__(
        self,
        sessions: McpSessions,
        *,
        emit: Emit,
        save_blob: BlobSaver,
        heartbeating: Heartbeating,
    ) -> None:
        self.sessions = sessions
        self.emit = emit
        self.save_blob = save_blob
        self.heartbeating = heartbeating

    async def run(
        self, call: ToolCallSpec, target: McpToolRef, schema: ToolSchema, attempt: int
    ) -> tuple[ToolErrorKind | None, str]:
        """The tool result as ``(error kind or None, JSON content)``; raises to be retried."""
        try:
            arguments = validate_arguments(call.name, schema.parameters, call.arguments)
        except ToolError as error:
            return error.kind, tool_error_content(error.message)
        # The SDK runs each progress callback as a task of its own: one lock keeps their events
        # in order, and taking it after the call lets them all land before `tool_completed`.
        in_order = asyncio.Lock()
        try:
            async with self.heartbeating():
                result = await self.sessions.call_tool(
                    target.server,
                    target.tool,
                    arguments,
                    self._progress(call, in_order),
                    schema.timeout_seconds,
                )
            async with in_order:
                pass
        except TimeoutError:
            message = f"MCP tool '{call.name}' timed out after {schema.timeout_seconds:g}s"
            return ToolErrorKind.TIMED_OUT, tool_error_content(message)
        except McpUnavailable as error:
            return self._unreachable(str(error), attempt, schema.max_attempts)
        except MCPError as error:
            message = f"MCP server '{target.server}' refused the call: {error}"
            return ToolErrorKind.RECOVERABLE, tool_error_content(message)
        except Exception as error:  # e.g. the SDK rejecting a result that breaks its schema
            message = f"MCP tool '{call.name}' failed: {type(error).__name__}: {error}"
            return self._unreachable(message, attempt, schema.max_attempts)
        mapped, is_error = await map_result(result, self.save_blob)
        if is_error:
            return ToolErrorKind.RECOVERABLE, tool_error_content(error_message(mapped))
        return None, json.dumps(mapped, ensure_ascii=False)

    async def run_resources(
        self,
        call: ToolCallSpec,
        target: McpToolRef,
        schema: ToolSchema,
        attempt: int,
        *,
        resources: McpServerResources | None,
        text_limit_bytes: int,
    ) -> tuple[ToolErrorKind | None, str]:
        """A built-in resource tool (`otherone.mcp_resources`): the list frozen in the run's
        snapshot, or one resource's live contents read on the server's session."""
        if target.tool == RESOURCE_TOOLS[LIST_RESOURCES]:
            return None, await self._bounded_list(listed(resources), text_limit_bytes)
        try:
            uri = read_uri(call.name, call.arguments)
        except ToolError as error:
            return error.kind, tool_error_content(error.message)
        try:
            async with self.heartbeating(), self.sessions.using(target.server) as session:
                read = read_resource(session, uri, self.save_blob, text_limit_bytes)
                return None, await asyncio.wait_for(read, schema.timeout_seconds)
        except TimeoutError:
            message = f"reading {uri} timed out after {schema.timeout_seconds:g}s"
            return ToolErrorKind.TIMED_OUT, tool_error_content(message)
        except McpUnavailable as error:
            return self._unreachable(str(error), attempt, schema.max_attempts)
        except MCPError as error:
            message = f"MCP server '{target.server}' could not read {uri}: {error}"
            return ToolErrorKind.RECOVERABLE, tool_error_content(message)
        except Exception as error:
            message = f"reading {uri} failed: {type(error).__name__}: {error}"
            return self._unreachable(message, attempt, schema.max_attempts)

    async def _bounded_list(self, body: str, limit_bytes: int) -> str:
        """A resource list too long to go inline (long descriptions) is stored as an artifact,
        as a big resource is: an oversized tool result would end the run."""
        encoded = body.encode()
        if len(encoded) <= limit_bytes:
            return body
        artifact = await self.save_blob("resource list", encoded, "application/json")
        return json.dumps(
            {
                "artifact_id": artifact.artifact_id,
                "mime_type": artifact.media_type,
                "size_bytes": artifact.size_bytes,
                "note": f"the list is {len(encoded)} bytes, over {limit_bytes}: stored as an "
                "artifact",
            }
        )

    def _progress(self, call: ToolCallSpec, in_order: asyncio.Lock) -> ProgressFnT:
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            event: dict[str, Any] = {
                "type": "tool_progress",
                "tool_call_id": call.id,
                "tool_name": call.name,
                "progress": progress,
            }
            if total is not None:
                event["total"] = total
            if message:
                event["message"] = message
            async with in_order:
                await self.emit(event)

        return progress

    @staticmethod
    def _unreachable(
        message: str, attempt: int, max_attempts: int
    ) -> tuple[ToolErrorKind | None, str]:
        if attempt < max_attempts:
            activity.logger.warning("%s (attempt %d of %d)", message, attempt, max_attempts)
            raise ApplicationError(message, type=FailureCode.TOOL_ERROR.value)
        return ToolErrorKind.RECOVERABLE, tool_error_content(message)
