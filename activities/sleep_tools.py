"""Durable sleep on the worker side: the `time.sleep` / `time.wake_at` definitions the model is
offered, and the activity that stores the events a workflow decided now (`sleep_started`).

The sleep itself is the workflow's (`otherone.workflows.sleeps`): a timer, no activity.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otherone.config import SLEEP_TOOL, WAKE_AT_TOOL, RuntimeSnapshot
from otherone.contracts import RecordEventsInput
from otherone.definitions import AgentDefinition

if TYPE_CHECKING:
    from otherone.activities.shared import ActivityContext

_LIMITS = (
    "At most max_sleep at a time, and never past the run's deadline: a sleep that would be "
    "longer is refused with the reason. A user message wakes the run early. The result says "
    "when the run woke and why (reason: timer or message)."
)

SLEEP_DEFINITION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": SLEEP_TOOL,
        "description": "Pause this run for a while (e.g. to check something again later); "
        "nothing runs meanwhile. " + _LIMITS,
        "parameters": {
            "type": "object",
            "properties": {
                "duration": {
                    "type": ["number", "string"],
                    "description": "Seconds, or an ISO 8601 duration (PT30M, P1D).",
                },
            },
            "required": ["duration"],
            "additionalProperties": False,
        },
    },
}

WAKE_AT_DEFINITION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": WAKE_AT_TOOL,
        "description": "Pause this run until a given time; nothing runs meanwhile. " + _LIMITS,
        "parameters": {
            "type": "object",
            "properties": {
                "time": {
                    "type": "string",
                    "description": "ISO 8601 date-time with its offset (2026-12-08T09:00:00Z).",
                },
            },
            "required": ["time"],
            "additionalProperties": False,
        },
    },
}


def sleep_tools(snapshot: RuntimeSnapshot, agent: AgentDefinition) -> list[dict[str, Any]]:
    """`time.sleep` and `time.wake_at` when the agent asks for them and the policy allows it."""
    return [SLEEP_DEFINITION, WAKE_AT_DEFINITION] if snapshot.may_sleep(agent) else []


async def record_events(context: ActivityContext, input: RecordEventsInput) -> None:
    """Store ``input.events`` (keyed: a retried attempt stores them once), as the run's event
    visibility lets them through."""
    bodies = await context.decided_bodies(input.ref, input.events, once=input.key)
    visible = context.with_lost_marker(input.ref, context.visible(input.ref, bodies))
    await context.brief_io(context.store.append_events, input.ref, visible)
