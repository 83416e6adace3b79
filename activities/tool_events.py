"""The events of a tool call (`tool_started`, `tool_completed`), as the tool activity stores
them, or leaves them to whoever writes an inline result's entry (`deferred_tool_events`).

A successful call's `tool_completed` carries the start of its result (`result`, one line, at
most `RESULT_PREVIEW_CHARS`): people watching a run see what a tool answered without reading
the transcript; the model reads the whole result from the store, as before."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from otherone.contracts import PendingEntry, ToolCallSpec
from otherone.workflows.outcomes import tool_completed_event, tool_started_event

#: Characters of a result `tool_completed` carries (what fits a line of `otherone watch`).
RESULT_PREVIEW_CHARS = 200
#: A result up to this size is decoded before it is cut (a JSON string shows as its text);
#: a larger one is cut as it is, so a preview never parses a megabyte.
_DECODED_BYTES = 64 * 1024


def result_preview(content: str) -> str:
    """The start of a tool's result (JSON, as `run_tool` stores it) on one line."""
    text = content
    if len(content) <= _DECODED_BYTES:
        try:
            value = json.loads(content)
        except (json.JSONDecodeError, RecursionError):
            value = content
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    flat = " ".join(text[: RESULT_PREVIEW_CHARS * 4].split())
    return flat if len(flat) <= RESULT_PREVIEW_CHARS else flat[: RESULT_PREVIEW_CHARS - 1] + "…"


def tool_started_body(call: ToolCallSpec, attempt: int | None = None) -> dict[str, Any]:
    """`tool_started` as the tool activity stores it: with the arguments (cut) and, when the
    activity writes it itself, its attempt (a retry's events then tell the attempts apart)."""
    body = tool_started_event(call)
    return body if attempt is None else {**body, "attempt": attempt}


def tool_completed_body(
    call: ToolCallSpec,
    error: str | None,
    attempt: int | None = None,
    *,
    content: str | None = None,
) -> dict[str, Any]:
    """`tool_completed`; with the start of the result when the call succeeded (``content``)."""
    body = dict(tool_completed_event(call, error))
    if content is not None:
        body["result"] = result_preview(content)
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
        if entry.error_kind is None:
            completed = tool_completed_body(call, None, content=entry.content or "")
        else:
            completed = tool_completed_body(call, result_error(entry.content or ""))
        bodies += [tool_started_body(call), completed]
    return bodies
