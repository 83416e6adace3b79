"""The live watch view: `otherone.client.watch` folded and rendered without a terminal, and the
``otherone watch`` / ``otherone run --follow`` commands as real subprocesses.

Why: the view must show what the events say (tree, status, text, usage) however they arrive
(late, twice, from runs it has not seen start), and the commands are a contract for people and
scripts: they end when the root ends, with the exit code `otherone run` uses; ``--json`` is one
parseable envelope a line; an unknown run id is exit 3; a terminal gets a live display, a pipe
plain lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import io
import json
import os
import re
import struct
import sys
import termios
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request, root_run_id
from otherone.client.console import EventPrinter, make_console
from otherone.client.watch import (
    WatchMode,
    WatchState,
    follow_tree,
    print_summary,
    render_live,
    render_summary,
    render_tree,
)
from otherone.contracts import EventRecord
from otherone.examples import EXAMPLE_CONFIG
from otherone.store import Store
from otherone.toml_config import load_config
from tests.harness import agent_env, wait_until
from tests.test_cli import (
    REPO_ROOT,
    TEAM_ANSWER,
    TEAM_QUESTION,
    Completed,
    address_of,
    assert_one_line_error,
    cli_env,
    otherone,
)

pytestmark = pytest.mark.timeout(120)

ROOT = "run-root"
START = datetime(2025, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- event builders


class Events:
    """Envelopes as the store returns them: one sequence for the tree, 100 ms apart."""

    def __init__(self, root: str = ROOT) -> None:
        self.root = root
        self.records: list[EventRecord] = []

    def add(self, run_id: str, agent_id: str, **body: object) -> EventRecord:
        depth = run_id.count("/")
        record = EventRecord.model_validate(
            {
                "event_id": f"e{len(self.records)}",
                "sequence": len(self.records) + 1,
                "timestamp": START + timedelta(milliseconds=100 * len(self.records)),
                "root_run_id": self.root,
                "run_id": run_id,
                "parent_run_id": run_id.rpartition("/")[0] if depth else None,
                "agent_id": agent_id,
                "depth": depth,
                "event": body,
            }
        )
        self.records.append(record)
        return record


def usage(tokens_in: int, tokens_out: int) -> dict[str, int]:
    return {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "total_tokens": tokens_in + tokens_out,
    }


def team_events(*, finished: bool = True) -> Events:
    """The example team's run as its worker emits it (coordinator -> researcher + writer)."""
    research, write = f"{ROOT}/call_research", f"{ROOT}/call_write"
    ev = Events()
    ev.add(ROOT, "coordinator", type="run_started")
    ev.add(ROOT, "coordinator", type="model_started", turn=1, attempt=1)
    ev.add(ROOT, "coordinator", type="model_delta", content="I'll ask.", turn=1, attempt=1)
    ev.add(ROOT, "coordinator", type="model_completed", turn=1, usage=usage(59, 21))
    for call_id, target in (("call_research", "researcher"), ("call_write", "writer")):
        ev.add(ROOT, "coordinator", type="agent_call_started", call_id=call_id, target=target)
    ev.add(research, "researcher", type="run_started")
    ev.add(write, "writer", type="run_started")
    ev.add(research, "researcher", type="model_started", turn=1, attempt=1)
    ev.add(research, "researcher", type="model_delta", content="Looking up.", turn=1, attempt=1)
    ev.add(write, "writer", type="model_started", turn=1, attempt=1)
    ev.add(research, "researcher", type="model_completed", turn=1, usage=usage(67, 8))
    ev.add(write, "writer", type="model_delta", content="Morning coffee ", turn=1, attempt=1)
    ev.add(
        research,
        "researcher",
        type="tool_started",
        tool_call_id="c1",
        tool_name="get_weather",
        arguments='{"city": "Paris"}',
    )
    if not finished:
        return ev
    ev.add(write, "writer", type="model_delta", content="on a terrace.", turn=1, attempt=1)
    ev.add(write, "writer", type="model_completed", turn=1, usage=usage(66, 34))
    ev.add(
        research, "researcher", type="tool_completed", tool_call_id="c1", tool_name="get_weather"
    )
    ev.add(write, "writer", type="run_completed")
    ev.add(research, "researcher", type="model_started", turn=2, attempt=1)
    ev.add(research, "researcher", type="model_delta", content="Sunny.", turn=2, attempt=1)
    ev.add(research, "researcher", type="model_completed", turn=2, usage=usage(155, 19))
    ev.add(research, "researcher", type="run_completed")
    for call_id, target in (("call_research", "researcher"), ("call_write", "writer")):
        ev.add(
            ROOT,
            "coordinator",
            type="agent_call_completed",
            call_id=call_id,
            target=target,
            outcome="completed",
            child_run_id=f"{ROOT}/{call_id}",
        )
    ev.add(ROOT, "coordinator", type="model_started", turn=2, attempt=1)
    ev.add(ROOT, "coordinator", type="model_delta", content="Here is your day.", turn=2, attempt=1)
    ev.add(ROOT, "coordinator", type="model_completed", turn=2, usage=usage(474, 64))
    ev.add(ROOT, "coordinator", type="run_completed")
    return ev


def fold(records: list[EventRecord]) -> WatchState:
    state = WatchState(ROOT)
    for record in records:
        state.apply(record)
    return state


def rendered(renderable: object, width: int = 160) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    console.print(renderable)
    output = console.file
    assert isinstance(output, io.StringIO)
    return output.getvalue()


def rows(summary: str) -> dict[str, list[str]]:
    """The summary table's rows by their first cell (agent id or "total (...)")."""
    found: dict[str, list[str]] = {}
    for line in summary.splitlines():
        cells = [cell for cell in re.split(r"\s{2,}", line.strip()) if cell]
        if cells and not set(line.strip()) <= set("─━ "):
            found[cells[0]] = cells[1:]
    return found


# --------------------------------------------------------------------------- pure folding


def test_team_run_folds_into_tree_and_summary() -> None:
    state = fold(team_events().records)
    end = START + timedelta(hours=1)  # a finished run's durations do not depend on "now"

    assert state.finished and state.events_seen == 28
    assert [view.agent_id for view in state.ordered()] == ["coordinator", "researcher", "writer"]
    coordinator, researcher, writer = state.ordered()
    assert coordinator.status == researcher.status == writer.status == "completed"
    assert (researcher.call_id, writer.call_id) == ("call_research", "call_write")
    assert (coordinator.model_calls, researcher.model_calls, writer.model_calls) == (2, 2, 1)
    assert (coordinator.agent_calls, researcher.tool_calls) == (2, 1)
    assert coordinator.tokens == 59 + 21 + 474 + 64
    assert researcher.duration(end) == pytest.approx(1.5)  # run_started #7 .. run_completed #22

    summary = rendered(render_summary(state, end))
    table = rows(summary)
    assert table["coordinator"] == ["completed", "2", "0", "2", "618", "2.70 s"], summary
    assert table["researcher"] == ["call_research", "completed", "2", "1", "0", "249", "1.50 s"]
    assert table["writer"] == ["call_write", "completed", "1", "0", "0", "100", "1.00 s"]
    assert table["total (3 runs)"] == ["5", "1", "2", "967", "2.70 s"], summary
    tree = rendered(render_tree(state, end))
    assert re.search(r"coordinator  completed  turn 2 · 2 model calls · 2 agent calls", tree)
    assert re.search(r"[├└]── researcher  call_research  completed", tree), tree
    assert re.search(r"[├└]── writer  call_write  completed", tree), tree


def test_live_view_mid_run_shows_spinners_text_tails_and_activity() -> None:
    state = fold(team_events(finished=False).records)
    now = START + timedelta(seconds=5)

    assert not state.finished
    view = rendered(render_live(state, now))
    tree, _, rest = view.partition("╭")
    # The coordinator waits for both children; the researcher runs a tool; the writer streams.
    assert "coordinator  running  turn 1" in tree
    assert "waiting for researcher, writer" in tree
    assert re.search(r"researcher  call_research  running .*→ get_weather", tree), tree
    writer_line = next(line for line in tree.splitlines() if "call_write" in line)
    assert "model call" in writer_line and writer_line.split("── ")[1][0] in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    # Text tails of the active runs, most recently active first; recent tool and agent calls.
    panels = re.findall(r"╭─ (\w+)  turn \d", view)
    assert panels == ["researcher", "writer", "coordinator"], view
    assert "Looking up." in rest and "Morning coffee" in rest and "I'll ask." in rest
    assert 'researcher → get_weather {"city": "Paris"}' in rest
    assert "coordinator ↳ writer called (call_write)" in rest
    assert "5.0 s" in view.splitlines()[0]  # header: elapsed time of the root


def test_replays_and_overlaps_change_nothing() -> None:
    records = team_events().records
    once = fold(records)
    twice = fold(records[:20] + records[10:] + records)
    end = START + timedelta(hours=1)

    assert twice.events_seen == once.events_seen == len(records)
    assert rendered(render_summary(twice, end)) == rendered(render_summary(once, end))
    assert rendered(render_live(twice, end)) == rendered(render_live(once, end))


def test_failures_refusals_retries_and_unseen_starts() -> None:
    ev = Events()
    ev.add(ROOT, "boss", type="run_started")
    ev.add(ROOT, "boss", type="model_started", turn=1, attempt=1)
    ev.add(ROOT, "boss", type="model_delta", content="lost", turn=1, attempt=1)
    ev.add(ROOT, "boss", type="model_started", turn=1, attempt=2)  # retried model call
    ev.add(ROOT, "boss", type="thinking_delta", content="hmm", turn=1, attempt=2)
    mid_retry = rendered(render_live(fold(ev.records), START + timedelta(seconds=1)))
    ev.add(ROOT, "boss", type="model_delta", content="kept", turn=1, attempt=2)
    ev.add(ROOT, "boss", type="model_completed", turn=1, usage={})
    ev.add(ROOT, "boss", type="agent_call_started", call_id="call_x", target="secret")
    ev.add(
        ROOT,
        "boss",
        type="agent_call_completed",
        call_id="call_x",
        target="secret",
        outcome="failed",
        code="agent_call_denied",
    )
    ev.add(ROOT, "boss", type="agent_call_started", call_id="call_y", target="helper")
    # The helper's run_started was lost: its first event is a tool call; then an event type
    # this view does not know.
    ev.add(f"{ROOT}/call_y", "helper", type="tool_started", tool_call_id="t", tool_name="add")
    ev.add(f"{ROOT}/call_y", "helper", type="something_new", value=1)
    ev.add(f"{ROOT}/call_y/call_z", "deep", type="run_started")  # parent never announced it
    failure = {"code": "budget_exceeded", "message": "max_iterations (1)\nreached"}
    ev.add(ROOT, "boss", type="run_failed", status="budget_exceeded", failure=failure)
    state = fold(ev.records)

    assert "thinking…" in mid_retry and "hmm" in mid_retry and "lost" not in mid_retry
    boss = state.root
    assert boss is not None
    assert boss.model_retries == 1 and boss.model_calls == 1 and boss.tokens is None
    assert boss.text == "kept" and boss.status == "budget_exceeded"
    assert boss.failure == "budget_exceeded: max_iterations (1) reached"
    secret = state.runs[f"{ROOT}/call_x"]
    assert secret.status == "refused" and secret.failure == "agent_call_denied"
    assert secret.started_at is None and secret.duration(START) is None
    helper = state.runs[f"{ROOT}/call_y"]
    assert helper.status == "running" and helper.started_at is not None
    assert [view.agent_id for view in state.ordered()] == ["boss", "secret", "helper", "deep"]
    assert state.events_seen == len(ev.records)

    summary = rows(rendered(render_summary(state, START + timedelta(seconds=2))))
    assert summary["boss"] == ["budget exceeded", "1", "0", "2", "-", "1.30 s"]
    assert summary["secret"] == ["call_x", "refused", "0", "0", "0", "-", "-"]
    activity = [item.text for item in state.activity]
    assert "↻ model call retried (attempt 2)" in activity
    assert "↳ secret refused: agent_call_denied" in activity
    assert activity[-1] == "■ budget exceeded: budget_exceeded: max_iterations (1) reached"


def test_verbose_shows_the_start_of_each_tools_result() -> None:
    """``--verbose``: a tool's end shows what it returned (the event's bounded ``result``), in
    plain lines and in the live view's recent activity; without it, the name alone."""
    ev = Events()
    ev.add(ROOT, "clerk", type="run_started")
    ev.add(ROOT, "clerk", type="tool_started", tool_call_id="c", tool_name="add", arguments="{}")
    ev.add(ROOT, "clerk", type="tool_completed", tool_call_id="c", tool_name="add", result="5")
    for verbose, line in ((True, "✓ add → 5"), (False, "✓ add")):
        err = io.StringIO()
        printer = EventPrinter(ROOT, io.StringIO(), make_console(err), verbose=verbose)
        state = WatchState(ROOT, verbose=verbose)
        for record in ev.records:
            printer.handle(record)
            state.apply(record)
        assert err.getvalue().splitlines()[-1] == line
        assert state.activity[-1].text == line


@pytest.mark.parametrize("width", [80, 120])
def test_the_summary_fits_the_terminal_whole(width: int) -> None:
    """On a terminal the table is narrowed to fit (short headers, then fewer columns) rather
    than cut: at 80 columns rich cut its own headers ("model cal…") and cells ("cle…")."""
    state = fold(team_events().records)
    output = io.StringIO()
    console = Console(file=output, width=width, force_terminal=True, color_system=None)
    print_summary(console, state, START + timedelta(hours=1))
    text = output.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width, text
    table = rows(text)
    header = "model calls" if width == 120 else "model"
    assert header in text.splitlines()[0], text
    assert "completed" in table["researcher"] and table["researcher"][-1] == "1.50 s", text
    assert table["total (3 runs)"][:2] == ["5", "1"], text


def test_summary_is_not_folded_on_a_narrow_pipe() -> None:
    """Not on a terminal, the table keeps one line per run whatever the console width."""
    state = fold(team_events().records)
    output = io.StringIO()
    print_summary(make_console(output), state, START + timedelta(hours=1))
    lines = output.getvalue().splitlines()
    assert len(lines) == 7, output.getvalue()  # header, rule, 3 runs, rule, total
    assert max(len(line) for line in lines) > 80  # wider than the console: not folded
    table = rows(output.getvalue())
    assert list(table) == ["run", "coordinator", "researcher", "writer", "total (3 runs)"]
    assert table["researcher"][-1] == "1.50 s"


async def _replay(records: list[EventRecord]) -> AsyncIterator[EventRecord]:
    for record in records:
        await asyncio.sleep(0)
        yield record


async def test_follow_tree_modes_show_the_same_stream() -> None:
    """json: one envelope a line; plain: `otherone run`'s lines; live: a display that clears."""
    records = team_events().records

    out = io.StringIO()
    state = await follow_tree(_replay(records), WatchState(ROOT), mode=WatchMode.JSON, out=out)
    parsed = [EventRecord.model_validate_json(line) for line in out.getvalue().splitlines()]
    assert parsed == records and state.finished

    out, err = io.StringIO(), io.StringIO()
    printer = EventPrinter(ROOT, out, make_console(err))
    state = await follow_tree(
        _replay(records), WatchState(ROOT), mode=WatchMode.PLAIN, out=out, printer=printer
    )
    assert out.getvalue() == "I'll ask.\nHere is your day.\n" and state.finished
    assert "↳ researcher completed (call_research" in err.getvalue()

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100, height=40)
    state = await follow_tree(
        _replay(records), WatchState(ROOT), mode=WatchMode.LIVE, out=out, live_console=console
    )
    assert state.finished
    drawn = screen.getvalue()
    assert "coordinator" in drawn and "\x1b[?25l" in drawn  # drawn with the cursor hidden
    assert drawn.rindex("\x1b[?25h") > drawn.rindex("\x1b[?25l")  # ... then shown again
    assert drawn.endswith("\x1b[1A\x1b[2K")  # and the display was cleared (lines erased)


# --------------------------------------------------------------------------- the commands


@pytest.fixture
def team_env(temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path) -> dict[str, str]:
    """CLI settings for the session server; the store (the worker's, `agent_env`'s) exists."""
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    Store.open(env["OTHERONE_DATABASE_URL"]).close()
    return env


async def _start_team_run(client: Client, task_queue: str, key: str) -> str:
    """Start the example team's run on a queue that has no worker yet: it waits for one."""
    agents = AgentClient(client, task_queue=task_queue)
    request = build_request(entry_agent="coordinator", input=TEAM_QUESTION, idempotency_key=key)
    handle = await agents.start(request)
    assert handle.run_id == root_run_id(request)
    return handle.run_id


async def _spawn(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "otherone.client.cli",
        *args,
        cwd=REPO_ROOT,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _attached(process: asyncio.subprocess.Process) -> str:
    """Wait for `watch`'s first stderr line (it has found the run and reads its events)."""
    assert process.stderr is not None
    line = await asyncio.wait_for(process.stderr.readline(), 60)
    assert line.startswith(b"watching run "), line
    return line.decode()


async def _finish(process: asyncio.subprocess.Process, head: str) -> Completed:
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return Completed(process.returncode, stdout.decode(), head + stderr.decode(), 0.0)


def _assert_team_summary(result: Completed) -> None:
    table = rows(result.stderr)
    # agent.call is a tool call (usage counts it, its events say so too), as in the seed.
    assert table["coordinator"][:4] == ["completed", "2", "2", "2"], result.describe()
    assert table["researcher"][:5] == ["call_research", "completed", "2", "1", "0"]
    assert table["writer"][:5] == ["call_write", "completed", "1", "0", "0"]
    assert table["total (3 runs)"][:3] == ["5", "3", "2"], result.describe()
    assert "✓ completed  coordinator" in result.stderr


async def test_watch_follows_a_live_team_run_until_the_root_ends(
    client: Client, task_queue: str, tmp_path: Path, team_env: dict[str, str]
) -> None:
    run_id = await _start_team_run(client, task_queue, f"watch-{task_queue}")
    process = await _spawn("watch", run_id, "--verbose", env=team_env)
    head = await _attached(process)
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path):
        result = await _finish(process, head)

        assert result.code == 0, result.describe()
        assert TEAM_ANSWER in result.stdout  # the root's text (plain mode: streamed)
        assert "Looking up the weather" not in result.stdout  # children's text: never stdout
        assert "↳ researcher started (call_research)" in result.stderr
        _assert_team_summary(result)
        assert f"/namespaces/default/workflows/{run_id}" in result.stderr
        # --verbose: what the tool returned, on the line of its end (its start, one line).
        weather = '{"city": "Paris", "condition": "sunny", "temperature_c": 21, "wind_kmh": 12}'
        assert f"researcher ✓ get_weather → {weather}\n" in result.stderr, result.describe()

        # A finished run: a child's id watches its root's tree, which has ended: exit at once.
        child = await otherone("watch", f"{run_id}/writer.call_write", env=team_env)
        assert child.code == 0, child.describe()
        assert f"watching run {run_id} " in child.stderr
        _assert_team_summary(child)
        assert "researcher ✓ get_weather\n" in child.stderr  # not verbose: the name alone


async def test_watch_json_prints_one_envelope_per_line(
    client: Client, task_queue: str, tmp_path: Path, team_env: dict[str, str]
) -> None:
    run_id = await _start_team_run(client, task_queue, f"watch-json-{task_queue}")
    process = await _spawn("watch", run_id, "--json", env=team_env)
    head = await _attached(process)
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path):
        result = await _finish(process, head)

    assert result.code == 0, result.describe()
    records = [EventRecord.model_validate_json(line) for line in result.stdout.splitlines()]
    sequences = [record.sequence for record in records]
    assert sequences == sorted(set(sequences)) and sequences[0] == 1, sequences
    assert {record.root_run_id for record in records} == {run_id}
    assert {record.run_id for record in records} == {
        run_id,
        f"{run_id}/researcher.call_research",
        f"{run_id}/writer.call_write",
    }
    last = records[-1]
    assert (last.run_id, last.event["type"]) == (run_id, "run_completed")
    assert all(json.loads(line)["schema_version"] == 1 for line in result.stdout.splitlines())
    assert result.stderr == head  # nothing but the "watching" line on stderr


async def test_watch_exit_code_follows_the_outcome_and_unknown_runs_exit_3(
    client: Client, task_queue: str, tmp_path: Path, team_env: dict[str, str]
) -> None:
    run_id = await _start_team_run(client, task_queue, f"watch-cancel-{task_queue}")
    process = await _spawn("watch", run_id, env=team_env)
    head = await _attached(process)
    agents = AgentClient(client, task_queue=task_queue)
    await agents.cancel(run_id)  # before any worker: the run ends cancelled when one comes
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path):
        result = await _finish(process, head)
    assert result.code == 5, result.describe()  # cancelled, as `otherone run` exits
    assert "■ cancelled  coordinator" in result.stderr, result.describe()

    unknown = await otherone("watch", "run-does-not-exist", env=team_env)
    assert_one_line_error(unknown, 3, "run 'run-does-not-exist' not found")
    bad_id = await otherone("watch", "no such id!", env=team_env)
    assert_one_line_error(bad_id, 3, "not found")
    no_store = {**team_env, "OTHERONE_DATABASE_URL": f"sqlite:///{tmp_path / 'absent.db'}"}
    absent = await otherone("watch", run_id, env=no_store)
    assert_one_line_error(absent, 2, "no event store at", "absent.db")
    # Another (empty) store: nothing to show, but the watch still ends with the run's code.
    other = f"sqlite:///{tmp_path / 'other.db'}"
    Store.open(other).close()
    empty = await otherone("watch", run_id, env={**team_env, "OTHERONE_DATABASE_URL": other})
    assert empty.code == 5, empty.describe()
    assert "the store has no events of this run" in empty.stderr, empty.describe()


async def test_run_follow_plain_and_json(
    client: Client, task_queue: str, tmp_path: Path, team_env: dict[str, str]
) -> None:
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path):
        plain, as_json, refused = await asyncio.gather(
            otherone("run", "coordinator", TEAM_QUESTION, "--follow", env=team_env),
            otherone("run", "coordinator", TEAM_QUESTION, "-f", "--json", env=team_env),
            otherone("run", "coordinator", TEAM_QUESTION, "--follow", "-q", env=team_env),
        )

    assert plain.code == 0, plain.describe()
    assert TEAM_ANSWER in plain.stdout and plain.stdout.count(TEAM_ANSWER) == 1
    _assert_team_summary(plain)

    assert as_json.code == 0, as_json.describe()
    records = [EventRecord.model_validate_json(line) for line in as_json.stdout.splitlines()]
    sequences = [record.sequence for record in records]
    assert sequences == sorted(set(sequences)), sequences
    assert len({record.run_id for record in records}) == 3
    assert records[-1].event["type"] == "run_completed" and records[-1].depth == 0
    assert as_json.stderr == "", as_json.describe()

    assert_one_line_error(refused, 2, "--follow", "--quiet")


async def test_watch_on_a_terminal_draws_a_live_view(
    client: Client, task_queue: str, tmp_path: Path, team_env: dict[str, str]
) -> None:
    """Under a pseudo-terminal `watch` draws (and clears) a live display, then the summary."""
    run_id = await _start_team_run(client, task_queue, f"watch-tty-{task_queue}")
    primary, secondary = os.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**team_env, "TERM": "xterm-256color"}
    for name in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"):
        env.pop(name, None)  # rich must see the terminal itself
    env.pop("TTY_INTERACTIVE", None)
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "otherone.client.cli",
            "watch",
            run_id,
            cwd=REPO_ROOT,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=secondary,
            stderr=secondary,
        )
    finally:
        os.close(secondary)
    screen = bytearray()

    def read_all() -> None:
        with contextlib.suppress(OSError):  # EIO once the child has closed the terminal
            while chunk := os.read(primary, 65536):
                screen.extend(chunk)

    reader = asyncio.ensure_future(asyncio.to_thread(read_all))
    try:
        await wait_until(lambda: b"watching run" in screen, within=60, message="watch to start")
        async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path):
            code = await asyncio.wait_for(process.wait(), 60)
            await asyncio.wait_for(reader, 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await asyncio.wait_for(reader, 30)
        os.close(primary)

    text = screen.decode(errors="replace")
    assert code == 0, text
    assert "\x1b[?25l" in text and "\x1b[?25h" in text, text  # a live display was drawn
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")
    for agent_id in ("coordinator", "researcher", "writer"):
        assert re.search(rf"{agent_id} .*completed", plain), plain
    assert "total (3 runs)" in plain and TEAM_ANSWER in plain, plain
    assert re.search(rf"run {run_id} · \d+ events", plain), plain  # the live view's header


async def test_watch_on_a_terminal_approves_a_waiting_call_with_one_key(
    client: Client, task_queue: str, tmp_path: Path, team_env: dict[str, str]
) -> None:
    """The clerk's sum waits for a person: the live view offers `a`/`d`, and `a` typed on the
    terminal approves it (by this client's identity); the run completes."""
    primary, secondary = os.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**team_env, "TERM": "xterm-256color"}
    for name in (
        "COLUMNS",
        "LINES",
        "NO_COLOR",
        "FORCE_COLOR",
        "TTY_COMPATIBLE",
        "TTY_INTERACTIVE",
    ):
        env.pop(name, None)
    screen = bytearray()

    def read_all() -> None:
        with contextlib.suppress(OSError):  # EIO once the child has closed the terminal
            while chunk := os.read(primary, 65536):
                screen.extend(chunk)

    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path) as agents:
        handle = await agents.agents.start(build_request(entry_agent="clerk", input="2 + 3?"))
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "otherone.client.cli", "watch", handle.run_id,
                cwd=REPO_ROOT, env=env, stdin=secondary, stdout=secondary, stderr=secondary,
            )  # fmt: skip
        finally:
            os.close(secondary)
        reader = asyncio.ensure_future(asyncio.to_thread(read_all))
        try:
            await wait_until(lambda: b"to approve" in screen, within=60, message="the prompt")
            os.write(primary, b"a")
            result = await asyncio.wait_for(handle.result(), 60)
            code = await asyncio.wait_for(process.wait(), 60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await asyncio.wait_for(reader, 30)
            os.close(primary)
        decided = [
            record.event
            for record in agents.store.read_events(handle.run_id)
            if record.event["type"] == "approval_decided"
        ]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode(errors="replace"))
    assert result.outcome.value == "completed", text
    assert code == 0, text
    assert [event["decision"] for event in decided] == ["approved"], decided
