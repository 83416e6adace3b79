"""Terminal views of run results, records and run trees (`otherone run`'s summary, `show`,
`tree`, the demo's tree). Live events are `otherone.client.console`'s; the same convention
holds: these go to whichever console the caller gives (stderr for a summary, stdout for a
record or a tree asked for).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from otherone.client.console import _one_line
from otherone.run_types import plain_decimal
from otherone.runs import (
    AgentOutput,
    AgentRunResult,
    RunOutcome,
    RunRecord,
    RunStatus,
    RunUsage,
)

__all__ = ["print_record", "print_result_summary", "print_run_tree", "run_tree", "usage_line"]

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


def usage_line(usage: RunUsage) -> str:
    """``123 tokens (in 100, out 23, cache read 80) · $0.00042 · 2 model calls · 1 tool call
    · 0.41 s`` (the cache's tokens when a provider reported some, the cost when priced)."""
    parts: list[str] = []
    if usage.total_tokens is not None or usage.input_tokens is not None:
        total = usage.total_tokens
        if total is None:
            total = (usage.input_tokens or 0) + (usage.output_tokens or 0)
        tokens_in, tokens_out = _or_dash(usage.input_tokens), _or_dash(usage.output_tokens)
        parts.append(f"{total} tokens (in {tokens_in}, out {tokens_out}{_cache_part(usage)})")
    else:
        parts.append("tokens unknown")
    if usage.cost is not None:
        parts.append(dollars(usage.cost))
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
    for server, reason in result.mcp_unavailable.items():
        console.print(_row("mcp", f"server '{server}' offered no tools: {_one_line(reason)}"))
    console.print(_row("usage", usage_line(result.usage)))
    if len(result.usage.models) > 1:  # fallbacks answered some turns, or a chosen model
        answered = ", ".join(f"{model} {turns}" for model, turns in result.usage.models.items())
        console.print(_row("models", f"turns answered: {answered}"))
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
        # Which Temporal execution of the id this is (a run id is used once: later executions
        # of the same workflow id are refused, `run_id_used`).
        ("execution", record.execution_id),
        ("root run id", record.root_run_id if record.root_run_id != record.run_id else None),
        ("parent run id", record.parent_run_id),
        ("agent call id", record.agent_call_id),
        ("agent", _agent_label(record)),
        ("handoffs", _handoff_chain(record)),
        (
            "forked from",
            f"{record.forked_from.run_id} at turn {record.forked_from.turn}"
            if record.forked_from
            else None,
        ),
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
        ("mcp unavailable", _mcp_unavailable(record)),
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
        cost = total_cost(record.usage for record in records)
        if cost is not None:
            parts.append(dollars(cost))
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
    if usage.cost is not None:
        parts.append(dollars(usage.cost))
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


def total_cost(usages: Iterable[RunUsage]) -> Decimal | None:
    """The exact cost of several runs' calls (a tree's: its runs' own usages), or None when
    none of them was priced."""
    costs = [usage.cost for usage in usages if usage.cost is not None]
    return sum(costs, Decimal(0)) if costs else None


def dollars(cost: Decimal) -> str:
    """An exact cost as it reads: ``$0.01145``."""
    return f"${plain_decimal(cost)}"


def _cache_part(usage: RunUsage) -> str:
    read, written = usage.cache_read_tokens or 0, usage.cache_write_tokens or 0
    if not read and not written:
        return ""
    return f", cache read {read}" + (f", cache write {written}" if written else "")


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


def _mcp_unavailable(record: RunRecord) -> str | None:
    """``time: its command was not found (uvx)``, a line per server that offered no tools."""
    lines = [f"{server}: {_one_line(why)}" for server, why in record.mcp_unavailable.items()]
    return "\n".join(lines) or None


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


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")
