"""The waterfall fold (`otherone.client.trace_view`) on hand-built envelopes: a retried tool, a
superseded model attempt, a child under its agent call, an approval wait, a sleep, open bars;
and its terminal rendering (`otherone.client.trace_render`)."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console

from otherone.client.trace_render import render_trace
from otherone.client.trace_view import TraceBar, TraceState, fold
from otherone.contracts import EventRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ROOT, CHILD = "root", "root/worker.call_1"


class Tree:
    """Envelopes of one tree, numbered in order, ``at`` seconds after T0."""

    def __init__(self) -> None:
        self.records: list[EventRecord] = []

    def add(self, at: float, run_id: str, **event: Any) -> None:
        child = run_id != ROOT
        self.records.append(
            EventRecord(
                event_id=f"e{len(self.records)}",
                sequence=len(self.records) + 1,
                timestamp=T0 + timedelta(seconds=at),
                root_run_id=ROOT,
                run_id=run_id,
                parent_run_id=ROOT if child else None,
                agent_id="worker" if child else "boss",
                depth=1 if child else 0,
                event=event,
            )
        )


def whole_tree() -> Tree:
    tree = Tree()
    add = tree.add
    add(0, ROOT, type="run_started")
    add(1, ROOT, type="model_started", turn=1, attempt=1, model="fast")
    add(2, ROOT, type="model_completed", turn=1, attempt=1, model="fast", error="boom")
    add(3, ROOT, type="model_started", turn=1, attempt=2, model="fast", supersedes_attempt=1)
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15, "cost": "0.0015"}
    add(4, ROOT, type="model_completed", turn=1, attempt=2, model="fast", usage=usage)
    flaky = {"tool_call_id": "t1", "tool_name": "flaky"}
    add(5, ROOT, type="tool_started", attempt=1, arguments="{}", **flaky)
    add(6, ROOT, type="tool_completed", attempt=1, error="attempt failed: RuntimeError", **flaky)
    add(7, ROOT, type="tool_started", attempt=2, arguments="{}", **flaky)
    add(8, ROOT, type="tool_completed", attempt=2, error=None, result="ok", **flaky)
    add(9, ROOT, type="approval_requested", call_id="t2", tool_name="send", kind="approval")
    add(11, ROOT, type="approval_decided", call_id="t2", tool_name="send", decision="approved",
        decided_by="ann")  # fmt: skip
    call = {"tool_call_id": "call_1", "tool_name": "agent.call"}
    add(12, ROOT, type="tool_started", arguments='{"agent": "worker"}', **call)
    add(12.5, ROOT, type="agent_call_started", call_id="call_1", target="worker",
        child_run_id=CHILD)  # fmt: skip
    add(13, CHILD, type="run_started", agent_call_id="call_1")
    add(14, CHILD, type="model_started", turn=1, attempt=1, model="fast")
    add(15, CHILD, type="model_completed", turn=1, attempt=1, model="fast",
        usage={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5})  # fmt: skip
    nap = {"tool_call_id": "s1", "tool_name": "time.sleep"}
    add(16, CHILD, type="tool_started", arguments='{"seconds": 5}', **nap)
    add(16.5, CHILD, type="sleep_started", until="later", seconds=5, **nap)
    return tree


def bar(bars: list[TraceBar], bar_id: str) -> TraceBar:
    return next(found for found in bars if found.id == bar_id)


def test_a_tree_folds_into_nested_bars_with_open_ones_up_to_now() -> None:
    now = T0 + timedelta(seconds=20)
    trace = fold(ROOT, whole_tree().records, now)
    bars = trace.bars
    assert not trace.finished and trace.end is None and trace.events == 18
    root = bars[0]
    assert (root.kind, root.depth, root.status, root.end) == ("run", 0, "running", None)
    assert root.duration_seconds == 20  # open: up to now
    assert (root.total_tokens, root.cost) == (15, "0.0015")  # its own calls' only

    failed, answered = bar(bars, "model:root:1.1"), bar(bars, "model:root:1.2")
    assert (failed.status, failed.error, failed.superseded, failed.retried) == (
        "failed", "boom", True, True,
    )  # fmt: skip
    assert (answered.status, answered.superseded, answered.total_tokens) == ("completed", False, 15)
    assert (answered.profile, answered.name, answered.duration_seconds) == ("fast", "chat fast", 1)
    assert answered.detail == "/v1/runs/root/trace/model/1?attempt=2"

    first, second = bar(bars, "tool:root:t1.1"), bar(bars, "tool:root:t1.2")
    assert (first.status, first.retried, first.error) == (
        "failed", True, "attempt failed: RuntimeError",
    )  # fmt: skip
    assert (second.status, second.retried, second.attempt) == ("completed", False, 2)
    assert second.detail == "/v1/runs/root/trace/tool/t1"

    wait = bar(bars, "approval:root:t2")
    assert (wait.kind, wait.status, wait.duration_seconds) == ("approval", "approved", 2)
    assert wait.name == "approval: send (approved by ann)"

    call = bar(bars, "tool:root:call_1.1")
    assert (call.kind, call.target, call.child_run_id, call.end) == (
        "agent_call", "worker", CHILD, None,
    )  # fmt: skip
    child = bar(bars, f"run:{CHILD}")
    assert (child.parent_id, child.depth, child.total_tokens) == (call.id, 2, 5)
    sleep = bar(bars, f"sleep:{CHILD}:s1")
    assert (sleep.parent_id, sleep.status, sleep.end) == (f"tool:{CHILD}:s1.1", "running", None)
    assert sleep.depth == 4  # root > agent call > child run > time.sleep > the sleep

    # tree order: each bar after its parent, siblings by start
    order = [found.id for found in bars]
    assert order.index(child.id) == order.index(call.id) + 1
    assert order[:4] == ["run:root", "model:root:1.1", "model:root:1.2", "tool:root:t1.1"]


def test_ends_close_the_open_bars_and_replays_change_nothing() -> None:
    tree = whole_tree()
    nap = {"tool_call_id": "s1", "tool_name": "time.sleep"}
    tree.add(18, CHILD, type="sleep_ended", reason="timer", **nap)
    tree.add(19, CHILD, type="run_completed", status="completed", duration_millis=6000)
    tree.add(20, ROOT, type="agent_call_completed", call_id="call_1", target="worker",
             outcome="completed", child_run_id=CHILD)  # fmt: skip
    tree.add(20, ROOT, type="tool_completed", tool_call_id="call_1", tool_name="agent.call")
    tree.add(21, ROOT, type="run_completed", status="completed", cost="0.5")
    state = TraceState(ROOT)
    for record in tree.records + tree.records[:5]:  # the first five again: replays
        state.apply(record)
    trace = state.trace(T0 + timedelta(seconds=99))
    assert trace.finished and trace.end == T0 + timedelta(seconds=21)
    bars = trace.bars
    assert bar(bars, "run:root").cost == "0.5"  # its end's cost wins
    assert bar(bars, f"sleep:{CHILD}:s1").status == "woke: timer"
    # the sleep's tool call never ended: cut short by its run's end
    assert (bar(bars, f"tool:{CHILD}:s1.1").status, bar(bars, f"tool:{CHILD}:s1.1").end) == (
        "interrupted", T0 + timedelta(seconds=19),
    )  # fmt: skip
    assert bar(bars, "tool:root:call_1.1").status == "completed"
    assert len([b for b in bars if b.kind == "model"]) == 3  # no bar twice


def test_a_denied_call_and_a_call_without_tool_events() -> None:
    tree = Tree()
    tree.add(0, ROOT, type="run_started")
    tree.add(1, ROOT, type="tool_denied", tool_call_id="t9", tool_name="pay", arguments="{}",
             decision="timed_out", error="nobody decided")  # fmt: skip
    tree.add(2, ROOT, type="agent_call_started", call_id="c2", target="worker")
    tree.add(3, ROOT, type="agent_call_completed", call_id="c2", target="worker",
             outcome="failed", code="max_children")  # fmt: skip
    bars = fold(ROOT, tree.records, T0 + timedelta(seconds=5)).bars
    denied = bar(bars, "tool:root:t9.1")
    assert (denied.status, denied.duration_seconds, denied.error) == (
        "timed_out", 0, "nobody decided",
    )  # fmt: skip
    refused = bar(bars, "call:root:c2")
    assert (refused.kind, refused.status, refused.error) == ("agent_call", "failed", "max_children")


def test_the_terminal_waterfall_shows_a_bar_per_row_within_the_width() -> None:
    trace = fold(ROOT, whole_tree().records, T0 + timedelta(seconds=20))
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    console.print(render_trace(trace, T0 + timedelta(seconds=20)))
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 100 for line in lines)
    text = out.getvalue()
    for shown in ("boss", "chat fast", "flaky", "approval: send", "worker", "sleep until later"):
        assert shown in text, shown
    assert "superseded" in text and "retried" in text
    assert "$0.0015" in text and "15" in text
    assert sum("█" in line or "▒" in line or "░" in line for line in lines) >= len(trace.bars)


def test_a_retry_s_events_that_name_no_attempt_are_the_next_attempt() -> None:
    """A retry's small result is stored by the workflow: its events name no attempt."""
    tree = Tree()
    flaky = {"tool_call_id": "w1", "tool_name": "flaky"}
    tree.add(0, ROOT, type="run_started")
    tree.add(1, ROOT, type="tool_started", attempt=1, arguments="{}", **flaky)
    tree.add(2, ROOT, type="tool_completed", attempt=1, error="attempt failed: reset", **flaky)
    tree.add(3, ROOT, type="tool_started", arguments="{}", **flaky)
    tree.add(3, ROOT, type="tool_started", arguments="{}", **flaky)  # again: the same attempt
    tree.add(3, ROOT, type="tool_completed", error=None, result="ok", **flaky)
    tree.add(4, ROOT, type="tool_completed", error="cancelled", **flaky)  # stored again: ignored
    bars = [b for b in fold(ROOT, tree.records, T0 + timedelta(seconds=5)).bars if b.kind == "tool"]
    assert [(b.attempt, b.status, b.retried) for b in bars] == [
        (1, "failed", True),
        (2, "completed", False),
    ]
