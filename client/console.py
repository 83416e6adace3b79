"""Terminal rendering for the ``otherone`` CLI: live run events, results and run records.

Convention: stdout carries *content* (the model's streamed text, the final output, tables and
JSON asked for); stderr carries *decoration* (tool call lines, the result summary, notices and
errors). ``otherone run ... > answer.txt`` therefore keeps just the text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from otherone.contracts import EventRecord
from otherone.runs import AgentRunResult, RunOutcome, RunRecord, RunStatus, RunUsage

__all__ = [
    "EventPrinter",
    "make_console",
    "print_record",
    "print_result_summary",
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


def make_console(file: TextIO) -> Console:
    """A console that never highlights, never wraps long lines (URLs, ids) and never guesses."""
    return Console(file=file, highlight=False, soft_wrap=True, emoji=False)


class EventPrinter:
    """Renders the events of one run as they arrive.

    Text deltas of the root run go to ``out`` as raw text (flushed per delta); tool calls, retries
    and queued messages are dim lines on ``err``. Events of other runs (children) are skipped.
    """

    def __init__(self, run_id: str, out: TextIO, err: Console) -> None:
        self.run_id = run_id
        self.out = out
        self.err = err
        self._at_line_start = True
        self._position: tuple[int, int] | None = None  # (turn, attempt) of the text on screen
        self._turn_text: dict[int, str] = {}
        self.streamed_any = False

    @property
    def last_turn_text(self) -> str:
        """Text of the last model turn that streamed (what a completed run returns as output)."""
        if not self._turn_text:
            return ""
        return self._turn_text[max(self._turn_text)]

    def handle(self, record: EventRecord) -> None:
        if record.run_id != self.run_id:
            return
        event = record.event
        kind = event.get("type")
        if kind == "model_delta":
            self._delta(event)
        elif kind == "tool_started":
            arguments = _one_line(str(event.get("arguments") or ""))[:120]
            self._note(f"→ {event.get('tool_name')} {arguments}".rstrip())
        elif kind == "tool_completed":
            error = event.get("error")
            if error:
                self._note(f"✗ {event.get('tool_name')}: {_one_line(str(error))}", style="red")
            else:
                self._note(f"✓ {event.get('tool_name')}")
        elif kind == "user_message_queued":
            count = event.get("count")
            self._note(f"✉ {count} queued message(s) taken into the run")

    def finish(self) -> None:
        """End the streamed text with a newline (before the summary is printed)."""
        self._end_line()

    # internals ---------------------------------------------------------------------------

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
        ("metadata", json.dumps(record.metadata, ensure_ascii=False) if record.metadata else None),
    ]
    for label, value in rows:
        if value is not None:
            table.add_row(label, value if isinstance(value, Text) else Text(value))
    console.print(table)


def _agent_label(record: RunRecord) -> str:
    if record.agent_definition_version is None:
        return record.agent_id
    return f"{record.agent_id} (v{record.agent_definition_version})"


def _row(label: str, value: str) -> Text:
    return Text.assemble((f"  {label:<8} ", "dim"), value)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
