"""Terminal rendering for the ``otherone`` CLI: live run events, results and run records.

Convention: stdout carries *content* (the model's streamed text, the final output, tables and
JSON asked for); stderr carries *decoration* (tool call lines, the result summary, notices and
errors). ``otherone run ... > answer.txt`` therefore keeps just the text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from otherone.runs import AgentOutput, AgentRunResult, RunOutcome, RunRecord, RunStatus, RunUsage

if TYPE_CHECKING:  # events are printed by `watch` and `run`; `show` prints a record only
    from otherone.contracts import EventRecord

__all__ = [
    "EventPrinter",
    "make_console",
    "output_rejected_line",
    "print_record",
    "print_result_summary",
    "print_run_tree",
    "run_tree",
    "usage_line",
]

_OUTCOME_STYLE = {
    RunOutcome.COMPLETED: ("✓", "bold green"),
    RunOutcome.FAILED: ("✗", "bold red"),
    RunOutcome.CANCELLED: ("■", "bold yellow"),
    RunOutcome.TIMED_OUT: ("⏱", "bold red"),
    RunOutcome.BUDGET_EXCEEDED: ("$", "bold red"),
}
_STATUS_STYLE = {
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "red",
    RunStatus.CANCELLED: "yellow",
    RunStatus.TIMED_OUT: "red",
    RunStatus.BUDGET_EXCEEDED: "red",
}
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

    def __init__(self, run_id: str, out: TextIO, err: Console) -> None:
        self.run_id = run_id
        self.out = out
        self.err = err
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
        elif record.run_id != self.run_id:
            self._child_event(record)
        elif kind == "model_delta":
            self._delta(event)
        elif kind == "tool_started":
            self._note(_tool_started(event))
        elif kind == "tool_completed":
            self._tool_completed(event)
        elif kind == "handed_off":
            self._note(
                f"⇢ {event.get('from_agent')} handed the conversation to "
                f"{event.get('to_agent')} (context {event.get('context')})"
            )
        elif kind == "user_message_queued":
            count = event.get("count")
            self._note(f"✉ {count} queued message(s) taken into the run")
        elif kind == "output_rejected":
            self._note(output_rejected_line(event), style="yellow")
        elif kind in _WARNINGS:
            self._note(_WARNINGS[str(kind)].format(count=event.get("count")), style="yellow")

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
            self._note(f"{prefix}✓ {event.get('tool_name')}")

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


def usage_line(usage: RunUsage) -> str:
    """``123 tokens (in 100, out 23) · 2 model calls · 1 tool call · 0.41 s``."""
    parts: list[str] = []
    if usage.total_tokens is not None or usage.input_tokens is not None:
        total = usage.total_tokens
        if total is None:
            total = (usage.input_tokens or 0) + (usage.output_tokens or 0)
        tokens_in, tokens_out = _or_dash(usage.input_tokens), _or_dash(usage.output_tokens)
        parts.append(f"{total} tokens (in {tokens_in}, out {tokens_out})")
    else:
        parts.append("tokens unknown")
    parts.append(_plural(usage.model_calls, "model call"))
    parts.append(_plural(usage.tool_calls, "tool call"))
    if usage.agent_calls:
        parts.append(_plural(usage.agent_calls, "agent call"))
    parts.append(f"{usage.duration_millis / 1000:.2f} s")
    return " · ".join(parts)


def print_result_summary(
    console: Console, result: AgentRunResult, *, ui_url: str | None = None
) -> None:
    """Outcome, failure, usage, run id and Web UI link (no output text: that is content)."""
    mark, style = _OUTCOME_STYLE.get(result.outcome, ("?", "bold"))
    head = Text.assemble((f"{mark} {result.outcome.value}", style), "  ", (result.agent_id, "bold"))
    console.print(head)
    if result.failure is not None:
        console.print(
            _row("failure", f"{result.failure.code.value}: {_one_line(result.failure.message)}")
        )
    cut = _cut_answer(result.output)
    if cut is not None:
        console.print(_row("answer", cut))
    console.print(_row("usage", usage_line(result.usage)))
    console.print(_row("run id", result.run_id))
    if result.session_id:
        console.print(_row("session", result.session_id))
    if ui_url:
        console.print(_row("web ui", ui_url))


def print_record(console: Console, record: RunRecord) -> None:
    """A run record as a two-column table."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    status_style = _STATUS_STYLE.get(record.status, "cyan")
    rows: list[tuple[str, str | Text | None]] = [
        ("run id", record.run_id),
        ("root run id", record.root_run_id if record.root_run_id != record.run_id else None),
        ("parent run id", record.parent_run_id),
        ("agent call id", record.agent_call_id),
        ("agent", _agent_label(record)),
        ("handoffs", _handoff_chain(record)),
        ("status", Text(record.status.value, style=status_style)),
        ("session", record.session_id),
        ("partition", record.partition_key),
        ("depth", str(record.depth)),
        ("iteration", str(record.iteration) if record.iteration else None),
        ("started", record.started_at.isoformat() if record.started_at else None),
        ("finished", record.finished_at.isoformat() if record.finished_at else None),
        ("usage", usage_line(record.usage)),
        (
            "failure",
            f"{record.failure.code.value}: {record.failure.message}" if record.failure else None,
        ),
        ("output", record.output.text if record.output is not None else None),
        ("answer", _cut_answer(record.output)),
        ("metadata", json.dumps(record.metadata, ensure_ascii=False) if record.metadata else None),
    ]
    for label, value in rows:
        if value is not None:
            table.add_row(label, value if isinstance(value, Text) else Text(value))
    console.print(table)


def run_tree(records: Sequence[RunRecord], *, marked: str | None = None) -> Tree:
    """The runs of one tree (root first, as `AgentClient.list_run_tree` returns them).

    Each node: ``agent  (call id)  status  calls · tokens · duration``; a failure follows its
    status. ``marked`` (a run id) gets an arrow. Runs whose parent is not in ``records`` hang
    under the root.
    """
    if not records:
        raise ValueError("a run tree has at least its root")
    root = records[0]
    tree = Tree(_tree_label(root, marked=marked), guide_style="dim")
    nodes: dict[str, Tree] = {root.run_id: tree}
    for record in records[1:]:
        parent = nodes.get(record.parent_run_id or "", tree)
        nodes[record.run_id] = parent.add(_tree_label(record, marked=marked))
    return tree


def print_run_tree(
    console: Console, records: Sequence[RunRecord], *, marked: str | None = None
) -> None:
    """The tree of runs, then (for more than one run) a line with the tree's totals.

    A terminal wraps long lines under their node; a pipe or file gets one line per run.
    """
    tree = run_tree(records, marked=marked)
    if console.is_terminal:
        console.print(tree, soft_wrap=False)
    else:
        wide = Measurement.get(console, console.options.update(width=100_000), tree).maximum
        options = console.options.update(width=max(console.width, wide))
        for line in console.render_lines(tree, options, pad=False, new_lines=True):
            console.print(Segments(line), end="")
    if len(records) > 1:
        tokens = [_tokens(record.usage) for record in records]
        parts = [
            _plural(len(records), "run"),
            _plural(sum(record.usage.model_calls for record in records), "model call"),
            # Counted as everywhere: agent calls are tool calls too (the seed's usage rule).
            _plural(sum(record.usage.tool_calls for record in records), "tool call"),
            _plural(sum(record.usage.agent_calls for record in records), "agent call"),
        ]
        if all(count is not None for count in tokens):
            parts.append(f"{sum(count or 0 for count in tokens)} tokens")
        console.print(Text("in all: " + " · ".join(parts), style="dim"))


def _tree_label(record: RunRecord, *, marked: str | None) -> Text:
    label = Text()
    label.append(record.agent_id, style="bold")
    if record.agent_call_id:
        label.append(f"  {record.agent_call_id}", style="dim")
    label.append("  ")
    label.append(
        record.status.value.replace("_", " "), style=_STATUS_STYLE.get(record.status, "cyan")
    )
    usage = record.usage
    parts = [_plural(usage.model_calls, "model call")]
    if usage.tool_calls:
        parts.append(_plural(usage.tool_calls, "tool call"))
    if usage.agent_calls:
        parts.append(_plural(usage.agent_calls, "agent call"))
    tokens = _tokens(usage)
    if tokens is not None:
        parts.append(f"{tokens} tokens")
    seconds = _duration_seconds(record)
    if seconds is not None:
        parts.append(f"{seconds:.2f} s")
    label.append("  " + " · ".join(parts), style="dim")
    if record.failure is not None:
        code = record.failure.code.value
        prefix = "" if code == record.status.value else f"{code}: "
        label.append(f"  {prefix}{_one_line(record.failure.message)}", style="red")
    if marked is not None and record.run_id == marked and record.depth > 0:
        label.append("  ◀", style="bold")
    return label


def _tokens(usage: RunUsage) -> int | None:
    if usage.total_tokens is not None:
        return usage.total_tokens
    if usage.input_tokens is None and usage.output_tokens is None:
        return None
    return (usage.input_tokens or 0) + (usage.output_tokens or 0)


def _duration_seconds(record: RunRecord) -> float | None:
    """The run's own duration; for a running run, the time since it started."""
    if record.usage.duration_millis:
        return record.usage.duration_millis / 1000
    if record.started_at is None:
        return None
    end = record.finished_at or datetime.now(UTC)
    return max((end - record.started_at).total_seconds(), 0.0)


def _handoff_chain(record: RunRecord) -> str | None:
    """``triage → billing → expert``: the agents the run's conversation went through."""
    if not record.handoffs:
        return None
    return " → ".join([record.handoffs[0].from_agent, *(h.to_agent for h in record.handoffs)])


def _agent_label(record: RunRecord) -> str:
    if record.agent_definition_version is None:
        return record.agent_id
    return f"{record.agent_id} (v{record.agent_definition_version})"


def _cut_answer(output: AgentOutput | None) -> str | None:
    """What a summary says of an answer that did not end normally (None when it did)."""
    if output is None or output.finish_reason is None:
        return None
    if output.finish_reason == "length":
        return "cut at the model's max_tokens (finish reason length)"
    return f"ended by the model with finish reason {output.finish_reason}"


def _row(label: str, value: str) -> Text:
    return Text.assemble((f"  {label:<8} ", "dim"), value)


def _tool_started(event: Mapping[str, object]) -> str:
    arguments = _one_line(str(event.get("arguments") or ""))[:120]
    return f"→ {event.get('tool_name')} {arguments}".rstrip()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
