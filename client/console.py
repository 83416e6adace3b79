"""Terminal rendering for the ``otherone`` CLI: live run events, results and run records.

Convention: stdout carries *content* (the model's streamed text, the final output, tables and
JSON asked for); stderr carries *decoration* (tool call lines, the result summary, notices and
errors). ``otherone run ... > answer.txt`` therefore keeps just the text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:  # events are printed by `watch` and `run`; `show` prints a record only
    from otherone.contracts import EventRecord

__all__ = [
    "EventPrinter",
    "completed_line",
    "denied_line",
    "guardrail_line",
    "make_console",
    "mcp_unavailable_line",
    "output_rejected_line",
    "waiting_line",
]

#: Style of a child's end in the live view (its outcome as the events spell it).
_CHILD_END_STYLE = {"completed": "dim", "cancelled": "yellow"}
_TERMINAL_EVENTS = {"run_completed": "completed", "run_cancelled": "cancelled"}
#: Events that say something was lost or refused, shown as warnings.
_WARNINGS = {
    "events_lost": "⚠ {count} event(s) lost (store unavailable): the text may be incomplete",
    "user_messages_refused": "⚠ {count} queued message(s) refused: the run's queue was full",
}


def output_rejected_line(event: dict[str, Any]) -> str:
    """An answer that broke the run's result contract, told to the model for another try."""
    return (
        f"↺ answer rejected, retry {event.get('retry')} of {event.get('retries')}: "
        f"{event.get('problem')}"
    )


#: Guardrail and hook events, and their display style.
GUARDRAIL_EVENTS = {
    "guardrail_passed": "dim",
    "guardrail_tripped": "red",
    "guardrail_failed": "red",
    "hook_refused": "yellow",
    "hook_failed": "red",
}


def guardrail_line(event: Mapping[str, Any]) -> str:
    """A guardrail's verdict or a hook's refusal or failure: which one, where, and why."""
    kind = event.get("type")
    where = f"{event.get('kind')} guardrail '{event.get('guardrail')}'"
    if event.get("tool"):
        where += f" on {event.get('tool')}"
    if kind == "guardrail_passed":
        return f"✓ {where} passed"
    if kind == "guardrail_tripped":
        return f"⛔ {where} tripped: {_one_line(str(event.get('reason')))}"
    if kind == "guardrail_failed":
        return f"⚠ {where} failed: {_one_line(str(event.get('error')))}"
    if kind == "hook_refused":
        return (
            f"⛔ hook '{event.get('hook')}' ({event.get('stage')}) refused: "
            f"{_one_line(str(event.get('reason')))}"
        )
    return f"⚠ hook failed ({event.get('stage')}): {_one_line(str(event.get('error')))}"


def denied_line(event: Mapping[str, Any]) -> str:
    """A call that never ran: a person denied it, or nobody decided in time (`tool_denied`)."""
    how = "not decided in time" if event.get("decision") == "timed_out" else "denied"
    return f"⊘ {event.get('tool_name')} {how}: nothing was executed"


def completed_line(event: Mapping[str, object], *, verbose: bool) -> str:
    """A tool call that ended without an error; ``verbose``: with the start of its result (the
    event's ``result``: one line, at most 200 characters; absent from older workers' events)."""
    line = f"✓ {event.get('tool_name')}"
    result = event.get("result")
    return f"{line} → {_one_line(str(result))}" if verbose and result is not None else line


def waiting_line(event: Mapping[str, Any]) -> str:
    """A call waiting for fleet capacity (`model_waiting` / `tool_waiting`)."""
    tool = f"tool {event.get('tool_name')}"
    what = "model call" if event.get("type") == "model_waiting" else tool
    return f"⏸ {what} waits for capacity: {event.get('scope')} ({event.get('reason')})"


def fallback_line(event: Mapping[str, Any]) -> str:
    """A turn its run's model could not answer goes to a fallback (`model_fallback`)."""
    return (
        f"↪ model '{event.get('from_model')}' failed after {event.get('attempts')} attempt(s): "
        f"'{event.get('to_model')}' answers turn {event.get('turn')} "
        f"({_one_line(str(event.get('error')))})"
    )


#: The run's own events shown as one yellow line each, by type.
_NOTICES: dict[str, Callable[[dict[str, Any]], str]] = {
    "tool_denied": denied_line,
    "model_waiting": waiting_line,
    "tool_waiting": waiting_line,
    "model_fallback": fallback_line,
    "output_rejected": output_rejected_line,
}


def mcp_unavailable_line(event: Mapping[str, Any]) -> str:
    """An MCP server the agent was granted tools of that offered none (`mcp_unavailable`)."""
    return (
        f"⚠ MCP server '{event.get('server')}' offered no tools: "
        f"{_one_line(str(event.get('reason')))}"
    )


def make_console(file: TextIO) -> Console:
    """A console that never highlights, never wraps long lines (URLs, ids) and never guesses."""
    return Console(file=file, highlight=False, soft_wrap=True, emoji=False)


@dataclass
class _Call:
    """An agent call seen in the live view (keyed by the child's run id)."""

    call_id: str
    target: str
    started_at: datetime
    ended: bool = False


class EventPrinter:
    """Renders the events of one run's tree as they arrive.

    Text deltas of the root run go to ``out`` as raw text (flushed per delta); tool calls, retries
    and queued messages are dim lines on ``err``. Children only show their activity, as dim lines
    on ``err`` indented by depth: agent calls starting and ending (``↳ researcher started``) and
    their tool calls (prefixed with the agent); their text never goes to ``out``.
    """

    def __init__(self, run_id: str, out: TextIO, err: Console, *, verbose: bool = False) -> None:
        self.run_id = run_id
        self.out = out
        self.err = err
        #: Show the start of each tool's result after its name (``--verbose``).
        self.verbose = verbose
        self._at_line_start = True
        self._position: tuple[int, int] | None = None  # (turn, attempt) of the text on screen
        self._turn_text: dict[int, str] = {}
        self._calls: dict[str, _Call] = {}  # child run id -> call
        #: (caller run id, call id) -> the child run id its `agent_call_started` announced.
        self._call_children: dict[tuple[str, str], str] = {}
        self.streamed_any = False

    @property
    def last_turn_text(self) -> str:
        """Text of the last model turn that streamed (what a completed run returns as output)."""
        if not self._turn_text:
            return ""
        return self._turn_text[max(self._turn_text)]

    def handle(self, record: EventRecord) -> None:
        event = record.event
        kind = event.get("type")
        if kind == "agent_call_started":
            self._call_started(record)
        elif kind == "agent_call_completed":
            self._call_completed(record)
        elif kind in ("approval_requested", "approval_decided"):
            self._approval(record)
        elif kind == "mcp_unavailable" or kind in GUARDRAIL_EVENTS:
            self._any_run_note(record)
        elif record.run_id != self.run_id:
            self._child_event(record)
        elif kind == "model_delta":
            self._delta(event)
        elif kind == "tool_started":
            self._note(_tool_started(event))
        elif kind == "tool_completed":
            self._tool_completed(event)
        elif kind in _NOTICES:
            self._note(_NOTICES[str(kind)](event), style="yellow")
        elif kind == "handed_off":
            self._note(
                f"⇢ {event.get('from_agent')} handed the conversation to "
                f"{event.get('to_agent')} (context {event.get('context')})"
            )
        elif kind == "user_message_queued":
            count = event.get("count")
            self._note(f"✉ {count} queued message(s) taken into the run")
        elif kind in _WARNINGS:
            self._note(_WARNINGS[str(kind)].format(count=event.get("count")), style="yellow")

    def _any_run_note(self, record: EventRecord) -> None:
        """What any run of the tree says about itself: an MCP server that offered no tools,
        a guardrail's verdict (passed ones with ``verbose`` only), a hook's refusal."""
        event, kind = record.event, record.event.get("type")
        who = "" if record.run_id == self.run_id else f"{'  ' * record.depth}{record.agent_id} "
        if kind == "mcp_unavailable":
            self._note(f"{who}{mcp_unavailable_line(event)}", style="yellow")
        elif kind != "guardrail_passed" or self.verbose:
            self._note(f"{who}{guardrail_line(event)}", style=GUARDRAIL_EVENTS[str(kind)])

    def finish(self) -> None:
        """End the streamed text with a newline (before the summary is printed)."""
        self._end_line()

    # internals ---------------------------------------------------------------------------

    def _child_event(self, record: EventRecord) -> None:
        """A descendant's event: its tool calls and its end; never its text."""
        event = record.event
        kind = event.get("type")
        indent = "  " * record.depth
        if kind == "tool_started":
            self._note(f"{indent}{record.agent_id} {_tool_started(event)}")
        elif kind == "tool_completed":
            self._tool_completed(event, prefix=f"{indent}{record.agent_id} ")
        elif kind == "tool_denied":
            self._note(f"{indent}{record.agent_id} {denied_line(event)}", style="yellow")
        elif kind in _TERMINAL_EVENTS or kind == "run_failed":
            outcome = _TERMINAL_EVENTS.get(str(kind)) or str(event.get("status") or "failed")
            failure = event.get("failure")
            detail = None
            if isinstance(failure, dict):
                detail = f"{failure.get('code')}: {_one_line(str(failure.get('message')))}"
            self._call_ended(record.run_id, record.agent_id, record, outcome, detail)

    def _call_started(self, record: EventRecord) -> None:
        event = record.event
        call_id, target = str(event.get("call_id")), str(event.get("target"))
        child = self._announced_child(record)
        self._call_children[(record.run_id, call_id)] = child
        if child in self._calls:
            return  # the check was retried: already shown
        self._calls[child] = _Call(call_id, target, record.timestamp)
        self._note(f"{'  ' * record.depth}↳ {target} started ({call_id})")

    def _call_completed(self, record: EventRecord) -> None:
        """The caller took a call's result: shown only if the child's own end was not seen."""
        event = record.event
        target = str(event.get("target"))
        child = self._announced_child(record)
        code = event.get("code")
        self._call_ended(
            child,
            target,
            record,
            str(event.get("outcome") or "failed"),
            str(code) if code else None,
            depth=record.depth + 1,
        )

    def _announced_child(self, record: EventRecord) -> str:
        """The child run an `agent_call_*` event names, else the one its call's start named;
        events stored before either come from runs on the id formula before readable ids."""
        child = record.event.get("child_run_id")
        if isinstance(child, str):
            return child
        call_id = str(record.event.get("call_id"))
        known = self._call_children.get((record.run_id, call_id))
        if known:
            return known
        from otherone.contracts import child_run_id  # loaded by whoever made the event anyway

        return child_run_id(record.root_run_id, record.run_id, call_id)

    def _call_ended(
        self,
        child: str,
        agent_id: str,
        record: EventRecord,
        outcome: str,
        detail: str | None,
        *,
        depth: int | None = None,
    ) -> None:
        call = self._calls.get(child)
        if call is not None and call.ended:
            return
        notes: list[str] = []
        if call is not None:
            call.ended = True
            notes.append(call.call_id)
            own = record.event.get("duration_millis")
            seconds = (
                own / 1000
                if isinstance(own, int) and own > 0
                else (record.timestamp - call.started_at).total_seconds()
            )
            notes.append(f"{max(seconds, 0):.2f} s")
        else:  # never announced (joined late): remember it ended
            self._calls[child] = _Call("", agent_id, record.timestamp, ended=True)
        indent = "  " * max((record.depth if depth is None else depth) - 1, 0)
        line = f"{indent}↳ {agent_id} {outcome.replace('_', ' ')}"
        if notes:
            line += f" ({', '.join(notes)})"
        if detail:
            line += f": {detail}"
        self._note(line, style=_CHILD_END_STYLE.get(outcome, "red"))

    def _approval(self, record: EventRecord) -> None:
        """A call that waits for a person (of any run of the tree), and its decision."""
        event = record.event
        who = f"{'  ' * record.depth}{record.agent_id}"
        call = f"{event.get('tool_name')} (call {event.get('call_id')}, run {record.run_id})"
        if event.get("type") == "approval_requested":
            what = event.get("question") if event.get("kind") == "question" else None
            what = what or _one_line(str(event.get("arguments") or ""))
            self._note(f"⏸ {who} waits for a person: {call} {what}", style="bold yellow")
            verb = "answer" if event.get("kind") == "question" else "approve"
            extra = " TEXT" if verb == "answer" else ""
            self._note(f"  otherone {verb} {record.run_id} {event.get('call_id')}{extra}")
            return
        decision = str(event.get("decision") or "decided").replace("_", " ")
        reason = f": {_one_line(str(event['reason']))}" if event.get("reason") else ""
        self._note(f"▶ {who}: {call} {decision} by {event.get('decided_by')}{reason}")

    def _tool_completed(self, event: Mapping[str, object], *, prefix: str = "") -> None:
        error = event.get("error")
        if error:
            self._note(f"{prefix}✗ {event.get('tool_name')}: {_one_line(str(error))}", style="red")
        else:
            self._note(f"{prefix}{completed_line(event, verbose=self.verbose)}")

    def _delta(self, event: Mapping[str, object]) -> None:
        content = event.get("content")
        if not isinstance(content, str) or not content:
            return
        turn = _int(event.get("turn"))
        attempt = _int(event.get("attempt"))
        if self._position != (turn, attempt):
            if self._position is not None and self._position[0] == turn:
                self._note(f"↻ model call retried (attempt {attempt})", style="yellow")
            else:
                self._end_line()
            self._position = (turn, attempt)
            self._turn_text[turn] = ""
        self._turn_text[turn] += content
        self.out.write(content)
        self.out.flush()
        self.streamed_any = True
        self._at_line_start = content.endswith("\n")

    def _end_line(self) -> None:
        if not self._at_line_start:
            self.out.write("\n")
            self._at_line_start = True
        self.out.flush()

    def _note(self, message: str, *, style: str = "dim") -> None:
        self._end_line()
        self.err.print(Text(message, style=style))


def _tool_started(event: Mapping[str, object]) -> str:
    arguments = _one_line(str(event.get("arguments") or ""))[:120]
    return f"→ {event.get('tool_name')} {arguments}".rstrip()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
