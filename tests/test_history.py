"""History discipline: linear growth per turn, continue-as-new, long runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from bench.common import bytes_per_turn, history_events
from otherone.client.agent_client import build_request
from otherone.definitions import AgentDefinition, RuntimeLimits, RuntimePolicy
from otherone.runs import RunOutcome
from otherone.tools import tool
from tests.harness import agent_env, scripted_config


@tool
def tick(n: int) -> dict[str, int]:
    """Count one step."""
    return {"n": n}


def _long_config(turns: int, *, every: int) -> Any:
    script = [
        {"text": f"step {i}", "tool_calls": [{"name": "tick", "arguments": {"n": i}}]}
        for i in range(turns)
    ]
    script.append({"text": "all done"})
    big = turns + 10
    return scripted_config(
        {"counter": script},
        agents=[AgentDefinition(id="counter", description="counts", tools=["tick"])],  # type: ignore[arg-type]
        tools=[tick],
        # Model calls: the turns and each compaction's summary (a model call of the run too).
        limits=RuntimeLimits(
            max_iterations_per_run=big, max_model_calls=2 * big, max_tool_calls=big
        ),
        policy=RuntimePolicy(continue_as_new_after_turns=every),
    )


async def _history_sizes(client: Client, run_id: str) -> list[tuple[str, int]]:
    """(Temporal run id, bytes of history) for each history of the run, oldest first."""
    sizes: list[tuple[str, int]] = []
    async for execution in client.list_workflows(f'WorkflowId = "{run_id}"'):
        history = await client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
        sizes.append((execution.run_id, len(history.to_json())))
    return sizes


async def test_history_grows_linearly_over_a_200_turn_conversation(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _long_config(200, every=10_000)  # no continue-as-new: one history for all turns
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="counter", input="count"))
    assert result.outcome is RunOutcome.COMPLETED and result.usage.model_calls == 201
    # Measured as `make bench` measures it (workload 4): each event's protobuf size, which is
    # what Temporal's 50 MB history limit counts.
    events = await history_events(client.get_workflow_handle(result.run_id))
    per_turn = bytes_per_turn(events, lambda name: name == "otherone.call_model")
    first, last = per_turn[5:25], per_turn[-20:]
    first_mean, last_mean = sum(first) / len(first), sum(last) / len(last)
    print(
        f"\nhistory bytes per turn: first 20 turns {first_mean:.0f}, last 20 turns {last_mean:.0f}"
    )
    assert len(per_turn) == 200
    assert last_mean <= first_mean * 1.1  # flat: the 200th turn costs what the 5th did
    # ~2.8 KB (docs/benchmarks.md, workload 4): two activities and their workflow tasks.
    assert max(per_turn) < 4 * 1024


async def test_continue_as_new_keeps_the_run_id_and_everything_carried(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _long_config(25, every=10)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(
            build_request(entry_agent="counter", input="count", metadata={"k": 1})
        )
        entries = env.store.load_entries("local", result.session_id)
        record = await env.agents.get_run(result.run_id)
    histories = await _history_sizes(client, result.run_id)
    assert len(histories) == 3  # turns 1-10, 11-20, 21-26
    assert result.outcome is RunOutcome.COMPLETED and result.text == "all done"
    assert (result.usage.model_calls, result.usage.tool_calls) == (26, 25)
    assert result.usage.duration_millis > 0 and result.metadata == {"k": 1}
    assert record.status.value == "completed"
    # The finished record is the whole run's, not its last history's (started at the first).
    stored = env.store.get_run_record("local", result.run_id)
    assert stored is not None and record.started_at == stored.started_at
    assert record.iteration == stored.iteration == 26
    # Every turn's entries were written exactly once, in order, across the histories.
    tools = [json.loads(e.content)["n"] for e in entries if e.role == "tool"]
    assert tools == list(range(25))


@pytest.mark.timeout(1200)
async def test_a_run_with_2000_model_turns_completes(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _long_config(1999, every=500)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="counter", input="count"))
        compacted = env.store.latest_compaction("local", result.session_id)
        compactions = [
            record
            async for record in env.agents.events(result.run_id)
            if record.event["type"] == "context_compacted"
        ]
    histories = await _history_sizes(client, result.run_id)
    print(f"\n2,000 turns: {len(histories)} histories, bytes {[size for _, size in histories]}")
    assert result.outcome is RunOutcome.COMPLETED and result.text == "all done"
    # 2,000 turns, and each compaction's summary is a model call of the run too.
    assert compactions and result.usage.model_calls == 2000 + len(compactions)
    # Every 500 turns at the latest; earlier when Temporal suggests it (about 400 turns here).
    assert len(histories) >= 4
    assert all(size < 10 * 1024 * 1024 for _, size in histories)
    assert compacted is not None  # the context stayed within the window


async def test_what_the_model_said_on_a_tool_turn_reads_in_history_briefly(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A turn's text is in the store, not in history; but the Web UI and `temporal workflow
    show` should read as a conversation: a tool-calling turn's result carries the start of
    what the model said (one line, at most 200 characters), the final answer all of it."""
    long_thought = "I will look this up now. " + "Then I compare the numbers. " * 40
    config = scripted_config(
        {
            "counter": [
                {"text": "Let me count\nthe first step.", "tool_calls": [tick_call(1)]},
                {"text": long_thought, "tool_calls": [tick_call(2)]},
                {"text": "Counted to two."},
            ]
        },
        agents=[AgentDefinition(id="counter", description="counts", tools=["tick"])],  # type: ignore[arg-type]
        tools=[tick],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="counter", input="count"))
    assert result.outcome is RunOutcome.COMPLETED
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    said = [
        json.loads(payload.data).get("said")
        for event in history.events
        if event.HasField("activity_task_completed_event_attributes")
        for payload in event.activity_task_completed_event_attributes.result.payloads
        if b'"tool_calls"' in payload.data
    ]
    assert said[0] == "Let me count the first step."
    assert said[1].startswith("I will look this up now. Then I compare") and len(said[1]) == 200
    assert said[1].endswith("…") and long_thought not in history.to_json()


def tick_call(n: int) -> dict[str, Any]:
    return {"name": "tick", "arguments": {"n": n}}
