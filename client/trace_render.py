"""``otherone trace``'s waterfall: a `Trace` as a rich table, a bar per row on a time axis scaled
to the console's width (pure: "now" is a parameter, the width the console's)."""

from __future__ import annotations

from datetime import datetime

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from otherone.client.trace_view import OPEN, Trace, TraceBar

#: Style of a bar by kind; a failed or retried one is red, an open one cyan.
_KIND_STYLE = {
    "run": "bold green",
    "model": "magenta",
    "tool": "blue",
    "agent_call": "bold blue",
    "approval": "yellow",
    "sleep": "dim blue",
}
_FAILED = frozenset({"failed", "timed_out", "budget_exceeded", "refused", "denied", "interrupted"})
#: Width of the label column at most, and of the time axis at least.
_LABEL_WIDTH = 34
_MIN_AXIS = 10
#: Columns beside the axis: duration, tokens, cost, status (with the table's padding).
_FACT_WIDTHS = (8, 7, 9, 12)


class TraceRenderable:
    """Renders at the console's width (the axis takes what the other columns leave)."""

    def __init__(self, trace: Trace, now: datetime) -> None:
        self.trace, self.now = trace, now

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield waterfall_table(self.trace, self.now, options.max_width)


def render_trace(trace: Trace, now: datetime) -> TraceRenderable:
    return TraceRenderable(trace, now)


def waterfall_table(trace: Trace, now: datetime, width: int) -> Table:
    label_width = min(_LABEL_WIDTH, max(12, width // 3))
    padding = 2 * (1 + len(_FACT_WIDTHS)) + 1  # a cell's sides, but the outer ones
    axis = max(_MIN_AXIS, width - label_width - sum(_FACT_WIDTHS) - padding)
    start = trace.start
    end = trace.end or now
    span = max((end - start).total_seconds(), 0.001) if start is not None else 0.001
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("", width=label_width, no_wrap=True, overflow="ellipsis")
    table.add_column(f"0 … {span:.1f} s", width=axis, no_wrap=True, overflow="crop")
    headers = ("time", "tokens", "cost", "status")
    for header, column_width in zip(headers, _FACT_WIDTHS, strict=True):
        table.add_column(header, width=column_width, no_wrap=True, justify="right")
    for bar in trace.bars:
        table.add_row(
            _label(bar),
            _bar(bar, start, span, axis, now),
            "-" if bar.duration_seconds is None else f"{bar.duration_seconds:.2f}s",
            "" if bar.tokens is None else str(bar.tokens),
            f"${bar.cost}" if bar.cost else "",
            Text(_status(bar), style=_status_style(bar)),
        )
    return table


def _label(bar: TraceBar) -> Text:
    text = Text("  " * bar.depth)
    text.append(bar.name, style="bold" if bar.kind == "run" else "")
    if bar.attempt and (bar.attempt > 1 or bar.retried):
        text.append(f" #{bar.attempt}", style="dim")
    return text


def _bar(bar: TraceBar, start: datetime | None, span: float, axis: int, now: datetime) -> Text:
    if bar.start is None or start is None:
        return Text("")
    offset = (bar.start - start).total_seconds() / span * axis
    length = ((bar.end or now) - bar.start).total_seconds() / span * axis
    left = min(int(offset), axis - 1)
    cells = max(1, min(round(offset + length) - left, axis - left))
    glyph = "░" if bar.superseded or bar.retried else ("▒" if bar.end is None else "█")
    text = Text(" " * left)
    text.append(glyph * cells, style=_bar_style(bar))
    return text


def _bar_style(bar: TraceBar) -> str:
    if bar.status in _FAILED or bar.retried:
        return "red"
    if bar.end is None:
        return "cyan"
    return _KIND_STYLE.get(bar.kind, "")


def _status(bar: TraceBar) -> str:
    status = bar.status.replace("_", " ")
    if bar.superseded:
        return "superseded"
    if bar.retried:
        return "retried"
    return status


def _status_style(bar: TraceBar) -> str:
    if bar.status == OPEN:
        return "cyan"
    if bar.status in _FAILED or bar.superseded or bar.retried:
        return "red" if bar.status in _FAILED and not bar.retried else "yellow"
    return "green" if bar.status in ("completed", "approved") else ""
