"""The events a workflow decided (`DecidedEvents`: refused tool calls, calls that ended with the
run, ...) as an activity stores them: keyed when the activity may run again whole, and those
marked `IF_MISSING` only while the run's stored events still lack them, a call a person did
not let run as one `tool_denied`; and the `agent_call_completed` events owed for child results
that reached a run inline."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from pydantic import JsonValue

from otherone.activities.lost_attempts import open_tool_attempt_ends, run_events_mentioning
from otherone.config import AGENT_CALL_TOOL
from otherone.contracts import PendingEntry, RunRef, ToolCallSpec
from otherone.store import Store
from otherone.store.records import EVENT_KEY, event_key
from otherone.workflows.approvals import DENIED_ERROR, UNANSWERED_ERROR, UNAPPROVED_ERROR
from otherone.workflows.outcomes import CLOSE_LOST_ATTEMPTS, IF_MISSING

T = TypeVar("T")

#: The `tool_completed` error of a call a person did not let run -> what `tool_denied` says
#: was decided (`otherone.workflows.approvals.denied_entry` writes these errors).
DENIALS = {
    DENIED_ERROR: "denied",
    UNANSWERED_ERROR: "timed_out",
    UNAPPROVED_ERROR: "timed_out",
}


class StoreCall(Protocol):
    """How an activity calls the store (`ActivityContext.io`: in a thread, riding out an
    outage)."""

    def __call__(self, function: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...


async def owed_decided_bodies(
    io: StoreCall,
    store: Store,
    ref: RunRef,
    events: Sequence[Mapping[str, JsonValue]],
    once: str | None,
) -> list[dict[str, Any]]:
    """``events`` to store: each keyed (`EVENT_KEY`) by ``once`` and its position when given,
    those marked `IF_MISSING` only if the run's stored events still lack them (read through
    ``io``, as every other store call: an outage is waited for, not a failed attempt;
    `ActivityContext.decided_bodies`)."""
    bodies = with_denials([dict(event) for event in events])
    if once is not None:
        bodies = [
            {**body, EVENT_KEY: event_key(ref.run_id, once, str(index))}
            for index, body in enumerate(bodies)
        ]
    if any(body.get("type") == CLOSE_LOST_ATTEMPTS for body in bodies):
        bodies = await _with_lost_attempt_ends(io, store, ref, bodies)
    if any(IF_MISSING in body for body in bodies):
        calls = {_event_key(body)[1] for body in bodies if IF_MISSING in body}
        stored = await io(_stored_event_keys, store, ref, calls)
        bodies = [body for body in bodies if _still_owed(body, stored)]
    return bodies


def with_denials(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``bodies`` with each denied call's `tool_started` and `tool_completed` as one
    `tool_denied`: the workflow decides a denial's events as any refused call's (both, side by
    side), but nothing started, and a consumer counting `tool_started` would count it as run.
    Done here rather than in the workflow, so runs already waiting get it too, with no patch;
    deterministic, so every attempt keys the same events the same way."""
    merged: list[dict[str, Any]] = []
    for body in bodies:
        denied = _denial(merged[-1], body) if merged else None
        if denied is None:
            merged.append(body)
        else:
            merged[-1] = denied
    return merged


def _denial(started: Mapping[str, Any], completed: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `tool_denied` of a denied call's two events, else None."""
    decision = DENIALS.get(str(completed.get("error")))
    if (
        decision is None
        or started.get("type") != "tool_started"
        or completed.get("type") != "tool_completed"
        or started.get("tool_call_id") != completed.get("tool_call_id")
    ):
        return None
    return {
        "type": "tool_denied",
        "tool_call_id": started.get("tool_call_id"),
        "tool_name": started.get("tool_name"),
        "arguments": started.get("arguments"),
        "decision": decision,
        "error": completed.get("error"),
    }


async def _with_lost_attempt_ends(
    io: StoreCall, store: Store, ref: RunRef, bodies: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``bodies`` with each `CLOSE_LOST_ATTEMPTS` marker replaced by the ends its call's open
    attempts lack (each keyed by its attempt, as a retry would have stored it)."""
    expanded: list[dict[str, Any]] = []
    for body in bodies:
        if body.get("type") != CLOSE_LOST_ATTEMPTS:
            expanded.append(body)
            continue
        call = ToolCallSpec(
            id=str(body.get("tool_call_id")), name=str(body.get("tool_name")), arguments=""
        )
        stored = await io(run_events_mentioning, store, ref, (call.id,))
        expanded += open_tool_attempt_ends(ref, call, stored)
    return expanded


def _event_key(body: Mapping[str, Any]) -> tuple[str, str]:
    return str(body.get("type")), str(body.get("tool_call_id") or body.get("call_id"))


def _stored_event_keys(store: Store, ref: RunRef, calls: set[str]) -> set[tuple[str, str]]:
    """(type, call id) of the run's stored events about ``calls`` (tool or agent call ids):
    only the events that mention them are read, not the whole tree (a long tree holds every
    delta of every answer)."""
    mentioning = store.read_events_mentioning(ref.root_run_id, sorted(calls))
    return {_event_key(record.event) for record in mentioning if record.run_id == ref.run_id}


def _still_owed(body: dict[str, Any], stored: set[tuple[str, str]]) -> bool:
    """Whether an event must still be stored (and note it as stored): an `IF_MISSING` one only
    while neither the run's stored events nor the events before it in the batch hold it."""
    kind, key = _event_key(body)
    if body.pop(IF_MISSING, None) is None:
        stored.add((kind, key))
        return True
    if (kind, key) in stored:
        return False
    if kind == "agent_call_completed" and ("agent_call_started", key) not in stored:
        return False  # the call was never announced: nothing to end
    stored.add((kind, key))
    return True


def call_completed_events(pending: tuple[PendingEntry, ...]) -> list[dict[str, Any]]:
    """`agent_call_completed` for child results that reached this run inline.

    A child that stores its result for the caller announces the completion itself (see
    `finish_run.announce_to_caller`); a refused call was announced by `prepare_call`. What is
    left are results of children that never stored theirs (runs that began before results went
    by reference, or a child that could not start).
    """
    events: list[dict[str, Any]] = []
    for entry in pending:
        if entry.tool_name != AGENT_CALL_TOOL or entry.tool_result_of is not None:
            continue
        try:
            result = json.loads(entry.content or "")
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict) and "outcome" in result and result.get("run_id"):
            events.append(
                {
                    "type": "agent_call_completed",
                    "call_id": result.get("call_id"),
                    "target": result.get("target"),
                    "outcome": result.get("outcome"),
                    "child_run_id": result.get("run_id"),
                }
            )
    return events
