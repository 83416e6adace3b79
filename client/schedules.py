"""Schedules: agent runs that Temporal starts on a calendar or at an interval (issue 47).

A schedule is a Temporal Schedule (the Web UI's Schedules page shows it) whose action starts an
`AgentRunWorkflow` root with a fixed request; each firing is a root run of its own, under the
schedule's id followed by the firing's time (Temporal's rule), e.g.
``nightly.acme-2026-12-08T02:00:00Z``. Names live in a partition (a tenant's ``nightly`` is not
another's): the schedule's id is ``NAME.PARTITION`` (a name has no ``.``), its partition is a
search attribute and in its memo, and a scoped `Schedules` sees only its own.

What `otherone schedule ...` and ``/v1/schedules`` (tenant-scoped) use; overlap policy and
catch-up window are Temporal's (README "Schedules").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleListDescription,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from otherone import search_attributes as attrs
from otherone.client.request_checks import check_against_config, check_input_size
from otherone.client.root_starts import root_search_attributes, start_summary
from otherone.config import RuntimeConfig
from otherone.errors import InvalidRequestError, ScheduleExistsError, ScheduleNotFoundError
from otherone.partitions import DEFAULT_PARTITION
from otherone.result_contracts import check_contract
from otherone.run_types import PositiveDuration
from otherone.runs import AgentRunRequest
from otherone.workflow_names import WORKFLOW_NAME

SCHEDULE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
#: The memo key that marks a schedule as ours (others in the namespace are left alone).
MEMO_KEY = "otherone_schedule"
Overlap = Literal[
    "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all"
]
_OVERLAP = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE,
    "buffer_all": ScheduleOverlapPolicy.BUFFER_ALL,
    "cancel_other": ScheduleOverlapPolicy.CANCEL_OTHER,
    "terminate_other": ScheduleOverlapPolicy.TERMINATE_OTHER,
    "allow_all": ScheduleOverlapPolicy.ALLOW_ALL,
}
#: Temporal's shortest catch-up window.
MIN_CATCHUP = timedelta(seconds=10)


class ScheduleRequest(BaseModel):
    """A schedule to create: its name, the request each firing runs, and when it fires."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, StringConstraints(pattern=SCHEDULE_NAME_PATTERN)] = Field(
        description="Lower-case letters, digits, _ and -, up to 63 (unique in the partition)."
    )
    request: AgentRunRequest = Field(
        description="What each firing runs (no idempotency_key: every firing is a new run; "
        "session.session_id: every firing a turn of that one conversation)."
    )
    cron: tuple[Annotated[str, StringConstraints(min_length=1, max_length=200)], ...] = Field(
        (),
        description="Cron expressions, UTC (5 fields; 7 with seconds first and a year last).",
    )
    every: PositiveDuration | None = Field(None, description="An interval instead (>= 1 s).")
    overlap: Overlap = Field(
        "skip", description="When a firing comes while the last one still runs (Temporal's)."
    )
    catchup_window: PositiveDuration = Field(
        timedelta(minutes=1),
        description="How late a missed firing (server down) may still start (>= 10 s).",
    )
    paused: bool = False
    note: Annotated[str, StringConstraints(max_length=1000)] | None = None

    @model_validator(mode="after")
    def _one_timing(self) -> Self:
        if bool(self.cron) == (self.every is not None):
            raise ValueError("give cron or every (one of them)")
        if self.every is not None and self.every < timedelta(seconds=1):
            raise ValueError("every: at least 1 second")
        if self.catchup_window < MIN_CATCHUP:
            raise ValueError("catchup_window: at least 10 seconds (Temporal's shortest)")
        if self.request.idempotency_key is not None:
            raise ValueError("request.idempotency_key: a schedule's firings are new runs each")
        return self


class ScheduledRun(BaseModel):
    run_id: str
    started_at: datetime


class ScheduleView(BaseModel):
    """A schedule as `list` and `show` tell it."""

    name: str
    partition_key: str
    entry_agent: str
    summary: str
    cron: list[str]
    every: timedelta | None
    #: None in a list (Temporal's list answer leaves the policy out).
    overlap: Overlap | None
    catchup_window: timedelta | None
    paused: bool
    note: str | None
    next_runs: list[datetime] = []
    recent_runs: list[ScheduledRun] = []


class Schedules:
    """The schedules of one partition (``partition_key``; a scoped client, e.g. an API token's,
    sees no other)."""

    def __init__(
        self,
        temporal: Client,
        *,
        task_queue: str,
        partition_key: str = DEFAULT_PARTITION,
        config: RuntimeConfig | None = None,
    ) -> None:
        self.temporal = temporal
        self.task_queue = task_queue
        self.partition_key = partition_key
        self.config = config

    def schedule_id(self, name: str) -> str:
        if not re.fullmatch(SCHEDULE_NAME_PATTERN, name):
            raise ScheduleNotFoundError(name)  # no schedule could have that name
        return f"{name}.{self.partition_key}"

    async def create(self, schedule: ScheduleRequest) -> ScheduleView:
        """Create it (`ScheduleExistsError` if the name is taken in the partition); a cron
        expression Temporal cannot read is `InvalidRequestError` naming ``cron``."""
        request = self._checked(schedule.request)
        schedule_id = self.schedule_id(schedule.name)
        action = ScheduleActionStartWorkflow(
            WORKFLOW_NAME,
            # Without run_id / root_run_id: each firing's run takes its workflow id (the
            # schedule's id and the firing's time), which one fixed input cannot name.
            {"request": request.model_dump(mode="json", exclude_none=True)},
            id=schedule_id,
            task_queue=self.task_queue,
            typed_search_attributes=root_search_attributes(request),
            static_summary=f"{start_summary(request)} (schedule {schedule.name})",
        )
        spec = ScheduleSpec(
            cron_expressions=list(schedule.cron),
            intervals=[ScheduleIntervalSpec(every=schedule.every)] if schedule.every else [],
        )
        policy = SchedulePolicy(
            overlap=_OVERLAP[schedule.overlap], catchup_window=schedule.catchup_window
        )
        state = ScheduleState(paused=schedule.paused, note=schedule.note)
        memo = {
            MEMO_KEY: {
                "name": schedule.name,
                "partition_key": self.partition_key,
                "entry_agent": request.entry_agent,
                "summary": start_summary(request),
                # Temporal keeps cron strings as calendars: its description has no text of them.
                "cron": list(schedule.cron),
            }
        }
        partition = TypedSearchAttributes(
            [SearchAttributePair(attrs.PARTITION, self.partition_key)]
        )
        try:
            handle = await self.temporal.create_schedule(
                schedule_id,
                Schedule(action=action, spec=spec, policy=policy, state=state),
                memo=memo,
                search_attributes=partition,
            )
        except ScheduleAlreadyRunningError:
            raise ScheduleExistsError(schedule.name) from None
        except RPCError as error:
            if error.status == RPCStatusCode.INVALID_ARGUMENT and "spec" in error.message:
                field = "cron" if schedule.cron else "every"
                raise InvalidRequestError(error.message, field=field) from None
            raise
        return _view(schedule.name, self.partition_key, await handle.describe(), memo[MEMO_KEY])

    def _checked(self, request: AgentRunRequest) -> AgentRunRequest:
        partition = request.runtime_context.partition_key
        if partition != self.partition_key:
            raise InvalidRequestError(
                f"this client's schedules are partition '{self.partition_key}''s",
                field="request.runtime_context.partition_key",
            )
        check_contract(request.result_contract)
        check_input_size(request)
        check_against_config(request, self.config)
        return request

    async def list(self) -> list[ScheduleView]:
        """The partition's schedules, by name (Temporal's list is eventually consistent: a
        schedule created a moment ago may be missing from it for a second)."""
        views: list[ScheduleView] = []
        async for listed in await self.temporal.list_schedules():
            memo = await self._ours(listed.id, listed)
            if memo is not None:
                views.append(_listed_view(memo, listed))
        return sorted(views, key=lambda view: view.name)

    async def _ours(
        self, schedule_id: str, found: ScheduleListDescription | ScheduleDescription
    ) -> dict[str, Any] | None:
        """The memo of a schedule this partition made, None for anyone else's."""
        memo = await found.memo_value(MEMO_KEY, None)
        if not isinstance(memo, dict) or memo.get("partition_key") != self.partition_key:
            return None
        name = memo.get("name")
        if not isinstance(name, str) or schedule_id != f"{name}.{self.partition_key}":
            return None
        return memo

    async def get(self, name: str) -> ScheduleView:
        description, memo = await self._describe(name)
        return _view(name, self.partition_key, description, memo)

    async def pause(self, name: str, note: str | None = None) -> ScheduleView:
        await self._describe(name)
        await self._handle_of(name).pause(note=note or "paused by otherone")
        return await self.get(name)

    async def unpause(self, name: str, note: str | None = None) -> ScheduleView:
        await self._describe(name)
        await self._handle_of(name).unpause(note=note or "unpaused by otherone")
        return await self.get(name)

    async def trigger(self, name: str) -> ScheduleView:
        """Fire it now (its overlap policy holds)."""
        await self._describe(name)
        await self._handle_of(name).trigger()
        return await self.get(name)

    async def delete(self, name: str) -> None:
        """Delete it; runs it started go on."""
        await self._describe(name)
        await self._handle_of(name).delete()

    def _handle_of(self, name: str) -> ScheduleHandle:
        return self.temporal.get_schedule_handle(self.schedule_id(name))

    async def _describe(self, name: str) -> tuple[ScheduleDescription, dict[str, Any]]:
        """Its description and our memo; `ScheduleNotFoundError` unless it is this
        partition's schedule."""
        try:
            description = await self._handle_of(name).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                raise ScheduleNotFoundError(name) from None
            raise
        memo = await self._ours(self.schedule_id(name), description)
        if memo is None:
            raise ScheduleNotFoundError(name)  # someone else's schedule under that id
        return description, memo


def _view(
    name: str, partition_key: str, description: ScheduleDescription, memo: dict[str, Any]
) -> ScheduleView:
    schedule = description.schedule
    return ScheduleView(
        name=name,
        partition_key=partition_key,
        entry_agent=str(memo.get("entry_agent", "")),
        summary=str(memo.get("summary", "")),
        cron=_cron(memo),
        every=_every(schedule.spec.intervals),
        overlap=_overlap_name(schedule.policy.overlap),
        catchup_window=schedule.policy.catchup_window,
        paused=schedule.state.paused,
        note=schedule.state.note or None,
        next_runs=list(description.info.next_action_times[:5]),
        recent_runs=[
            ScheduledRun(run_id=action.action.workflow_id, started_at=action.started_at)
            for action in description.info.recent_actions[-5:]
            if isinstance(action.action, ScheduleActionExecutionStartWorkflow)
        ],
    )


def _listed_view(memo: dict[str, Any], listed: ScheduleListDescription) -> ScheduleView:
    """What a list answer has (Temporal lists no overlap policy nor catch-up window)."""
    schedule = listed.schedule
    return ScheduleView(
        name=str(memo["name"]),
        partition_key=str(memo.get("partition_key", "")),
        entry_agent=str(memo.get("entry_agent", "")),
        summary=str(memo.get("summary", "")),
        cron=_cron(memo),
        every=_every(schedule.spec.intervals) if schedule else None,
        overlap=None,
        catchup_window=None,
        paused=bool(schedule and schedule.state.paused),
        note=(schedule.state.note or None) if schedule else None,
        next_runs=list(listed.info.next_action_times[:5]) if listed.info else [],
    )


def _cron(memo: dict[str, Any]) -> list[str]:
    found = memo.get("cron")
    return [str(expression) for expression in found] if isinstance(found, list) else []


def _every(intervals: Sequence[ScheduleIntervalSpec]) -> timedelta | None:
    return intervals[0].every if intervals else None


def _overlap_name(policy: ScheduleOverlapPolicy) -> Overlap:
    for name, value in _OVERLAP.items():
        if value == policy:
            return name  # type: ignore[return-value]
    return "skip"  # Temporal's unspecified: its default, skip
