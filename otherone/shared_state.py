"""Shared state: the front end's state (AG-UI's ``RunAgentInput.state``) that a root run's
model reads and may replace.

A request's `AgentRunRequest.shared_state` reaches the model as a system message with the
turn (the state as JSON), and the entry agent is offered `ui.set_state`, a tool the workflow
answers itself: it records the new state as a `state_updated` event, which an AG-UI stream
sends as ``STATE_SNAPSHOT`` (the front end's state becomes it), and tells the model it is
done. The state lives in the front end; the run keeps no copy beyond the transcript and the
event: the next request brings the state as the front end then has it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import JsonValue

#: The tool the model replaces the state with.
SET_STATE_TOOL = "ui.set_state"
#: Bytes of a state as JSON: it travels in the run's input and events.
MAX_STATE_BYTES = 64 * 1024

SET_STATE_DEFINITION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": SET_STATE_TOOL,
        "description": "Replace the application's shared state (shown to you as JSON) with "
        "a new one; the user's app shows it at once. Give the whole new state.",
        "parameters": {
            "type": "object",
            "properties": {"state": {"type": "object", "description": "The new state."}},
            "required": ["state"],
            "additionalProperties": False,
        },
    },
}


def check_state(value: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A state small enough to carry (`MAX_STATE_BYTES`); ValueError otherwise."""
    if len(json.dumps(value, ensure_ascii=False).encode()) > MAX_STATE_BYTES:
        raise ValueError(f"must be at most {MAX_STATE_BYTES // 1024} KiB as JSON")
    return value


def state_message(state: dict[str, JsonValue]) -> str:
    """What the model reads of the state with its turn."""
    shown = json.dumps(state, ensure_ascii=False, sort_keys=True)
    return f"Shared state of the application (JSON; replace it with `{SET_STATE_TOOL}`):\n{shown}"


def new_state(arguments: str) -> dict[str, JsonValue]:
    """The state a `ui.set_state` call gives; ValueError naming what is wrong."""
    try:
        parsed = json.loads(arguments or "{}")
    except (json.JSONDecodeError, RecursionError):
        raise ValueError("arguments are not JSON") from None
    state = parsed.get("state") if isinstance(parsed, dict) else None
    if not isinstance(state, dict):
        raise ValueError("'state' must be an object (the whole new state)")
    return check_state(state)
