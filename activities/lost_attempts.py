"""Ends for attempts a killed worker left open.

A model or tool attempt whose worker dies (SIGKILL, power loss) has stored its `model_started`
or `tool_started` but never its end; Temporal runs the next attempt elsewhere. That attempt
first stores the missing ends (`model_completed` / `tool_completed` with `LOST_ATTEMPT` as the
error), so that every start in the run's events keeps exactly one end (README "Events pair
up"). A failed or cancelled attempt stores its own end as before.

Only attempts after the first look (a first attempt has nothing before it), and they read only
the run's events that mention the turn's model events or the tool call (the database filters
the text), so the usual path costs nothing. The ends of earlier attempts are keyed by run, call
and attempt, as each attempt's own error end is: when an attempt Temporal gave up on was still
alive after all (a stalled worker) and ends itself late, one of the two ends is stored, not both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from otherone.contracts import EventRecord, RunRef, ToolCallSpec
from otherone.store import Store
from otherone.store.records import EVENT_KEY, event_key

if TYPE_CHECKING:  # shared imports this module's callers (`decided_events`)
    from otherone.activities.shared import ActivityContext

#: The error of an attempt that never reported its end (its worker stopped).
LOST_ATTEMPT = (
    "attempt lost: it ended without storing its end (its worker stopped, or the store could "
    "not be reached)"
)
MODEL_EVENT_TYPES = ("model_started", "model_completed")


def model_completed_key(ref: RunRef, turn: int, attempt: int) -> dict[str, str]:
    """The key of an attempt's `model_completed` stored on an error path."""
    return {EVENT_KEY: event_key(ref.run_id, "model_completed", str(turn), str(attempt))}


def tool_completed_key(ref: RunRef, call: ToolCallSpec, attempt: int) -> dict[str, str]:
    """The key of an attempt's `tool_completed` stored on an error path."""
    return {EVENT_KEY: event_key(ref.run_id, "tool_completed", call.id, str(attempt))}


async def lost_model_attempts(
    context: ActivityContext, ref: RunRef, turn: int, attempt: int
) -> list[dict[str, Any]]:
    """`model_completed` for the earlier attempts of ``turn`` that started and never ended."""
    if attempt <= 1:
        return []
    return await _model_ends(context, ref, lambda lost: lost[0] == turn and lost[1] < attempt)


async def lost_model_attempts_at_end(context: ActivityContext, ref: RunRef) -> list[dict[str, Any]]:
    """`model_completed` for every attempt of the run that started and never ended: a run that
    ends otherwise than completed may end while an attempt's worker is dead and before any retry
    (a cancellation, the deadline, the last attempt lost)."""
    return await _model_ends(context, ref, lambda _: True)


async def _model_ends(
    context: ActivityContext, ref: RunRef, wanted: Callable[[tuple[int, int]], bool]
) -> list[dict[str, Any]]:
    """A `model_completed` for each open attempt (turn, attempt) of the run ``wanted``."""
    bodies = await context.io(run_events_mentioning, context.store, ref, MODEL_EVENT_TYPES)
    turn_attempt = ("turn", "attempt")
    return [
        {
            "type": "model_completed",
            "turn": turn,
            "attempt": attempt,
            "error": LOST_ATTEMPT,
            **model_completed_key(ref, turn, attempt),
        }
        for turn, attempt in _open(bodies, "model_started", "model_completed", turn_attempt)
        if wanted((turn, attempt))
    ]


async def lost_tool_attempts(
    context: ActivityContext, ref: RunRef, call: ToolCallSpec, attempt: int
) -> list[dict[str, Any]]:
    """`tool_completed` for the earlier attempts of ``call`` that started and never ended."""
    if attempt <= 1:
        return []
    bodies = await context.io(run_events_mentioning, context.store, ref, (call.id,))
    return open_tool_attempt_ends(ref, call, bodies, before=attempt)


def open_tool_attempt_ends(
    ref: RunRef, call: ToolCallSpec, bodies: list[dict[str, Any]], *, before: int | None = None
) -> list[dict[str, Any]]:
    """`tool_completed` for the attempts of ``call`` (``before`` one, if given) that started
    and never ended, among the run's event ``bodies``."""
    mine = [body for body in bodies if body.get("tool_call_id") == call.id]
    return [
        {
            "type": "tool_completed",
            "tool_call_id": call.id,
            "tool_name": call.name,
            "attempt": lost,
            "error": LOST_ATTEMPT,
            **tool_completed_key(ref, call, lost),
        }
        for (lost,) in _open(mine, "tool_started", "tool_completed", ("attempt",))
        if before is None or lost < before
    ]


def run_events_mentioning(store: Store, ref: RunRef, values: Iterable[str]) -> list[dict[str, Any]]:
    """The bodies of ``ref``'s own events (not its tree's) that mention one of ``values``."""
    found: list[EventRecord] = store.read_events_mentioning(ref.root_run_id, list(values))
    return [record.event for record in found if record.run_id == ref.run_id]


def _open(
    bodies: list[dict[str, Any]], started: str, ended: str, fields: tuple[str, ...]
) -> list[tuple[int, ...]]:
    """The ``fields`` (positive integers: turn, attempt) of the ``started`` events without an
    ``ended`` event of the same ``fields``, in order."""

    def numbers(body: dict[str, Any]) -> tuple[int, ...] | None:
        values = [value for name in fields if isinstance(value := body.get(name), int)]
        if len(values) == len(fields) and all(value > 0 for value in values):
            return tuple(values)
        return None  # events written before attempts were numbered, or by the workflow

    opened = {numbers(body) for body in bodies if body.get("type") == started}
    closed = {numbers(body) for body in bodies if body.get("type") == ended}
    return sorted(found for found in opened - closed if found is not None)
