"""Durable sleep: `time.sleep` / `time.wake_at`, a tool the workflow itself answers.

The model asks to pause its run for a duration or until a time. The workflow checks the request
against the run's limits (`max_sleep`, the deadline: a refusal is a tool error the model reads,
with the reason, never the run's end), records `sleep_started` (one short store activity, so
watchers see the run sleeping), then waits on a Temporal timer: no activity runs, no worker
slot is held, and the wait survives worker restarts. A user message wakes it early (it is taken
right after, at the turn's end); a cancellation ends the run as cancellations do. The tool
result says when the run woke and why.

A sleep is neither a model call nor a tool call: it takes no tool-call budget and no fleet
permit. It lasts within one turn, and a run only continues as new between turns, so no sleep is
ever in progress at continue-as-new: nothing about it needs carrying over.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from pydantic import JsonValue, TypeAdapter, ValidationError

    from otherone.config import SLEEP_TOOL, SLEEP_TOOLS, WAKE_AT_TOOL
    from otherone.contracts import (
        ACTIVITY_RECORD_EVENTS,
        STORE_ACTIVITY_TIMEOUT,
        STORE_HEARTBEAT_TIMEOUT,
        STORE_TOTAL_TIMEOUT,
        PendingEntry,
        RecordEventsInput,
        RunPlan,
        RunRef,
        ToolCallSpec,
    )
    from otherone.workflows.outcomes import (
        DecidedEvents,
        invalid_arguments_entry,
        tool_completed_event,
        tool_started_event,
    )

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.activity_options import STORE_RETRY, reraise_cancellation

#: Why a sleep ended, as its tool result and `sleep_ended` event say.
WOKE_BY_TIMER = "timer"
WOKE_BY_MESSAGE = "message"
ENDED_BY_CANCEL = "cancelled"

_DURATION = TypeAdapter(timedelta)


class SleepRefused(Exception):
    """A sleep the run does not take; the message is what the model is told."""


def is_sleep(plan: RunPlan, call: ToolCallSpec) -> bool:
    """Whether the workflow answers ``call`` as a sleep (the tools are offered to this run)."""
    return plan.sleep and call.name in SLEEP_TOOLS


def wake_time(
    call: ToolCallSpec, now: datetime, deadline_at: datetime, max_sleep: timedelta
) -> datetime:
    """When a sleep asked for by ``call`` would end; `SleepRefused` naming the reason when the
    arguments do not say, or it would last longer than ``max_sleep`` or past the deadline."""
    arguments = _arguments(call)
    if call.name == SLEEP_TOOL:
        wake = now + _duration(arguments.get("duration"))
    else:
        wake = _time(arguments.get("time"))
        if wake <= now:
            raise SleepRefused(
                f"time {wake.isoformat()} is not in the future (it is now {now.isoformat()})"
            )
    if wake - now > max_sleep:
        raise SleepRefused(
            f"a sleep of {_span(wake - now)} is longer than max_sleep ({_span(max_sleep)})"
        )
    if wake >= deadline_at:
        raise SleepRefused(
            f"the run's deadline is {deadline_at.isoformat()}: a sleep until "
            f"{wake.isoformat()} would outlive it (sleep for less than {_span(deadline_at - now)})"
        )
    return wake


def _arguments(call: ToolCallSpec) -> dict[str, JsonValue]:
    try:
        parsed = json.loads(call.arguments or "{}")
    except (json.JSONDecodeError, RecursionError):
        raise SleepRefused("arguments: not a JSON object") from None
    if not isinstance(parsed, dict):
        raise SleepRefused("arguments: not a JSON object")
    return parsed


def _duration(value: JsonValue) -> timedelta:
    """Seconds (a number) or an ISO 8601 duration (``PT30M``, ``P1D``)."""
    if value is None:
        raise SleepRefused("duration: required (seconds, or an ISO 8601 duration like PT30M)")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SleepRefused("duration: must be seconds or an ISO 8601 duration like PT30M")
    try:
        duration = _DURATION.validate_python(value)
    except ValidationError:
        raise SleepRefused(
            f"duration: {value!r} is neither seconds nor an ISO 8601 duration (like PT30M)"
        ) from None
    if duration <= timedelta(0):
        raise SleepRefused(f"duration: must be greater than zero (got {value!r})")
    return duration


def _time(value: JsonValue) -> datetime:
    """An ISO 8601 date-time with its offset (``2026-12-08T09:00:00Z``)."""
    if not isinstance(value, str) or not value.strip():
        raise SleepRefused("time: required, an ISO 8601 date-time like 2026-12-08T09:00:00Z")
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise SleepRefused(
            f"time: {value!r} is not an ISO 8601 date-time (like 2026-12-08T09:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        raise SleepRefused(f"time: {value!r} has no timezone offset (add Z or +01:00)")
    return parsed


def _span(span: timedelta) -> str:
    """A readable length of time: ``7 days``, ``1 day, 6:00:00``, ``0:00:30``."""
    seconds = round(span.total_seconds())
    if seconds >= 86400 and seconds % 86400 == 0:
        days = seconds // 86400
        return f"{days} day{'s' if days != 1 else ''}"
    return str(timedelta(seconds=seconds))


class Sleeps:
    """The run's sleeps in progress (several calls of one turn may sleep at once)."""

    def __init__(self, on_change: Callable[[], None], messages_waiting: Callable[[], bool]) -> None:
        #: Call id -> when its sleep ends.
        self.until: dict[str, datetime] = {}
        self._on_change = on_change
        self._messages_waiting = messages_waiting

    @property
    def sleeping(self) -> bool:
        return bool(self.until)

    def details(self) -> str:
        """What sleeps, for the Web UI's "current details" (Markdown)."""
        return "\n\n".join(
            f"**sleeping** until {until.isoformat()} (call `{call_id}`): a user message wakes it"
            for call_id, until in self.until.items()
        )

    async def run_tool(
        self,
        plan: RunPlan,
        ref: RunRef,
        deadline_at: datetime,
        call: ToolCallSpec,
        decided: DecidedEvents,
    ) -> PendingEntry:
        """The call's tool result: a refusal, or when and why the run woke. Raises
        `CancelledError` when the run is cancelled meanwhile (its `sleep_ended` decided)."""
        started = workflow.now()
        try:
            until = wake_time(call, started, deadline_at, plan.limits.max_sleep)
        except SleepRefused as refused:
            return invalid_arguments_entry("", call, str(refused))
        started_events = [tool_started_event(call), _started(call, started, until)]
        await _record(ref, call, started_events, decided)
        self.until[call.id] = until
        self._on_change()
        # No `finally`: on cache eviction the coroutine is closed outside the workflow's
        # event loop, where no status may be set.
        try:
            reason = await self._wait(call, until)
        except asyncio.CancelledError:
            self._awake(call)
            decided.add(_ended(call, ENDED_BY_CANCEL))
            raise
        self._awake(call)
        decided.add(_ended(call, reason), tool_completed_event(call, None))
        return _woke_entry(call, started, reason)

    def _awake(self, call: ToolCallSpec) -> None:
        del self.until[call.id]
        self._on_change()

    async def _wait(self, call: ToolCallSpec, until: datetime) -> str:
        """A durable timer, cut short by a user message (one already waiting too)."""
        left = until - workflow.now()
        if left <= timedelta(0):  # recording the start took that long
            return WOKE_BY_TIMER
        try:
            await workflow.wait_condition(
                self._messages_waiting,
                timeout=left,
                timeout_summary=f"{call.name} until {until.isoformat()}",
            )
        except TimeoutError:
            return WOKE_BY_TIMER
        return WOKE_BY_MESSAGE


async def _record(
    ref: RunRef, call: ToolCallSpec, events: list[dict[str, JsonValue]], decided: DecidedEvents
) -> None:
    """Store the sleep's start now (watchers see the run sleeping). A store that cannot take
    it does not keep the run awake: the events then go with the run's next activity, still
    before the sleep's end."""
    try:
        await workflow.execute_activity(
            ACTIVITY_RECORD_EVENTS,
            RecordEventsInput(ref=ref, events=tuple(events), key=f"sleep:{call.id}"),
            start_to_close_timeout=STORE_ACTIVITY_TIMEOUT,
            schedule_to_close_timeout=STORE_TOTAL_TIMEOUT,
            heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"{call.name} starts",
        )
    except ActivityError as error:
        reraise_cancellation(error)
        workflow.logger.warning("run %s: sleep_started not stored: %s", ref.run_id, error)
        decided.add(*events)


def _started(call: ToolCallSpec, now: datetime, until: datetime) -> dict[str, JsonValue]:
    return {
        "type": "sleep_started",
        "tool_call_id": call.id,
        "tool_name": call.name,
        "until": until.isoformat(),
        "seconds": (until - now).total_seconds(),
    }


def _ended(call: ToolCallSpec, reason: str) -> dict[str, JsonValue]:
    return {
        "type": "sleep_ended",
        "tool_call_id": call.id,
        "tool_name": call.name,
        "reason": reason,
        "at": workflow.now().isoformat(),
    }


def _woke_entry(call: ToolCallSpec, started: datetime, reason: str) -> PendingEntry:
    woke = workflow.now()
    body: dict[str, JsonValue] = {
        "woke_at": woke.isoformat(),
        "slept_seconds": round((woke - started).total_seconds(), 3),
        "reason": reason,
    }
    if reason == WOKE_BY_MESSAGE:
        body["note"] = "a user message arrived; it follows"
    return PendingEntry(
        key="",
        role="tool",
        content=json.dumps(body),
        tool_call_id=call.id,
        tool_name=call.name,
    )


__all__ = [
    "SLEEP_TOOL",
    "WAKE_AT_TOOL",
    "SleepRefused",
    "Sleeps",
    "is_sleep",
    "wake_time",
]
