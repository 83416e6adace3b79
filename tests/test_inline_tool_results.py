"""Small tool results come back inline (issue 17: no store write on the tool's path).

A result that fits `RuntimeLimits.inline_tool_result_bytes` (with its arguments), of a call
none of whose events was written yet, travels in the tool activity's outcome; the call's entry
and its `tool_started`/`tool_completed` events are written by whoever writes the run's next entries
(the next model call, a handoff, the run's end), in one transaction, once. Anything else is
stored by the tool activity, as before.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client

from otherone.activities.event_buffer import LATE_WRITE_SECONDS, EventBuffer
from otherone.activities.providers.base import ModelRequest, ProviderError, StreamEvent
from otherone.activities.providers.scripted import ScriptedProvider
from otherone.activities.shared import ActivityContext
from otherone.activities.tool_events import deferred_tool_events
from otherone.client.agent_client import build_request
from otherone.contracts import EventRecord, PendingEntry, RunRef
from otherone.definitions import AgentDefinition, RuntimeLimits, RuntimePolicy
from otherone.runs import AgentRunResult, RunOutcome
from otherone.store import EntryRow, Store
from otherone.store.events import EntryEvents
from otherone.tools import ToolError, tool
from tests.harness import agent_env, scripted_config, wait_until

INLINE_TOOL_RESULT_BYTES = RuntimeLimits().inline_tool_result_bytes

REF = RunRef(
    run_id="run-1",
    root_run_id="run-1",
    agent_id="agent",
    depth=0,
    partition_key="p",
    session_id="s1",
    snapshot_version="v1",
)


@tool
async def tick(n: int) -> dict[str, int]:
    """Count one step."""
    return {"n": n}


@tool
async def big(size: int) -> str:
    """A result too large to come back inline."""
    return "x" * size


@tool
async def slow(n: int) -> int:
    """Outlasts the events' write bound: its `tool_started` is written while it runs."""
    await asyncio.sleep(LATE_WRITE_SECONDS * 4)
    return n


@tool
def refuses() -> str:
    """Refuses with a classified error the model reads."""
    raise ToolError.recoverable("not now")


def agent(**fields: Any) -> AgentDefinition:
    return AgentDefinition(id="agent", description="agent", **fields)


def call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "id": call_id}


def tool_events(events: list[EventRecord]) -> list[tuple[str, str, Any, Any]]:
    """(type, call id, arguments, error) of the tool events, in stored order."""
    return [
        (e.event["type"], e.event["tool_call_id"], e.event.get("arguments"), e.event.get("error"))
        for e in events
        if e.event["type"] in ("tool_started", "tool_completed")
    ]


def expected(call_id: str, arguments: str, error: str | None = None) -> list[Any]:
    return [
        ("tool_started", call_id, arguments, None),
        ("tool_completed", call_id, None, error),
    ]


async def run_with(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    turns: list[Any],
    *,
    provider: Any = None,
) -> tuple[AgentRunResult, list[EventRecord], Store, dict[str, str]]:
    """One run of ``turns``; its result, its events and the tool results stored for it."""
    config = scripted_config(
        {"agent": turns},
        agents=[agent(tools=["tick", "big", "slow", "refuses"])],
        tools=[tick, big, slow, refuses],
    )
    providers = {"scripted": provider} if provider is not None else None
    async with agent_env(client, task_queue, config, tmp_path, providers=providers) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        events = [e async for e in env.agents.events(result.run_id)]
        ids = ["c1", "c2", "c3", "c4"]
        stored = env.store.get_tool_results("local", result.run_id, ids)
        entries = env.store.load_entries("local", result.session_id)
    contents = {e.tool_call_id or "": e.content for e in entries if e.role == "tool"}
    return result, events, env.store, {"stored": json.dumps(stored), **contents}


async def test_small_results_come_back_inline_and_their_events_are_stored_once_in_order(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    turns = [
        {"tool_calls": [call("tick", {"n": 1}, "c1"), call("refuses", {}, "c2")]},
        {"tool_calls": [call("tick", {"n": 2}, "c3")]},
        "done",
    ]
    result, events, _, seen = await run_with(client, task_queue, tmp_path, turns)
    assert result.outcome is RunOutcome.COMPLETED
    assert json.loads(seen["stored"]) == {}  # nothing stored on the tool's path
    assert (seen["c1"], seen["c3"]) == ('{"n": 1}', '{"n": 2}')
    assert json.loads(seen["c2"]) == {"error": "not now"}
    assert tool_events(events) == [
        *expected("c1", '{"n": 1}'),
        *expected("c2", "{}", "not now"),
        *expected("c3", '{"n": 2}'),
    ]
    # Each call's events come before the model turn that reads its result.
    types = [(e.event["type"], e.event.get("tool_call_id") or e.event.get("turn")) for e in events]
    assert types.index(("tool_completed", "c2")) < types.index(("model_started", 2))
    assert types.index(("tool_completed", "c3")) < types.index(("model_started", 3))


async def test_large_and_slow_results_are_stored_by_the_tool_activity_as_before(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    turns = [
        {"tool_calls": [call("big", {"size": INLINE_TOOL_RESULT_BYTES}, "c1")]},
        {"tool_calls": [call("slow", {"n": 5}, "c2")]},
        "done",
    ]
    result, events, _, seen = await run_with(client, task_queue, tmp_path, turns)
    assert result.outcome is RunOutcome.COMPLETED
    assert set(json.loads(seen["stored"])) == {"c1", "c2"}
    assert seen["c2"] == "5"
    assert tool_events(events) == [
        *expected("c1", json.dumps({"size": INLINE_TOOL_RESULT_BYTES})),
        *expected("c2", '{"n": 5}'),
    ]


@dataclass
class FailsFirstAttempts:
    """Every model turn's first attempt fails (after its context was loaded), then the script
    plays: the retry must not store the tool events a second time."""

    inner: ScriptedProvider = field(default_factory=ScriptedProvider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if request.attempt == 1:
            raise ProviderError("HTTP 503", retryable=True)
        async for event in self.inner.stream(request):
            yield event


async def test_a_retried_model_call_stores_the_results_events_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    turns = [{"tool_calls": [call("tick", {"n": 1}, "c1")]}, "done"]
    provider = FailsFirstAttempts()
    result, events, _, seen = await run_with(client, task_queue, tmp_path, turns, provider=provider)
    assert result.outcome is RunOutcome.COMPLETED
    assert seen["c1"] == '{"n": 1}'
    assert tool_events(events) == expected("c1", '{"n": 1}')


async def test_a_run_that_ends_after_its_tools_stores_their_entries_and_events(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """No next model call (the run's turns are used up): the run's end writes them."""
    config = scripted_config(
        {"agent": [{"tool_calls": [call("tick", {"n": 1}, "c1")]}, "never"]},
        agents=[agent(tools=["tick"], limits={"max_iterations": 1})],
        tools=[tick],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        events = [e async for e in env.agents.events(result.run_id)]
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is not RunOutcome.COMPLETED
    assert [e.content for e in entries if e.role == "tool"] == ['{"n": 1}']
    assert tool_events(events) == expected("c1", '{"n": 1}')


def inline_entry(key: str, call_id: str) -> PendingEntry:
    return PendingEntry(
        key=key,
        role="tool",
        content='{"n": 1}',
        tool_call_id=call_id,
        tool_name="tick",
        tool_arguments='{"n": 1}',
    )


def types(store: Store) -> list[str]:
    return [str(record.event["type"]) for record in store.read_events("run-1")]


def test_entries_bring_their_events_once_however_often_they_are_written(store: Store) -> None:
    pending = (inline_entry("k1", "c1"), PendingEntry(key="k2", role="user", content="hi"))
    rows = [
        EntryRow(entry_key=entry.key, role=entry.role, content=entry.content or "", run_id="run-1")
        for entry in pending
    ]
    events = EntryEvents(REF, lambda written: deferred_tool_events(pending, written))
    assert store.append_entries_with_their_events("p", "s1", rows, events) == 2
    assert store.append_entries_with_their_events("p", "s1", rows, events) == 0  # a retry
    assert types(store) == ["tool_started", "tool_completed"]
    # The same through a model turn's start.
    later = (inline_entry("k3", "c3"),)
    for _ in range(2):
        store.turn_context(
            "p",
            "s1",
            "run-1:t2:assistant",
            "run-1",
            [],
            lambda _: [EntryRow(entry_key="k3", role="tool", content="1", run_id="run-1")],
            events=EntryEvents(REF, lambda written: deferred_tool_events(later, written)),
        )
    assert types(store) == ["tool_started", "tool_completed"] * 2


async def test_only_unwritten_events_are_handed_on(store: Store) -> None:
    context = ActivityContext(scripted_config({"agent": ["hi"]}), store)
    started = {"type": "tool_started", "tool_call_id": "c1"}
    events = EventBuffer(context, REF)
    events.add(started)
    assert events.drop_unwritten(started)  # nothing written: handed on
    await events.close()
    assert types(store) == []
    events = EventBuffer(context, REF)
    events.add(started, {"type": "tool_progress"})
    assert not events.drop_unwritten(started)  # more than the caller hands on
    await events.flush()
    events.add({"type": "tool_completed"})
    assert not events.drop_unwritten({"type": "tool_completed"})  # its start is written
    await events.close()
    assert types(store) == ["tool_started", "tool_progress", "tool_completed"]


async def test_with_inline_results_off_every_result_is_stored_first(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"agent": [{"tool_calls": [call("tick", {"n": 1}, "c1")]}, "done"]},
        agents=[agent(tools=["tick"])],
        tools=[tick],
        limits=RuntimeLimits(inline_tool_result_bytes=0),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        events = [e async for e in env.agents.events(result.run_id)]
        stored = env.store.get_tool_results("local", result.run_id, ["c1"])
    assert stored == {"c1": '{"n": 1}'}
    assert tool_events(events) == expected("c1", '{"n": 1}')


@tool(approval="always")
async def mail(to: str) -> str:
    """Send a mail (a person approves it first, maybe editing the arguments)."""
    return f"sent to {to}"


async def test_an_approved_edit_is_what_the_inline_results_tool_started_shows(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The tool ran with the person's edit: its (deferred) `tool_started` says so, as the tool
    activity's own did before results came back inline."""
    config = scripted_config(
        {"agent": [{"tool_calls": [call("mail", {"to": "all"}, "c1")]}, "sent"]},
        agents=[agent(tools=["mail"])],
        tools=[mail],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="go"))

        async def listed() -> bool:
            return bool(await env.agents.pending_approvals(handle.run_id))

        await wait_until(listed, within=20, message="the approval request")
        await env.agents.approve(handle.run_id, "c1", {"to": "bob"})
        result = await handle.result()
        events = [e async for e in env.agents.events(result.run_id)]
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.COMPLETED
    assert [e.content for e in entries if e.role == "tool"] == ['"sent to bob"']
    assert tool_events(events) == expected("c1", '{"to": "bob"}')


async def test_a_plain_call_beside_one_that_waits_for_a_person_is_seen_before_the_decision(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A turn that waits for a person (or a child) may last days: its quick calls are stored
    by their tool activity, so watchers (and the audit) see they ran without waiting for it."""
    config = scripted_config(
        {
            "agent": [
                {"tool_calls": [call("mail", {"to": "all"}, "c1"), call("tick", {"n": 1}, "c2")]},
                "sent",
            ]
        },
        agents=[agent(tools=["mail", "tick"], model_overrides={"parallel_tool_calls": True})],
        tools=[mail, tick],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="go"))

        async def ticked() -> bool:
            events = env.store.read_events(handle.run_id, limit=1000)
            return ("tool_completed", "c2") in [
                (e.event["type"], e.event.get("tool_call_id")) for e in events
            ]

        try:
            await wait_until(ticked, within=10, message="tick's tool_completed")
        finally:
            await env.agents.approve(handle.run_id, "c1")
            result = await handle.result()
        events = [e async for e in env.agents.events(result.run_id)]
    assert result.outcome is RunOutcome.COMPLETED
    assert sorted(tool_events(events)) == sorted(
        [*expected("c1", '{"to": "all"}'), *expected("c2", '{"n": 1}')]
    )


@tool
async def blob(size: int) -> str:
    """A result of ``size`` bytes."""
    return "x" * size


async def test_a_wide_turn_stores_its_results_so_the_next_model_call_fits_temporals_limit(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """40 results of 60 KB under a 64 KiB limit: inline, the next model call's input (one
    payload) would be 2.4 MB, over Temporal's 2 MiB; its scheduling failed the workflow task
    again and again and the run never ended."""
    calls = [call("blob", {"size": 60_000}, f"c{i}") for i in range(40)]
    config = scripted_config(
        {"agent": [{"tool_calls": calls}, "done"]},
        agents=[agent(tools=["blob"], model_overrides={"parallel_tool_calls": True})],
        tools=[blob],
        limits=RuntimeLimits(inline_tool_result_bytes=64 * 1024),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="go"))
        result = await asyncio.wait_for(handle.result(), 60)
        stored = env.store.get_tool_results("local", result.run_id, ["c0", "c39"])
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert set(stored) == {"c0", "c39"}


@tool(max_attempts=1)
async def boom() -> str:
    """Fails (not a classified tool error: the run ends)."""
    raise RuntimeError("boom")


async def test_inline_results_cross_continue_as_new_a_handoff_and_a_fatal_end(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Pending inline entries are written once, with their events, whoever writes them: the
    next history's model call, a handoff, the end a fatal result brings."""
    handoff = {"name": "agent.handoff", "id": "h1", "arguments": {"agent": "other"}}
    config = scripted_config(
        {
            "agent": [
                {"tool_calls": [call("tick", {"n": 1}, "c1"), call("tick", {"n": 2}, "c2")]},
                {"tool_calls": [call("tick", {"n": 3}, "c3"), handoff]},
            ],
            "other": [{"tool_calls": [call("boom", {}, "c4")]}, "never"],
        },
        agents=[
            agent(
                tools=["tick"],
                handoff={"agents": ["other"]},
                model_overrides={"parallel_tool_calls": True},
            ),
            AgentDefinition(id="other", description="other", tools=["boom"]),
        ],
        tools=[tick, boom],
        policy=RuntimePolicy(continue_as_new_after_turns=1),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        events = [e async for e in env.agents.events(result.run_id)]
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.FAILED
    tools = [e.content for e in entries if e.role == "tool" and e.tool_name != "agent.handoff"]
    assert tools[:3] == ['{"n": 1}', '{"n": 2}', '{"n": 3}']
    assert json.loads(tools[3])["error"] == "RuntimeError: boom"
    assert [t for t in tool_events(events) if t[1] != "h1"] == [
        *expected("c1", '{"n": 1}'),
        *expected("c2", '{"n": 2}'),
        *expected("c3", '{"n": 3}'),
        *expected("c4", "{}", "RuntimeError: boom"),
    ]
    kinds = [e.event["type"] for e in events]
    last_completed = max(i for i, kind in enumerate(kinds) if kind == "tool_completed")
    assert last_completed < kinds.index("run_failed")


def test_a_turns_start_holds_the_trees_event_lock_only_to_write_its_events(
    store: Store, monkeypatch: Any
) -> None:
    """`turn_context` writes inline results' events in its transaction: not before reading the
    session's context (on PostgreSQL the tree's event appenders, e.g. a child's streaming
    deltas, would wait for that read; SQLite's single writer has them wait anyway)."""
    if store.engine.dialect.name != "postgresql":
        return
    reading, go_on = threading.Event(), threading.Event()
    read_context = store._session_context

    def slow_read(*args: Any, **kwargs: Any) -> Any:
        reading.set()
        go_on.wait(10)
        return read_context(*args, **kwargs)

    monkeypatch.setattr(store, "_session_context", slow_read)
    pending = (inline_entry("k1", "c1"),)
    rows = [EntryRow(entry_key="k1", role="tool", content='{"n": 1}', run_id="run-1")]
    starting = threading.Thread(
        target=store.turn_context,
        args=("p", "s1", "run-1:t2:assistant", "run-1", [], lambda _: rows),
        kwargs={"events": EntryEvents(REF, lambda written: deferred_tool_events(pending, written))},
    )
    starting.start()
    try:
        assert reading.wait(10)
        appended = threading.Thread(target=store.append_events, args=(REF, [{"type": "x"}]))
        appended.start()
        appended.join(2)
        blocked = appended.is_alive()
    finally:
        go_on.set()
        starting.join(10)
    appended.join(10)
    assert not blocked, "an event append waited for a turn's context read"
    assert sorted(types(store)) == sorted(["x", "tool_started", "tool_completed"])


async def test_a_call_does_not_come_back_inline_while_its_worker_owes_an_events_lost_marker(
    store: Store,
) -> None:
    """Events of the run this worker could not write are announced by its next write for the
    run (`events_lost`). An inline result writes nothing here: it would leave the marker
    owed, maybe for good (a tool worker whose later calls all come back inline)."""
    context = ActivityContext(scripted_config({"agent": ["hi"]}), store)
    started = {"type": "tool_started", "tool_call_id": "c1"}
    context.count_lost(REF, [{"type": "tool_completed"}], RuntimeError("store down"))
    events = EventBuffer(context, REF)
    events.add(started)
    assert not events.drop_unwritten(started)
    await events.close()
    assert types(store) == ["events_lost", "tool_started"]
