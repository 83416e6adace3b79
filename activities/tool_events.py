"""The events of a tool call (`tool_started`, `tool_completed`), as the tool activity stores
them, or leaves them to whoever writes an inline result's entry (`deferred_tool_events`)."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from otherone.contracts import PendingEntry, ToolCallSpec
from otherone.workflows.outcomes import tool_completed_event, tool_started_event


def tool_started_body(call: ToolCallSpec, attempt: int | None = None) -> dict[str, Any]:
    """`tool_started` as the tool activity stores it: with the arguments (cut) and, when the
    activity writes it itself, its attempt (a retry's events then tell the attempts apart)."""
    body = tool_started_event(call)
    return body if attempt is None else {**body, "attempt": attempt}


def tool_completed_body(
    call: ToolCallSpec, error: str | None, attempt: int | None = None
) -> dict[str, Any]:
    body = dict(tool_completed_event(call, error))
    return body if attempt is None else {**body, "attempt": attempt}


def result_error(content: str) -> str | None:
    """The message of a classified tool error's content (``{"error": …}``)."""
    error = json.loads(content).get("error")
    return error if isinstance(error, str) else None


def deferred_tool_events(
    pending: Sequence[PendingEntry], written: Collection[str]
) -> list[dict[str, Any]]:
    """`tool_started` and `tool_completed` of the inline tool results among ``pending`` whose
    entries were ``written`` (keys) just now: the events their tool activity left to whoever
    writes the entry (`ToolOutcome.content`), as it would have stored them."""
    bodies: list[dict[str, Any]] = []
    for entry in pending:
        if entry.tool_arguments is None or entry.key not in written:
            continue
        call = ToolCallSpec(
            id=entry.tool_call_id or "", name=entry.tool_name or "", arguments=entry.tool_arguments
        )
        error = result_error(entry.content or "") if entry.error_kind is not None else None
        bodies += [tool_started_body(call), tool_completed_body(call, error)]
    return bodies
