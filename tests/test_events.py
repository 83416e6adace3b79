"""Event delivery for a run tree: visibility, call lineage, retried attempts, resuming, thinking."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from temporalio.client import Client

from otherone.activities.providers.base import ModelRequest, ProviderError, StreamEvent, TextDelta
from otherone.activities.providers.scripted import ScriptedProvider
from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.contracts import EventRecord
from otherone.definitions import AgentDefinition
from otherone.runs import AgentCallRequest, RunOutcome
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider

LIFECYCLE = {
    "run_started",
    "run_completed",
    "run_failed",
    "run_cancelled",
    "agent_call_started",
    "agent_call_completed",
}


def agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


def team() -> RuntimeConfig:
    """boss -> (helper_a, helper_b) in parallel; helper_a uses a tool first."""
    return scripted_config(
        {
            "boss": [
                {
                    "tool_calls": [
                        {
                            "id": "ca",
                            "name": "agent.call",
                            "arguments": {"agent": "a", "task": "x"},
                        },
                        {
                            "id": "cb",
                            "name": "agent.call",
                            "arguments": {"agent": "b", "task": "y"},
                        },
                    ]
                },
                {"text": "both done", "thinking": "weighing the answers"},
            ],
            "a": [{"chunks": ["alpha ", "answer"], "thinking": "a thinks"}],
            "b": [{"chunks": ["beta ", "answer"]}],
        },
        agents=[
            agent(
                "boss", callable_agents=["a", "b"], model_overrides={"parallel_tool_calls": True}
            ),
            agent("a"),
            agent("b"),
        ],
    )


async def run_team(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    visibility: Literal["all", "lifecycle_only", "root_only"],
    *,
    thinking: bool = False,
) -> tuple[str, list[EventRecord]]:
    async with agent_env(client, task_queue, team(), tmp_path) as env:
        result = await env.agents.run(
            build_request(
                entry_agent="boss",
                input="go",
                event_visibility=visibility,
                include_thinking_events=thinking,
            )
        )
        assert result.outcome is RunOutcome.COMPLETED
        return result.run_id, [event async for event in env.agents.events(result.run_id)]


async def test_visibility_all_streams_every_run_of_the_tree_with_lineage(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    root, events = await run_team(client, task_queue, tmp_path, "all")
    children = {e.run_id for e in events if e.depth == 1}
    assert children == {f"{root}/a.ca", f"{root}/b.cb"}
    assert all(e.parent_run_id == root for e in events if e.depth == 1)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    started = {e.run_id: e.event for e in events if e.event["type"] == "run_started"}
    assert started[f"{root}/a.ca"]["agent_call_id"] == "ca" and "agent_call_id" not in started[root]
    child_text = "".join(
        e.event["content"]
        for e in events
        if e.run_id == f"{root}/a.ca" and e.event["type"] == "model_delta"
    )
    assert child_text == "alpha answer"
    assert not any(e.event["type"] == "thinking_delta" for e in events)  # not requested


async def test_lifecycle_only_and_root_only_filter_descendants_not_the_root(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    root_l, lifecycle = await run_team(client, task_queue, tmp_path / "l", "lifecycle_only")
    root_r, root_only = await run_team(client, task_queue, tmp_path / "r", "root_only")

    child_kinds = {e.event["type"] for e in lifecycle if e.depth > 0}
    assert child_kinds == {"run_started", "run_completed"}
    assert child_kinds <= LIFECYCLE
    assert {"model_delta", "model_completed"} <= {
        e.event["type"] for e in lifecycle if e.run_id == root_l
    }
    assert [e for e in root_only if e.depth > 0] == []
    root_kinds = [e.event["type"] for e in root_only]
    assert root_kinds.count("agent_call_completed") == 2 and root_kinds[-1] == "run_completed"
    assert all(e.run_id == root_r for e in root_only)


async def test_agent_call_completed_is_announced_when_each_child_ends(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    root, events = await run_team(client, task_queue, tmp_path, "all")
    position = {
        (e.run_id, e.event["type"], e.event.get("call_id")): index for index, e in enumerate(events)
    }
    root_second_model_call = next(
        index
        for index, e in enumerate(events)
        if e.run_id == root and e.event["type"] == "model_started" and e.event["turn"] == 2
    )
    completions = [e for e in events if e.event["type"] == "agent_call_completed"]
    assert sorted(e.event["call_id"] for e in completions) == ["ca", "cb"]  # once each
    for call_id, target in (("ca", "a"), ("cb", "b")):
        child_done = position[(f"{root}/{target}.{call_id}", "run_completed", None)]
        announced = position[(root, "agent_call_completed", call_id)]
        assert child_done < announced < root_second_model_call
    assert all(
        e.run_id == root
        and e.agent_id == "boss"
        and e.depth == 0
        and e.event["outcome"] == "completed"
        for e in completions
    )


async def test_trusted_calls_announce_their_completion_too(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    hold = provider.gate("boss", 1)
    config = scripted_config(
        {"boss": ["done"], "a": ["alpha"]},
        agents=[agent("boss", callable_agents=["a"]), agent("a")],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))
        await wait_until(lambda: bool(provider.calls("boss")), message="boss model call")
        call = await env.agents.call_agent(
            handle.run_id, "t1", AgentCallRequest(target="a", task="help")
        )
        hold.set()
        await handle.result()
        events = [e.event async for e in env.agents.events(handle.run_id)]
    assert call.outcome is RunOutcome.COMPLETED
    assert {"type": "agent_call_completed", "call_id": "t1", "target": "a"}.items() <= next(
        e for e in events if e["type"] == "agent_call_completed"
    ).items()


@dataclass
class CutOnFirstAttempt:
    """Streams some text, then fails, on each turn's first attempt; then plays the script."""

    inner: ScriptedProvider = field(default_factory=ScriptedProvider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if request.attempt == 1:
            yield TextDelta("half an answer that was cut")
            raise ProviderError("stream cut mid-way", retryable=True)
        async for event in self.inner.stream(request):
            yield event


def final_text(events: list[EventRecord], run_id: str, turn: int) -> str:
    """The documented folding rule: deltas of a superseded attempt are dropped."""
    text: list[str] = []
    for event in events:
        body = event.event
        if event.run_id != run_id or body.get("turn") != turn:
            continue
        if body["type"] == "model_started" and body.get("supersedes_attempt"):
            text.clear()
        elif body["type"] == "model_delta":
            text.append(body["content"])
    return "".join(text)


async def test_a_retried_stream_marks_the_earlier_attempt_superseded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"solo": [{"chunks": ["the ", "real ", "answer"]}]}, agents=[agent("solo")]
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": CutOnFirstAttempt()}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="solo", input="go"))
        events = [e async for e in env.agents.events(result.run_id)]
    assert result.text == "the real answer"
    attempts = [
        (e.event["type"], e.event.get("attempt"), e.event.get("supersedes_attempt"))
        for e in events
        if e.event["type"] in ("model_started", "model_completed")
    ]
    # The failed attempt ends too (its model_completed carries the error), then the retry.
    assert attempts == [
        ("model_started", 1, None),
        ("model_completed", 1, None),
        ("model_started", 2, 1),
        ("model_completed", 2, None),
    ]
    assert any(
        e.event["type"] == "model_delta" and e.event["attempt"] == 1 for e in events
    )  # the cut text was streamed, marked with its attempt
    assert final_text(events, result.run_id, 1) == result.text
    ended = [e.event for e in events if e.event["type"] == "model_completed"]
    # The answer's end says why the model stopped (a cut answer says `length`).
    assert "finish_reason" not in ended[0] and ended[1]["finish_reason"] == "stop"


async def test_thinking_deltas_only_when_requested(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    root, events = await run_team(client, task_queue, tmp_path, "all", thinking=True)
    thinking = {e.run_id: e.event["content"] for e in events if e.event["type"] == "thinking_delta"}
    assert thinking == {root: "weighing the answers", f"{root}/a.ca": "a thinks"}


async def test_a_consumer_that_reconnects_with_its_cursor_misses_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    hold = provider.gate("solo", 2)
    config = scripted_config(
        {
            "solo": [
                {"tool_calls": [{"name": "missing_tool", "arguments": {}}], "text": "try"},
                {"chunks": ["fin", "ished"]},
            ]
        },
        agents=[agent("solo")],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="solo", input="go"))
        first: list[EventRecord] = []
        async for event in env.agents.events(handle.run_id):
            first.append(event)
            if event.event["type"] == "model_completed":
                break  # the consumer goes away while the run goes on
        await wait_until(lambda: len(provider.calls("solo")) >= 2, message="second model call")
        hold.set()
        result = await handle.result()
        rest = [e async for e in env.agents.events(handle.run_id, after=first[-1].sequence)]
        everything = [e async for e in env.agents.events(handle.run_id)]
    assert result.text == "finished"
    assert [e.event_id for e in first + rest] == [e.event_id for e in everything]
    assert everything[-1].event["type"] == "run_completed"


def test_a_tools_result_preview_is_one_line_of_at_most_200_characters() -> None:
    """`tool_completed` carries the start of a successful result for people (`otherone watch
    --verbose`, the page): a JSON string as its text, anything else as JSON, on one line, cut
    with an ellipsis; a result too large to decode is cut as stored."""
    import json

    from otherone.activities.tool_events import RESULT_PREVIEW_CHARS, result_preview

    assert result_preview(json.dumps("sent to bo")) == "sent to bo"
    assert result_preview('{"sum":\n  5}') == '{"sum": 5}'
    assert result_preview("not json\tat all") == "not json at all"
    long = result_preview(json.dumps("many words\n" * 100))
    assert len(long) == RESULT_PREVIEW_CHARS and long.endswith("…") and "\n" not in long
    huge = result_preview(json.dumps({"text": "x" * 200_000}))
    assert huge.startswith('{"text": "xxx') and len(huge) == RESULT_PREVIEW_CHARS
