"""How ``otherone watch`` draws a `WatchState`: the run tree, the live view (tree, text tails,
recent activity, the decision prompt) and the final summary table, as rich renderables.

Pure functions of the state and "now" (a parameter), so the view is testable without a terminal.
"""

from __future__ import annotations

from datetime import datetime

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.panel import Panel
from rich.segment import Segments
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from otherone.client.watch_state import (
    PENDING,
    REFUSED,
    RUNNING,
    SLEEPING,
    WAITING_FOR_APPROVAL,
    RunView,
    WatchState,
    one_line,
)

_STATUS_STYLE = {
    PENDING: "dim",
    RUNNING: "cyan",
    WAITING_FOR_APPROVAL: "bold yellow",
    SLEEPING: "bold blue",
    "completed": "green",
    "cancelled": "yellow",
    REFUSED: "red",
}
#: Characters of a run's streamed text shown in the live view.
TAIL_CHARS = 240
#: Most active runs whose text the live view shows at once (the most recently active).
MAX_TEXT_PANELS = 4


def render_tree(state: WatchState, now: datetime) -> Tree:
    """The runs as a tree: agent, call id, status, turn, usage, what it is doing now.

    A run in a model call gets a spinner (it animates on a live display, a static frame
    elsewhere).
    """
    root = state.root
    tree = Tree(
        _node(root, now) if root is not None else Text(state.root_run_id, style="bold"),
        guide_style="dim",
    )
    nodes: dict[str, Tree] = {state.root_run_id: tree}
    for view in state.ordered():
        if view.run_id == state.root_run_id:
            continue
        parent = nodes.get(view.parent_run_id or "", tree)
        nodes[view.run_id] = parent.add(_node(view, now))
    return tree


def render_live(state: WatchState, now: datetime, *, tail_chars: int = TAIL_CHARS) -> Group:
    """The whole live view: header, run tree, text tails of active runs, recent activity."""
    parts: list[RenderableType] = [_header(state, now), render_tree(state, now)]
    for view in state.active()[:MAX_TEXT_PANELS]:
        tail = _tail_text(view, tail_chars)
        if tail is None:
            continue
        title = Text.assemble((view.agent_id, "bold"), (f"  turn {view.turn}", "dim"))
        parts.append(Panel(tail, title=title, title_align="left", border_style="dim"))
    if state.activity:
        lines = Text()
        for index, item in enumerate(state.activity):
            if index:
                lines.append("\n")
            lines.append(f"{'  ' * item.depth}{item.agent_id} ", style="bold dim")
            lines.append(item.text, style=item.style)
        parts.append(Panel(lines, title="recent", title_align="left", border_style="dim"))
    if state.decisions_enabled:
        decide = _decision_prompt(state)
        if decide is not None:
            parts.append(decide)
    return Group(*parts)


def _decision_prompt(state: WatchState) -> RenderableType | None:
    """What a person can decide from here: the first open approval, and the keys for it."""
    waiting = state.first_open_approval()
    if waiting is None and state.decision_note is None:
        return None
    text = Text()
    if waiting is not None:
        view, call_id, tool = waiting
        text.append(f"⏸ {view.agent_id} waits for a person: {tool} (call {call_id})\n", "bold")
        text.append("press ", "dim")
        text.append("a", "bold green")
        text.append(" to approve, ", "dim")
        text.append("d", "bold red")
        text.append(" to deny", "dim")
    if state.decision_note is not None:
        text.append(("\n" if waiting is not None else "") + state.decision_note, "yellow")
    return Panel(text, title="decide", title_align="left", border_style="yellow")


#: The summary's columns: key, header, its short form (narrow terminals), right-justified.
_COLUMNS: tuple[tuple[str, str, str, bool], ...] = (
    ("run", "run", "run", False),
    ("call", "call", "call", False),
    ("status", "status", "status", False),
    ("model", "model calls", "model", True),
    ("tools", "tool calls", "tools", True),
    ("agents", "agent calls", "agents", True),
    ("tokens", "tokens", "tokens", True),
    ("duration", "duration", "time", True),
)
#: How the summary is narrowed until it fits a terminal, first to last: (short headers, the
#: columns left out). The run's call id is in `otherone tree`; agent calls and tokens go last.
SUMMARY_LAYOUTS: tuple[tuple[bool, frozenset[str]], ...] = (
    (False, frozenset()),
    (True, frozenset()),
    (True, frozenset({"call"})),
    (True, frozenset({"call", "agents", "tokens"})),
)


def render_summary(
    state: WatchState, now: datetime, *, short: bool = False, without: frozenset[str] = frozenset()
) -> Table:
    """One row per run (tree order): status, model calls, tool calls, agent calls, tokens,
    duration; a total row when the tree has more than one run. ``short`` headers and the
    columns named in ``without`` left out make it narrower (`fitted_summary`)."""
    columns = [column for column in _COLUMNS if column[0] not in without]
    table = Table(box=box.HORIZONTALS, pad_edge=False, header_style="bold", show_edge=False)
    for key, header, brief, right in columns:
        table.add_column(
            brief if short else header,
            justify="right" if right else "left",
            style="dim" if key == "call" else None,
            no_wrap=True,
        )
    views = state.ordered()
    for view in views:
        cells = _summary_cells(view, now)
        table.add_row(*(cells[key] for key, *_ in columns))
    if len(views) > 1:
        table.add_section()
        totals = _total_cells(state, views, now)
        table.add_row(*(totals[key] for key, *_ in columns))
    return table


def fitted_summary(console: Console, state: WatchState, now: datetime) -> Table:
    """`render_summary` in the first of `SUMMARY_LAYOUTS` that fits ``console``'s width
    whole (rich would cut headers and cells to fit: "model cal…", "cle…"); the narrowest if
    none does."""
    for short, without in SUMMARY_LAYOUTS:
        table = render_summary(state, now, short=short, without=without)
        if _natural_width(console, table) <= console.width:
            return table
    return table


def _natural_width(console: Console, table: Table) -> int:
    """The width ``table`` takes uncut (measured against an unbounded width: a measurement
    within the console's own width is capped at it)."""
    return Measurement.get(console, console.options.update(width=100_000), table).maximum


def _summary_cells(view: RunView, now: datetime) -> dict[str, RenderableType]:
    tokens = view.tokens
    seconds = view.duration(now)
    return {
        "run": Text("  " * view.depth + view.agent_id),
        "call": view.call_id or "",
        "status": _status(view),
        "model": str(view.model_calls),
        "tools": str(view.tool_calls),
        "agents": str(view.agent_calls),
        "tokens": "-" if tokens is None else str(tokens),
        "duration": "-" if seconds is None else f"{seconds:.2f} s",
    }


def _total_cells(
    state: WatchState, views: list[RunView], now: datetime
) -> dict[str, RenderableType]:
    known = [view.tokens for view in views if view.tokens is not None]
    root = state.root
    seconds = root.duration(now) if root is not None else None
    return {
        "run": Text(f"total ({len(views)} runs)", style="bold"),
        "call": "",
        "status": "",
        "model": str(sum(view.model_calls for view in views)),
        "tools": str(sum(view.tool_calls for view in views)),
        "agents": str(sum(view.agent_calls for view in views)),
        "tokens": str(sum(known)) if known else "-",
        "duration": "-" if seconds is None else f"{seconds:.2f} s",
    }


def _header(state: WatchState, now: datetime) -> Text:
    root = state.root
    elapsed = root.duration(now) if root is not None else None
    parts = [f"run {state.root_run_id}", _plural(state.events_seen, "event")]
    if elapsed is not None:
        parts.append(f"{elapsed:.1f} s")
    return Text(" · ".join(parts), style="dim")


def _node(view: RunView, now: datetime) -> RenderableType:
    label = Text()
    label.append(view.agent_id, style="bold")
    if view.call_id:
        label.append(f"  {view.call_id}", style="dim")
    label.append("  ")
    label.append_text(_status(view))
    facts: list[str] = []
    if view.turn:
        facts.append(f"turn {view.turn}")
    facts.append(_plural(view.model_calls, "model call"))
    if view.tool_calls:
        facts.append(_plural(view.tool_calls, "tool call"))
    if view.agent_calls:
        facts.append(_plural(view.agent_calls, "agent call"))
    if view.tokens is not None:
        facts.append(f"{view.tokens} tokens")
    seconds = view.duration(now)
    if seconds is not None:
        facts.append(f"{seconds:.1f} s")
    label.append("  " + " · ".join(facts), style="dim")
    doing = _doing(view)
    if doing:
        label.append(f"  {doing}", style="cyan")
    if view.failure and view.terminal:
        label.append(f"  {view.failure}", style="red")
    if view.mcp_unavailable:
        servers = ", ".join(view.mcp_unavailable)
        label.append(f"  ⚠ no tools from MCP {servers}", style="yellow")
    if view.in_model_call and not view.terminal:
        return Spinner("dots", text=label, style="cyan")
    return label


def _doing(view: RunView) -> str:
    """What an active run waits on: its tools, its children, or its model."""
    if view.terminal:
        return ""
    if view.open_tools:
        return "→ " + ", ".join(sorted(set(view.open_tools.values())))
    if view.open_calls:
        return "waiting for " + ", ".join(view.open_calls.values())
    if view.in_model_call:
        return "thinking…" if view.thinking and not view.text else "model call"
    return ""


def _status(view: RunView) -> Text:
    style = _STATUS_STYLE.get(view.status, "red")
    return Text(view.status.replace("_", " "), style=style)


def _tail_text(view: RunView, chars: int) -> Text | None:
    """The end of the run's current text (or thinking, before any text), on one line."""
    if view.text.strip():
        return Text(_tail(view.text, chars))
    if view.thinking.strip():
        return Text(_tail(view.thinking, chars), style="dim italic")
    return None


def _tail(text: str, chars: int) -> str:
    flat = one_line(text)
    return flat if len(flat) <= chars else "…" + flat[-(chars - 1) :]


def print_summary(console: Console, state: WatchState, now: datetime) -> None:
    """`render_summary` on ``console``: on a terminal, narrowed to fit it (`fitted_summary`);
    elsewhere at its natural width (a pipe or a file gets one line per run, never folded)."""
    if console.is_terminal:
        console.print(fitted_summary(console, state, now))
        return
    table = render_summary(state, now)
    options = console.options.update(width=max(console.width, _natural_width(console, table)))
    for line in console.render_lines(table, options, pad=False, new_lines=True):
        console.print(Segments(line), end="")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")
