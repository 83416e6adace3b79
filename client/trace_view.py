"""The fold of a tree's event envelopes into a waterfall: one bar per run, model call attempt,
tool call attempt, agent call, approval wait and sleep (no I/O, no clock).

`TraceState.apply` takes the envelopes in order (replays ignored, as `WatchState` does, whose
fold of the runs it reuses: status, start, end, lineage); `TraceState.trace` lays the bars out
in tree order: a run, then what it did in time order, a child's run nested under the call
that made it. Times are the events' (a model call's bar starts with its first streamed text:
`model_started` is stored with it). A bar still open has no end (``end`` None): a live view
draws it up to "now". Retried tool attempts are bars of their own (``retried``: a later attempt
followed); a model attempt whose text a retry or fallback replaced is ``superseded``.

``otherone trace`` (`otherone.client.trace_render`), ``GET /v1/runs/{id}/trace`` and the page's
Trace view all show this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Literal
from urllib.parse import quote

from pydantic import BaseModel, Field

from otherone.client.watch_state import RunView, WatchState, one_line
from otherone.contracts import EventRecord

BarKind = Literal["run", "model", "tool", "agent_call", "approval", "sleep"]
#: Status of a bar that is still open.
OPEN = "running"
#: Status of a call bar left open when its run ended (its end was never stored).
INTERRUPTED = "interrupted"
_ERROR_CHARS = 300


class TraceBar(BaseModel):
    """One bar of the waterfall."""

    id: str = Field(description="Unique in the trace, e.g. `model:<run>:<turn>.<attempt>`.")
    kind: BarKind
    name: str = Field(description="What the bar is: the agent, `chat <profile>`, the tool.")
    run_id: str = Field(description="The run the bar belongs to (a run bar: itself).")
    agent_id: str
    parent_id: str | None = Field(None, description="The bar it is nested under.")
    depth: int = Field(0, description="Nesting level (0: the root run).")
    start: datetime | None = None
    end: datetime | None = Field(None, description="None: still open.")
    duration_seconds: float | None = Field(None, description="To `now` for an open bar.")
    status: str = OPEN
    turn: int | None = None
    attempt: int | None = None
    profile: str | None = Field(None, description="The model profile that answered.")
    tool_call_id: str | None = None
    target: str | None = Field(None, description="An agent call's agent.")
    child_run_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost: str | None = Field(None, description="US dollars, a decimal string (priced calls).")
    error: str | None = None
    retried: bool = Field(False, description="Another attempt of the same call followed.")
    superseded: bool = Field(False, description="A model attempt whose text was replaced.")
    detail: str | None = Field(
        None, description="Path of the call's request and response (model and tool bars)."
    )
    #: Sequence of the event that opened the bar (orders bars with equal starts).
    sequence: int = 0

    def add_usage(self, usage: object) -> None:
        if not isinstance(usage, Mapping):
            return
        for name in ("input_tokens", "output_tokens", "total_tokens"):
            value = usage.get(name)
            if isinstance(value, int):
                setattr(self, name, value)
        cost = usage.get("cost")
        if isinstance(cost, str):
            self.cost = cost

    @property
    def tokens(self) -> int | None:
        if self.total_tokens is not None:
            return self.total_tokens
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)


class Trace(BaseModel):
    """A tree's waterfall: its bars in tree order, and the span of time they cover."""

    root_run_id: str
    finished: bool = Field(description="The root run has ended.")
    events: int = Field(description="Events folded.")
    start: datetime | None = None
    end: datetime | None = Field(None, description="The root's end (None: still running).")
    now: datetime = Field(description="When the trace was made: open bars' durations run to it.")
    bars: list[TraceBar] = Field(default_factory=list)


class TraceState:
    """Folds envelopes into bars; `trace` lays them out."""

    def __init__(self, root_run_id: str) -> None:
        self.root_run_id = root_run_id
        self.runs = WatchState(root_run_id, max_activity=1)
        self._bars: dict[str, TraceBar] = {}
        #: (run id, tool call id) -> ids of its tool bars, one per attempt, in order.
        self._tool_attempts: dict[tuple[str, str], list[str]] = {}
        #: (caller run id, call id) -> the bar a child run hangs under.
        self._call_bars: dict[tuple[str, str], str] = {}
        #: run id -> the cost its end event reports.
        self._run_costs: dict[str, str] = {}

    @property
    def finished(self) -> bool:
        return self.runs.finished

    def apply(self, record: EventRecord) -> None:
        if record.sequence <= self.runs.last_sequence:
            return  # a replayed envelope (`WatchState.apply` would ignore it too)
        self.runs.apply(record)
        handler = _HANDLERS.get(str(record.event.get("type")))
        if handler is not None:
            handler(self, record)

    # layout ------------------------------------------------------------------------------

    def trace(self, now: datetime) -> Trace:
        """The bars in tree order with depths and durations (open ones up to ``now``)."""
        bars = self._run_bars() + [bar.model_copy() for bar in self._bars.values()]
        self._close_with_runs(bars)
        children: dict[str | None, list[TraceBar]] = {}
        for bar in bars:
            children.setdefault(bar.parent_id, []).append(bar)
        ordered: list[TraceBar] = []
        placed: set[str] = set()

        def visit(bar: TraceBar, depth: int) -> None:
            if bar.id in placed:
                return
            placed.add(bar.id)
            bar.depth = depth
            bar.duration_seconds = _seconds(bar.start, bar.end or now)
            ordered.append(bar)
            for child in sorted(children.get(bar.id, []), key=_time_order):
                visit(child, depth + 1)

        for bar in sorted(children.get(None, []), key=_time_order):
            visit(bar, 0)
        for bar in sorted(bars, key=_time_order):  # hung under a bar the events never opened
            visit(bar, 1)
        root = self.runs.root
        starts = [bar.start for bar in ordered if bar.start is not None]
        return Trace(
            root_run_id=self.root_run_id,
            finished=self.finished,
            events=self.runs.events_seen,
            start=min(starts) if starts else None,
            end=root.ended_at if root is not None and root.terminal else None,
            now=now,
            bars=ordered,
        )

    def _run_bars(self) -> list[TraceBar]:
        bars = []
        for view in self.runs.ordered():
            bar = TraceBar(
                id=run_bar_id(view.run_id),
                kind="run",
                name=view.agent_id,
                run_id=view.run_id,
                agent_id=view.agent_id,
                parent_id=self._parent_of_run(view),
                start=view.started_at,
                end=view.ended_at if view.terminal else None,
                status=view.status,
                child_run_id=None,
                error=view.failure,
                sequence=view.last_sequence,
            )
            self._sum_usage(bar)
            bars.append(bar)
        return bars

    def _parent_of_run(self, view: RunView) -> str | None:
        if view.parent_run_id is None:
            return None if view.run_id == self.root_run_id else run_bar_id(self.root_run_id)
        call = self._call_bars.get((view.parent_run_id, view.call_id or ""))
        return call or run_bar_id(view.parent_run_id)

    def _sum_usage(self, bar: TraceBar) -> None:
        """A run's tokens and cost: those of its model calls (its end's cost when given)."""
        calls = [b for b in self._bars.values() if b.kind == "model" and b.run_id == bar.run_id]
        if any(call.tokens is not None for call in calls):
            bar.input_tokens = sum(call.input_tokens or 0 for call in calls)
            bar.output_tokens = sum(call.output_tokens or 0 for call in calls)
            bar.total_tokens = sum(call.tokens or 0 for call in calls)
        bar.cost = self._run_costs.get(bar.run_id) or _sum_costs(c.cost for c in calls)

    def _close_with_runs(self, bars: list[TraceBar]) -> None:
        """A call bar still open when its run ended was cut short: it ends with the run."""
        ended = {bar.run_id: bar.end for bar in bars if bar.kind == "run" and bar.end}
        for bar in bars:
            if bar.kind != "run" and bar.end is None and bar.run_id in ended:
                bar.end, bar.status = ended[bar.run_id], INTERRUPTED

    # handlers (one per event type) -------------------------------------------------------

    def _open(self, record: EventRecord, bar_id: str, kind: BarKind, name: str) -> TraceBar:
        bar = TraceBar(
            id=bar_id,
            kind=kind,
            name=name,
            run_id=record.run_id,
            agent_id=record.agent_id,
            parent_id=run_bar_id(record.run_id),
            start=record.timestamp,
            sequence=record.sequence,
        )
        self._bars[bar_id] = bar
        return bar

    def _model_started(self, record: EventRecord) -> None:
        event = record.event
        turn, attempt = _int(event.get("turn")), _int(event.get("attempt")) or 1
        bar_id = model_bar_id(record.run_id, turn, attempt)
        if bar_id in self._bars:
            return
        profile = _str(event.get("model"))
        bar = self._open(record, bar_id, "model", f"chat {profile or 'model'}")
        bar.turn, bar.attempt, bar.profile = turn, attempt, profile
        bar.detail = f"/v1/runs/{record.run_id}/trace/model/{turn}?attempt={attempt}"
        for earlier in range(1, attempt):
            before = self._bars.get(model_bar_id(record.run_id, turn, earlier))
            if before is not None:
                before.retried = True
        replaced = self._bars.get(
            model_bar_id(record.run_id, turn, _int(event.get("supersedes_attempt")))
        )
        if replaced is not None:
            replaced.superseded = True

    def _model_completed(self, record: EventRecord) -> None:
        event = record.event
        turn, attempt = _int(event.get("turn")), _int(event.get("attempt")) or 1
        bar_id = model_bar_id(record.run_id, turn, attempt)
        bar = self._bars.get(bar_id)
        if bar is None:  # its start was not stored (a lost attempt's end)
            bar = self._open(record, bar_id, "model", f"chat {_str(event.get('model')) or 'model'}")
            bar.turn, bar.attempt = turn, attempt
        bar.end = record.timestamp
        bar.profile = bar.profile or _str(event.get("model"))
        error = event.get("error")
        bar.status = "failed" if error else "completed"
        bar.error = _short(error)
        bar.add_usage(event.get("usage"))

    def _tool_started(self, record: EventRecord) -> None:
        event = record.event
        call_id, name = str(event.get("tool_call_id")), str(event.get("tool_name"))
        attempts = self._tool_attempts.setdefault((record.run_id, call_id), [])
        attempt = _int(event.get("attempt")) or self._next_attempt(attempts)
        if attempt is None:
            return  # the open attempt's start again
        bar_id = tool_bar_id(record.run_id, call_id, attempt)
        if bar_id in self._bars:
            return
        for earlier in attempts:
            self._bars[earlier].retried = True
        attempts.append(bar_id)
        bar = self._open(record, bar_id, "tool", name)
        bar.tool_call_id, bar.attempt = call_id, attempt
        bar.detail = f"/v1/runs/{record.run_id}/trace/tool/{quote(call_id, safe='')}"

    def _next_attempt(self, attempts: list[str]) -> int | None:
        """The attempt a `tool_started` naming none is: the first, or the one after an ended
        attempt (a retry's small result is stored by the workflow, whose events name no
        attempt); None when the latest attempt is still open (its start again)."""
        if not attempts:
            return 1
        latest = self._bars[attempts[-1]]
        return None if latest.end is None else (latest.attempt or 1) + 1

    def _tool_completed(self, record: EventRecord) -> None:
        event = record.event
        call_id = str(event.get("tool_call_id"))
        attempt = _int(event.get("attempt"))
        bar = self._tool_bar(record.run_id, call_id, attempt)
        if bar is None or (attempt and bar.attempt != attempt):
            self._tool_started(record)  # its start was not stored
            bar = self._tool_bar(record.run_id, call_id, attempt)
            assert bar is not None
        elif not attempt and bar.end is not None:
            return  # an end stored again (one the workflow stores unless it is there)
        bar.end = record.timestamp
        error = event.get("error")
        bar.status = ("cancelled" if error == "cancelled" else "failed") if error else "completed"
        bar.error = _short(error)

    def _tool_bar(self, run_id: str, call_id: str, attempt: int) -> TraceBar | None:
        """The bar of ``attempt`` of the call (no attempt named: its latest)."""
        exact = self._bars.get(tool_bar_id(run_id, call_id, attempt)) if attempt else None
        attempts = self._tool_attempts.get((run_id, call_id), [])
        return exact or (self._bars[attempts[-1]] if attempts else None)

    def _tool_denied(self, record: EventRecord) -> None:
        """A call a person did not let run: a bar of no length, never started."""
        self._tool_started(record)
        bar = self._tool_bar(record.run_id, str(record.event.get("tool_call_id")), 0)
        assert bar is not None
        bar.end = record.timestamp
        bar.status = str(record.event.get("decision") or "denied")
        bar.error = _short(record.event.get("error"))

    def _call_started(self, record: EventRecord) -> None:
        """An agent call: the tool bar of its call becomes the agent call's (a call with no
        tool bar gets one of its own); the child's run bar hangs under it."""
        event = record.event
        call_id, target = str(event.get("call_id")), str(event.get("target"))
        key = (record.run_id, call_id)
        if key in self._call_bars:
            return
        bar = self._tool_bar(record.run_id, call_id, 0)
        if bar is None:
            bar = self._open(record, f"call:{record.run_id}:{call_id}", "agent_call", target)
            bar.tool_call_id = call_id
        bar.kind, bar.target = "agent_call", target
        child = self.runs.runs.get(_child_of(self.runs, record.run_id, call_id) or "")
        bar.child_run_id = child.run_id if child is not None else _str(event.get("child_run_id"))
        self._call_bars[key] = bar.id

    def _call_completed(self, record: EventRecord) -> None:
        event = record.event
        bar = self._bars.get(self._call_bars.get((record.run_id, str(event.get("call_id"))), ""))
        if bar is None or bar.id.startswith("tool:"):
            return  # a tool bar ends with its tool_completed
        bar.end = record.timestamp
        bar.status = str(event.get("outcome") or "failed")
        bar.error = _short(event.get("code"))

    def _approval_requested(self, record: EventRecord) -> None:
        event = record.event
        call_id, tool = str(event.get("call_id")), str(event.get("tool_name"))
        bar_id = f"approval:{record.run_id}:{call_id}"
        if bar_id in self._bars:
            return
        kind = "question" if event.get("kind") == "question" else "approval"
        bar = self._open(record, bar_id, "approval", f"{kind}: {tool}")
        bar.tool_call_id = call_id

    def _approval_decided(self, record: EventRecord) -> None:
        event = record.event
        bar = self._bars.get(f"approval:{record.run_id}:{event.get('call_id')}")
        if bar is None:
            return
        bar.end = record.timestamp
        bar.status = str(event.get("decision") or "decided")
        decided_by = event.get("decided_by")
        bar.error = _short(event.get("reason")) if bar.status != "approved" else None
        if decided_by:
            bar.name = f"{bar.name} ({bar.status} by {decided_by})"

    def _sleep_started(self, record: EventRecord) -> None:
        event = record.event
        call_id = str(event.get("tool_call_id"))
        bar_id = f"sleep:{record.run_id}:{call_id}"
        if bar_id in self._bars:
            return
        bar = self._open(record, bar_id, "sleep", f"sleep until {event.get('until')}")
        bar.tool_call_id = call_id
        tool = self._tool_bar(record.run_id, call_id, 0)
        if tool is not None:
            bar.parent_id = tool.id

    def _sleep_ended(self, record: EventRecord) -> None:
        bar = self._bars.get(f"sleep:{record.run_id}:{record.event.get('tool_call_id')}")
        if bar is not None:
            bar.end = record.timestamp
            bar.status = f"woke: {record.event.get('reason')}"

    def _run_ended(self, record: EventRecord) -> None:
        cost = record.event.get("cost")
        if isinstance(cost, str):
            self._run_costs[record.run_id] = cost


_Handler = Callable[[TraceState, EventRecord], None]
_HANDLERS: dict[str, _Handler] = {
    "model_started": TraceState._model_started,
    "model_completed": TraceState._model_completed,
    "tool_started": TraceState._tool_started,
    "tool_completed": TraceState._tool_completed,
    "tool_denied": TraceState._tool_denied,
    "agent_call_started": TraceState._call_started,
    "agent_call_completed": TraceState._call_completed,
    "approval_requested": TraceState._approval_requested,
    "approval_decided": TraceState._approval_decided,
    "sleep_started": TraceState._sleep_started,
    "sleep_ended": TraceState._sleep_ended,
    "run_completed": TraceState._run_ended,
    "run_failed": TraceState._run_ended,
    "run_cancelled": TraceState._run_ended,
}


def fold(root_run_id: str, records: list[EventRecord], now: datetime) -> Trace:
    """The trace of ``records`` (a root tree's envelopes, in order)."""
    state = TraceState(root_run_id)
    for record in records:
        state.apply(record)
    return state.trace(now)


def run_bar_id(run_id: str) -> str:
    return f"run:{run_id}"


def model_bar_id(run_id: str, turn: int, attempt: int) -> str:
    return f"model:{run_id}:{turn}.{attempt}"


def tool_bar_id(run_id: str, call_id: str, attempt: int) -> str:
    return f"tool:{run_id}:{call_id}.{attempt}"


def _child_of(runs: WatchState, run_id: str, call_id: str) -> str | None:
    """The child run `WatchState` hung under the call (it read the announced id)."""
    caller = runs.runs.get(run_id)
    for child in caller.children if caller is not None else []:
        view = runs.runs.get(child)
        if view is not None and view.call_id == call_id:
            return child
    return None


def _time_order(bar: TraceBar) -> tuple[float, int]:
    """Start time, then the opening event's sequence (a bar with no start goes last)."""
    return (bar.start.timestamp() if bar.start is not None else float("inf"), bar.sequence)


def _seconds(start: datetime | None, end: datetime) -> float | None:
    if start is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def _sum_costs(costs: Iterable[str | None]) -> str | None:
    total, any_cost = Decimal(0), False
    for cost in costs:
        if cost is None:
            continue
        try:
            total += Decimal(cost)
            any_cost = True
        except InvalidOperation:
            continue
    return str(total) if any_cost else None


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _short(value: object) -> str | None:
    if value is None or value == "":
        return None
    text = one_line(str(value))
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 1] + "…"
