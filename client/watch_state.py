"""The fold of a tree's event envelopes into what ``otherone watch`` shows (no I/O, no clock).

`WatchState.apply` takes the envelopes in order (replays ignored), one handler per event type;
the renderers (`otherone.client.watch_render`) read the result.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from otherone.client.console import (
    GUARDRAIL_EVENTS,
    completed_line,
    denied_line,
    fallback_line,
    guardrail_line,
    mcp_unavailable_line,
    output_rejected_line,
    waiting_line,
)
from otherone.contracts import EventRecord, child_run_id

#: Display status of a run: the terminal ones are the outcomes the events spell.
PENDING = "pending"  # an agent call was made; the child has not started (yet)
RUNNING = "running"
REFUSED = "refused"  # the call was refused before a child started (e.g. agent_call_denied)
WAITING_FOR_APPROVAL = "waiting_for_approval"  # a tool call or question waits for a person
SLEEPING = "sleeping"  # the run sleeps (`time.sleep` / `time.wake_at`) until a time or a message
_TERMINAL = frozenset({"completed", "failed", "cancelled", "timed_out", "budget_exceeded", REFUSED})


@dataclass
class RunView:
    """What the events have told about one run of the tree."""

    run_id: str
    agent_id: str
    depth: int
    parent_run_id: str | None
    call_id: str | None = None
    status: str = PENDING
    started_at: datetime | None = None
    ended_at: datetime | None = None
    #: The run's own duration, as its end event reports it (what its record and `otherone
    #: tree` show); event timestamps are only the fallback.
    own_seconds: float | None = None
    failure: str | None = None
    turn: int = 0
    attempt: int = 0
    in_model_call: bool = False
    model_calls: int = 0
    model_retries: int = 0
    #: A `model_fallback` was seen: the next `model_started` is the fallback's, not a retry.
    falling_back: bool = False
    #: Events the run's worker reported it could not store (`events_lost` markers).
    events_lost: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    #: Text (and thinking) of the run's current model turn and attempt.
    text: str = ""
    thinking: str = ""
    tool_call_ids: set[str] = field(default_factory=set)
    agent_call_ids: set[str] = field(default_factory=set)
    open_tools: dict[str, str] = field(default_factory=dict)  # tool call id -> tool name
    open_calls: dict[str, str] = field(default_factory=dict)  # call id -> target agent
    #: Calls waiting for a person: call id -> tool name.
    open_approvals: dict[str, str] = field(default_factory=dict)
    #: MCP servers granted to the run's agent that offered no tools: server -> why.
    mcp_unavailable: dict[str, str] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)  # child run ids, in call order
    #: Sequence of the last event of this run (to pick the most recently active runs).
    last_sequence: int = 0

    @property
    def terminal(self) -> bool:
        return self.status in _TERMINAL

    @property
    def active(self) -> bool:
        return self.status == RUNNING

    @property
    def tool_calls(self) -> int:
        return len(self.tool_call_ids)

    @property
    def agent_calls(self) -> int:
        return len(self.agent_call_ids)

    @property
    def tokens(self) -> int | None:
        """Total tokens of the run's model calls; None when no call reported any."""
        if self.total_tokens is not None:
            return self.total_tokens
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def duration(self, now: datetime) -> float | None:
        """Seconds from its start to its end (to ``now`` while it runs); None before it starts."""
        if self.own_seconds is not None:
            return self.own_seconds
        if self.started_at is None:
            return None
        end = self.ended_at or now
        return max((end - self.started_at).total_seconds(), 0.0)

    def add_usage(self, usage: object) -> None:
        if not isinstance(usage, Mapping):
            return
        for name in ("input_tokens", "output_tokens", "total_tokens"):
            value = usage.get(name)
            if isinstance(value, int):
                setattr(self, name, (getattr(self, name) or 0) + value)


@dataclass(frozen=True)
class Activity:
    """One line of the live view's recent activity (tool calls, agent calls, ends)."""

    sequence: int
    run_id: str
    agent_id: str
    depth: int
    text: str
    style: str = "dim"


class WatchState:
    """The fold of a root tree's event envelopes into what the view shows.

    `apply` is idempotent for replays: an envelope whose sequence is not above the last one
    applied is ignored, so a consumer that resumes with some overlap shows nothing twice.
    Unknown event types are counted and otherwise ignored (newer workers may emit more).
    """

    def __init__(self, root_run_id: str, *, max_activity: int = 8, verbose: bool = False) -> None:
        self.root_run_id = root_run_id
        #: Recent activity shows the start of each tool's result (``--verbose``).
        self.verbose = verbose
        self.runs: dict[str, RunView] = {}
        self.activity: deque[Activity] = deque(maxlen=max_activity)
        self.last_sequence = 0
        self.events_seen = 0
        self.first_timestamp: datetime | None = None
        #: Set by a terminal watch that reads keys (`otherone watch` on a TTY): the live view
        #: then offers to decide the first open approval, and shows what came of the last try.
        self.decisions_enabled = False
        self.decision_note: str | None = None
        #: (caller run id, call id) -> the child run id its `agent_call_started` announced.
        self._call_children: dict[tuple[str, str], str] = {}

    # queries -----------------------------------------------------------------------------

    @property
    def root(self) -> RunView | None:
        return self.runs.get(self.root_run_id)

    def first_open_approval(self) -> tuple[RunView, str, str] | None:
        """The run, call id and tool of the oldest open approval (questions need text and are
        answered with `otherone answer`), in tree order."""
        from otherone.config import HUMAN_ASK_TOOL  # not at import: `otherone show` needs none

        for view in self.ordered():
            for call_id, tool in view.open_approvals.items():
                if tool != HUMAN_ASK_TOOL:
                    return view, call_id, tool
        return None

    @property
    def finished(self) -> bool:
        """The root has ended (its terminal event was applied)."""
        root = self.root
        return root is not None and root.terminal

    def ordered(self) -> list[RunView]:
        """Every run, depth first from the root (children in call order), orphans last."""
        seen: set[str] = set()
        ordered: list[RunView] = []

        def visit(run_id: str) -> None:
            view = self.runs.get(run_id)
            if view is None or run_id in seen:
                return
            seen.add(run_id)
            ordered.append(view)
            for child in view.children:
                visit(child)

        visit(self.root_run_id)
        for run_id in self.runs:
            visit(run_id)
        return ordered

    def active(self) -> list[RunView]:
        """Runs that have started and not ended, most recently active first."""
        running = [view for view in self.runs.values() if view.active]
        return sorted(running, key=lambda view: view.last_sequence, reverse=True)

    # folding -----------------------------------------------------------------------------

    def apply(self, record: EventRecord) -> None:
        if record.sequence <= self.last_sequence:
            return  # a replayed envelope
        self.last_sequence = record.sequence
        self.events_seen += 1
        if self.first_timestamp is None:
            self.first_timestamp = record.timestamp
        view = self._view(record)
        view.last_sequence = record.sequence
        handler = _HANDLERS.get(str(record.event.get("type")))
        if handler is not None:
            handler(self, view, record)

    def _view(self, record: EventRecord) -> RunView:
        """The run an envelope is about; created (and hung under its parent) when first seen."""
        view = self.runs.get(record.run_id)
        if view is None:
            view = self._add(
                record.run_id,
                agent_id=record.agent_id,
                depth=record.depth,
                parent_run_id=record.parent_run_id,
                call_id=_call_id_of(record.run_id, record.parent_run_id),
            )
        return view

    def _add(
        self,
        run_id: str,
        *,
        agent_id: str,
        depth: int,
        parent_run_id: str | None,
        call_id: str | None,
    ) -> RunView:
        view = RunView(run_id, agent_id, depth, parent_run_id, call_id=call_id)
        self.runs[run_id] = view
        parent = self.runs.get(parent_run_id or "")
        if parent is not None and run_id not in parent.children:
            parent.children.append(run_id)
        return view

    def _note(self, view: RunView, record: EventRecord, text: str, style: str = "dim") -> None:
        self.activity.append(
            Activity(record.sequence, view.run_id, view.agent_id, view.depth, text, style)
        )

    # handlers (one per event type) -------------------------------------------------------

    def _run_started(self, view: RunView, record: EventRecord) -> None:
        if not view.terminal:
            view.status = RUNNING
        if view.started_at is None:
            view.started_at = record.timestamp

    def _model_started(self, view: RunView, record: EventRecord) -> None:
        turn, attempt = _int(record.event.get("turn")), _int(record.event.get("attempt"))
        if view.falling_back:
            view.falling_back = False
        elif turn == view.turn and attempt > view.attempt:
            view.model_retries += 1
            self._note(view, record, f"↻ model call retried (attempt {attempt})", "yellow")
        self._ensure_running(view, record)
        view.turn, view.attempt = turn, attempt
        view.text = view.thinking = ""
        view.in_model_call = True

    def _delta(self, view: RunView, record: EventRecord) -> None:
        content = record.event.get("content")
        if not isinstance(content, str):
            return
        self._ensure_running(view, record)
        position = (_int(record.event.get("turn")), _int(record.event.get("attempt")))
        if position != (view.turn, view.attempt):  # its model_started was not seen
            view.turn, view.attempt = position
            view.text = view.thinking = ""
        if record.event.get("type") == "thinking_delta":
            view.thinking += content
        else:
            view.text += content

    def _model_completed(self, view: RunView, record: EventRecord) -> None:
        view.in_model_call = False
        if record.event.get("error"):
            return  # the attempt failed or was cancelled: a retry (or the run's end) follows
        view.model_calls += 1
        view.add_usage(record.event.get("usage"))

    def _tool_started(self, view: RunView, record: EventRecord) -> None:
        event = record.event
        call_id, name = str(event.get("tool_call_id")), str(event.get("tool_name"))
        self._ensure_running(view, record)
        view.tool_call_ids.add(call_id)
        view.open_tools[call_id] = name
        arguments = one_line(str(event.get("arguments") or ""))[:80]
        self._note(view, record, f"→ {name} {arguments}".rstrip())

    def _tool_completed(self, view: RunView, record: EventRecord) -> None:
        event = record.event
        name = str(event.get("tool_name"))
        view.open_tools.pop(str(event.get("tool_call_id")), None)
        error = event.get("error")
        if error:
            self._note(view, record, f"✗ {name}: {one_line(str(error))[:120]}", "red")
        else:
            self._note(view, record, completed_line(event, verbose=self.verbose))

    def _tool_denied(self, view: RunView, record: EventRecord) -> None:
        """A call a person denied (or nobody decided in time): made by the model, so counted
        among the run's tool calls as its usage counts it, but it never started."""
        event = record.event
        self._ensure_running(view, record)
        view.tool_call_ids.add(str(event.get("tool_call_id")))
        self._note(view, record, denied_line(event), "yellow")

    def _waiting(self, view: RunView, record: EventRecord) -> None:
        """A call refused a fleet permit for now: the run waits (holding no worker)."""
        self._ensure_running(view, record)
        self._note(view, record, waiting_line(record.event), "yellow")

    def _fallback(self, view: RunView, record: EventRecord) -> None:
        """A turn its run's model could not answer goes to the next profile."""
        self._ensure_running(view, record)
        view.falling_back = True
        self._note(view, record, fallback_line(record.event), "yellow")

    def _mcp_unavailable(self, view: RunView, record: EventRecord) -> None:
        event = record.event
        view.mcp_unavailable[str(event.get("server"))] = str(event.get("reason"))
        self._note(view, record, mcp_unavailable_line(event), "yellow")

    def _call_started(self, view: RunView, record: EventRecord) -> None:
        call_id, target = str(record.event.get("call_id")), str(record.event.get("target"))
        if call_id in view.agent_call_ids:
            return  # the check was retried
        view.agent_call_ids.add(call_id)
        view.open_calls[call_id] = target
        child = self._announced_child(record, call_id)
        self._call_children[(record.run_id, call_id)] = child
        if child not in self.runs:
            self._add(
                child,
                agent_id=target,
                depth=view.depth + 1,
                parent_run_id=view.run_id,
                call_id=call_id,
            )
        elif child not in view.children:
            view.children.append(child)
        self._note(view, record, f"↳ {target} called ({call_id})")

    def _announced_child(self, record: EventRecord, call_id: str) -> str:
        """The child run an `agent_call_*` event names, else the one its call's start named;
        events stored before either come from runs on the id formula before readable ids."""
        child = record.event.get("child_run_id")
        if isinstance(child, str):
            return child
        known = self._call_children.get((record.run_id, call_id))
        return known or child_run_id(record.root_run_id, record.run_id, call_id)

    def _call_completed(self, view: RunView, record: EventRecord) -> None:
        """The caller took a call's result; ends the child if its own end was not seen."""
        event = record.event
        call_id, target = str(event.get("call_id")), str(event.get("target"))
        view.open_calls.pop(call_id, None)
        child = self.runs.get(self._announced_child(record, call_id))
        if child is None or child.terminal:
            return
        outcome = str(event.get("outcome") or "failed")
        code = event.get("code")
        child.status = REFUSED if child.started_at is None and code else outcome
        child.failure = str(code) if code else child.failure
        child.ended_at = record.timestamp if child.started_at is not None else None
        detail = f": {code}" if code else ""
        style = "red" if child.status not in ("completed", "cancelled") else "dim"
        self._note(view, record, f"↳ {target} {child.status.replace('_', ' ')}{detail}", style)

    def _messages_queued(self, view: RunView, record: EventRecord) -> None:
        self._note(view, record, f"✉ {record.event.get('count')} queued message(s) taken")

    def _events_lost(self, view: RunView, record: EventRecord) -> None:
        """The worker could not store some events (a store outage): the view may miss text."""
        count = _int(record.event.get("count"))
        view.events_lost += count
        self._note(view, record, f"⚠ {count} event(s) lost (the store was unavailable)", "yellow")

    def _messages_refused(self, view: RunView, record: EventRecord) -> None:
        count = record.event.get("count")
        self._note(view, record, f"⚠ {count} message(s) refused: the queue was full", "yellow")

    def _guardrail(self, view: RunView, record: EventRecord) -> None:
        """A guardrail's verdict, a hook's refusal or failure (`guardrail_line`)."""
        style = GUARDRAIL_EVENTS[str(record.event.get("type"))]
        self._note(view, record, guardrail_line(record.event), style)

    def _output_rejected(self, view: RunView, record: EventRecord) -> None:
        self._note(view, record, output_rejected_line(record.event), "yellow")

    def _compacted(self, view: RunView, record: EventRecord) -> None:
        summarised = record.event.get("summarised_entries")
        self._note(view, record, f"⇲ context compacted ({summarised} entries summarised)")

    def _handed_off(self, view: RunView, record: EventRecord) -> None:
        """`agent.handoff`: the run goes on under another agent (same run, same session)."""
        event = record.event
        view.agent_id = str(event.get("to_agent") or view.agent_id)
        line = f"⇢ {event.get('from_agent')} handed the conversation to {view.agent_id}"
        self._note(view, record, f"{line} (context {event.get('context')})")

    def _ended(self, view: RunView, record: EventRecord) -> None:
        event = record.event
        kind = event.get("type")
        if kind == "run_completed":
            view.status = "completed"
        elif kind == "run_cancelled":
            view.status = "cancelled"
        else:
            view.status = str(event.get("status") or "failed")
            failure = event.get("failure")
            if isinstance(failure, Mapping):
                message = one_line(str(failure.get("message") or ""))
                view.failure = f"{failure.get('code')}: {message}"[:200]
        view.ended_at = record.timestamp
        if view.started_at is None:
            view.started_at = record.timestamp
        own = event.get("duration_millis")
        if isinstance(own, int) and own > 0:
            view.own_seconds = own / 1000
        view.in_model_call = False
        view.open_tools.clear()
        style = {"completed": "green", "cancelled": "yellow"}.get(view.status, "red")
        detail = f": {view.failure}" if view.failure else ""
        self._note(view, record, f"■ {view.status.replace('_', ' ')}{detail}", style)

    def _approval_requested(self, view: RunView, record: EventRecord) -> None:
        event = record.event
        call_id, tool = str(event.get("call_id")), str(event.get("tool_name"))
        view.open_approvals[call_id] = tool
        if not view.terminal:
            view.status = WAITING_FOR_APPROVAL
        what = event.get("question") if event.get("kind") == "question" else event.get("arguments")
        line = f"⏸ waits for a person: {tool} (call {call_id}) {_one_line_text(what)}"
        self._note(view, record, line, "bold yellow")

    def _approval_decided(self, view: RunView, record: EventRecord) -> None:
        event = record.event
        call_id = str(event.get("call_id"))
        tool = view.open_approvals.pop(call_id, str(event.get("tool_name")))
        if view.status == WAITING_FOR_APPROVAL and not view.open_approvals:
            view.status = RUNNING
        decision = str(event.get("decision") or "decided").replace("_", " ")
        line = f"▶ {tool} (call {call_id}) {decision} by {event.get('decided_by')}"
        self._note(view, record, line)

    def _sleep_started(self, view: RunView, record: EventRecord) -> None:
        event = record.event
        if not view.terminal and view.status != WAITING_FOR_APPROVAL:
            view.status = SLEEPING
        line = f"☾ sleeps until {event.get('until')} (call {event.get('tool_call_id')})"
        self._note(view, record, line, "bold blue")

    def _sleep_ended(self, view: RunView, record: EventRecord) -> None:
        event = record.event
        if view.status == SLEEPING:
            view.status = RUNNING
        self._note(view, record, f"☀ woke: {event.get('reason')}")

    def _ensure_running(self, view: RunView, record: EventRecord) -> None:
        """A run whose run_started was not seen (lost, or before the cursor) is running."""
        if view.status == PENDING:
            view.status = RUNNING
            view.started_at = view.started_at or record.timestamp


_Handler = Callable[[WatchState, RunView, EventRecord], None]
_HANDLERS: dict[str, _Handler] = {
    "run_started": WatchState._run_started,
    "model_started": WatchState._model_started,
    "model_delta": WatchState._delta,
    "thinking_delta": WatchState._delta,
    "model_completed": WatchState._model_completed,
    "tool_started": WatchState._tool_started,
    "tool_completed": WatchState._tool_completed,
    "tool_denied": WatchState._tool_denied,
    "mcp_unavailable": WatchState._mcp_unavailable,
    "model_waiting": WatchState._waiting,
    "tool_waiting": WatchState._waiting,
    "model_fallback": WatchState._fallback,
    "agent_call_started": WatchState._call_started,
    "agent_call_completed": WatchState._call_completed,
    "user_message_queued": WatchState._messages_queued,
    "context_compacted": WatchState._compacted,
    "handed_off": WatchState._handed_off,
    "approval_requested": WatchState._approval_requested,
    "approval_decided": WatchState._approval_decided,
    "sleep_started": WatchState._sleep_started,
    "sleep_ended": WatchState._sleep_ended,
    "events_lost": WatchState._events_lost,
    "user_messages_refused": WatchState._messages_refused,
    "output_rejected": WatchState._output_rejected,
    **{kind: WatchState._guardrail for kind in GUARDRAIL_EVENTS},
    "run_completed": WatchState._ended,
    "run_failed": WatchState._ended,
    "run_cancelled": WatchState._ended,
}


def _call_id_of(run_id: str, parent_run_id: str | None) -> str | None:
    """The call id a child's run id was derived from (readable ids only)."""
    if parent_run_id and run_id.startswith(parent_run_id + "/"):
        return run_id.removeprefix(parent_run_id + "/")
    return None


def one_line(text: str) -> str:
    """``text`` with its runs of white space (line breaks too) as single spaces."""
    return " ".join(text.split())


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def _one_line_text(value: object) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= 120 else text[:119] + "…"
