"""Compaction decisions: when to compact, where to cut, never splitting a tool call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import ANY

import pytest
from temporalio.client import Client

from otherone.activities.compaction import plan_compaction, summary_chunks, summary_messages
from otherone.activities.context import parent_excerpt
from otherone.activities.providers.base import ModelRequest, ProviderError, StreamEvent
from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.definitions import (
    AgentDefinition,
    ContextTransferPolicy,
    ModelProfile,
    RuntimeLimits,
    RuntimePolicy,
)
from otherone.errors import ConfigurationError
from otherone.runs import RunOutcome
from otherone.store import EntryRow
from otherone.tools import tool
from tests.harness import agent_env, scripted_config
from tests.providers import RecordingProvider


def _row(index: int, role: str, tokens: int, **fields: object) -> EntryRow:
    return EntryRow(
        entry_key=f"k{index}",
        role=role,
        content="x" * (tokens * 4),
        id=index,
        tokens=tokens,
        **fields,
    )  # type: ignore[arg-type]


def test_no_compaction_below_the_threshold() -> None:
    rows = [_row(i, "user" if i % 2 else "assistant", 100) for i in range(1, 7)]
    assert plan_compaction(rows, fixed_tokens=100, context_window=1000, threshold=0.8) is None


def test_compaction_keeps_the_newest_forty_percent() -> None:
    rows = [_row(i, "user" if i % 2 else "assistant", 100) for i in range(1, 11)]  # 1000 tokens
    plan = plan_compaction(rows, fixed_tokens=0, context_window=1000, threshold=0.8)
    assert plan is not None
    assert sum(row.tokens or 0 for row in plan.keep) <= 400
    assert [row.id for row in plan.keep] == [7, 8, 9, 10]
    assert plan.up_to_entry_id == 6 and len(plan.summarise) == 6


def test_a_tool_call_is_never_separated_from_its_results() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    rows = [
        _row(1, "user", 300),
        _row(2, "assistant", 300),
        _row(3, "assistant", 50, tool_calls=[call, call]),
        _row(4, "tool", 150, tool_call_id="c"),
        _row(5, "tool", 150, tool_call_id="c"),
        _row(6, "assistant", 100),
    ]
    plan = plan_compaction(rows, fixed_tokens=0, context_window=1000, threshold=0.8)
    assert plan is not None
    assert plan.keep[0].role != "tool"
    assert [row.id for row in plan.keep] == [3, 4, 5, 6]


def test_an_answer_is_kept_with_the_question_right_before_it() -> None:
    """A cut that would open the kept part with the assistant's answer keeps its question too:
    the summary had the question, the context the answer (Anthropic's Bedrock and older API
    versions also refuse a conversation that opens with the assistant)."""
    call = {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    rows = [
        _row(1, "user", 300),
        _row(2, "assistant", 300),
        _row(3, "user", 50),
        _row(4, "assistant", 150, tool_calls=[call]),
        _row(5, "tool", 150, tool_call_id="c"),
        _row(6, "assistant", 100),
    ]
    plan = plan_compaction(rows, fixed_tokens=0, context_window=1000, threshold=0.8)
    assert plan is not None
    assert [row.id for row in plan.keep] == [3, 4, 5, 6]


def test_an_anthropic_context_opening_with_the_assistant_gets_a_user_turn_first() -> None:
    from otherone.activities.providers.anthropic import EARLIER_NOT_SHOWN, anthropic_messages
    from otherone.wire_names import WireNames

    messages = [
        {"role": "system", "content": "Summary of the earlier conversation: ..."},
        {"role": "assistant", "content": "The answer."},
        {"role": "user", "content": "Thanks."},
    ]
    system, turns = anthropic_messages(messages, WireNames([]))
    assert system.startswith("Summary") and [turn["role"] for turn in turns] == [
        "user",
        "assistant",
        "user",
    ]
    assert turns[0]["content"] == [{"type": "text", "text": EARLIER_NOT_SHOWN}]


def test_summary_request_lists_calls_and_results() -> None:
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    rows = [
        EntryRow(entry_key="a", role="assistant", content="checking", tool_calls=[call]),
        EntryRow(entry_key="b", role="tool", content='{"t": 3}', tool_name="get_weather"),
    ]
    messages = summary_messages("earlier facts", rows)
    assert messages[0]["role"] == "system"
    assert "Summary so far:\nearlier facts" in messages[1]["content"]
    assert 'get_weather({"city": "Oslo"})' in messages[1]["content"]
    assert 'tool get_weather result: {"t": 3}' in messages[1]["content"]


@tool
def fetch(page: int) -> str:
    """A page of a long document."""
    return f"page {page}: " + "lorem ipsum " * 60


def reader_config(**limits: int) -> RuntimeConfig:
    """13 turns (12 pages, then the answer) in a 1,000-token window: compacted on the way."""
    script = [{"tool_calls": [{"name": "fetch", "arguments": {"page": i}}]} for i in range(12)]
    return scripted_config(
        {"reader": [*script, "read it all"]},
        agents=[
            AgentDefinition.model_validate(
                {
                    "id": "reader",
                    "description": "reads",
                    "system_prompt": "You read.",
                    "tools": ["fetch"],
                }
            )
        ],
        tools=[fetch],
        limits=RuntimeLimits(max_iterations_per_run=20, **limits),
    )


async def test_a_long_session_is_compacted_and_the_run_goes_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = reader_config()
    provider = RecordingProvider()
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(
            entry_agent="reader", input="read", session={"context_window": 1000}
        )
        result = await env.agents.run(request)
        compaction = env.store.latest_compaction("local", result.session_id)
        events = [e.event["type"] async for e in env.agents.events(result.run_id)]
        turns = [
            entry.usage or {}
            for entry in env.store.load_entries("local", result.session_id)
            if entry.role == "assistant"
        ]
    assert result.text == "read it all"
    # Each summary is a model call of the run: usage counts it and its tokens (the scripted
    # summary reports 32 output tokens).
    compactions = events.count("context_compacted")
    summaries = [r for r in provider.calls("reader") if r.purpose == "summary"]
    assert compactions >= 1 and len(summaries) == compactions
    assert result.usage.model_calls == 13 + compactions
    assert result.usage.output_tokens == sum(u["output_tokens"] for u in turns) + 32 * compactions
    assert compaction is not None and compaction.summary.startswith("Summary of")
    assert "context_compacted" in events
    last = provider.calls("reader")[-1].messages
    assert last[1]["content"].startswith("Summary of the earlier conversation:")
    assert sum(len(m["content"] or "") for m in last) < 1000 * 4  # bounded by the window


def test_a_backlog_bigger_than_the_window_is_summarised_in_parts() -> None:
    rows = [_row(i, "user" if i % 2 else "assistant", 100) for i in range(1, 31)]
    chunks, omitted = summary_chunks(rows, 250)
    assert [len(chunk) for chunk in chunks] == [2] * 8 and omitted == 14  # the newest 8 parts
    assert chunks[-1][-1].id == 30
    whole, none_left = summary_chunks(rows[:4], 1000)
    assert [len(chunk) for chunk in whole] == [4] and none_left == 0
    giant = [_row(1, "user", 5000), _row(2, "assistant", 10)]
    assert [len(chunk) for chunk in summary_chunks(giant, 100)[0]] == [1, 1]
    assert (
        "(14 earlier entries are left out" in summary_messages(None, rows, omitted=14)[1]["content"]
    )


async def test_a_session_built_under_a_larger_window_is_summarised_a_window_at_a_time(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Found by a user: a session built up under a large window, then continued under a small
    one, was summarised in one request several windows long (a real model refuses it, and
    every later run of the session failed on it). Now a part at a time; each part is a model
    call of the run."""
    provider = RecordingProvider()
    async with agent_env(
        client, task_queue, reader_config(), tmp_path, providers={"scripted": provider}
    ) as env:
        big = {"session_id": "backlog", "context_window": 1_000_000}
        first = await env.agents.run(build_request(entry_agent="reader", input="read", session=big))
        small = {"session_id": "backlog", "context_window": 1000}
        second = await env.agents.run(
            build_request(entry_agent="reader", input="again", session=small)
        )
    assert first.outcome is RunOutcome.COMPLETED and second.outcome is RunOutcome.COMPLETED
    summaries = [r for r in provider.calls("reader") if r.purpose == "summary"]
    assert len(summaries) > 2  # the first run's backlog (~12 pages) took several parts
    for request in summaries:  # each within the window (instructions, summary, its part)
        assert sum(len(m["content"] or "") for m in request.messages) < 1000 * 4
    assert second.usage.model_calls == 13 + len(summaries)


async def test_compaction_summaries_count_against_the_model_call_budget(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with agent_env(client, task_queue, reader_config(max_model_calls=13), tmp_path) as env:
        request = build_request(
            entry_agent="reader", input="read", session={"context_window": 1000}
        )
        result = await env.agents.run(request)
    # 13 turns alone would fit; with the summaries they do not.
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    assert result.failure is not None and "max_model_calls (13)" in result.failure.message
    assert result.usage.model_calls == 13


def test_parent_summary_policy_prefers_the_latest_summary() -> None:
    rows = [
        EntryRow(entry_key="u", role="user", content="the question"),
        EntryRow(entry_key="t", role="tool", content="secret tool output"),
    ]
    summary_policy = ContextTransferPolicy(kind="parent_summary", max_tokens=10)
    window_policy = ContextTransferPolicy(kind="parent_window", max_tokens=100)
    assert parent_excerpt(rows, summary_policy, 1000, "x" * 100) == "x" * 40  # 10 tokens ≈ 40 chars
    assert parent_excerpt(rows, summary_policy, 1000, None) == "user: the question"  # seed fallback
    assert parent_excerpt(rows, window_policy, 1000, "ignored") == "user: the question"


async def test_a_configured_summary_model_writes_the_summaries(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    long_turn = {
        "text": "word " * 300,
        "tool_calls": [{"name": "note", "arguments": {}}],
    }

    @tool
    def note() -> str:
        """Note."""
        return "noted"

    config = scripted_config(
        {"talker": [long_turn, long_turn, long_turn, "done"]},
        agents=[
            AgentDefinition.model_validate(
                {
                    "id": "talker",
                    "description": "talks",
                    "tools": ["note"],
                    "model_overrides": {"temperature": 1.5},
                }
            )
        ],
        tools=[note],
        policy=RuntimePolicy(summary_model="cheap"),
    )
    config.add_model(
        ModelProfile.model_validate(
            {"id": "cheap", "provider": "scripted", "model": "small", "temperature": 0.0}
        )
    )
    provider = RecordingProvider()
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(
            build_request(entry_agent="talker", input="talk", session={"context_window": 1000})
        )
    summaries = [r for r in provider.calls() if r.purpose == "summary"]
    turns = [r for r in provider.calls() if r.purpose == "turn"]
    assert result.text == "done" and summaries
    assert {r.profile.id for r in summaries} == {"cheap"}
    assert {r.settings["temperature"] for r in summaries} == {0.0}  # not the agent's override
    assert {r.profile.id for r in turns} == {"scripted"}


def test_an_unknown_summary_model_is_a_config_error() -> None:
    config = scripted_config({"a": ["x"]}, policy=RuntimePolicy(summary_model="nope"))
    with pytest.raises(ConfigurationError) as refused:
        config.validate()
    assert (refused.value.table, refused.value.field) == ("policy", "summary_model")


@dataclass
class FailingAfterSummary(RecordingProvider):
    """Fails (retryably) the first attempt of every turn whose summary call it just answered:
    the attempt's worker lost after the compaction was stored."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        previous = self.requests[-1] if self.requests else None
        if (
            request.purpose == "turn"
            and request.attempt == 1
            and previous is not None
            and previous.purpose == "summary"
            and previous.turn == request.turn
        ):
            self.requests.append(request)
            raise ProviderError("lost after the summary", retryable=True)
        return super().stream(request)


async def test_a_summary_an_earlier_attempt_stored_still_counts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A model call retried after its turn's compaction was stored (a chaos test killed the
    worker there) finds the context cut and makes no summary: the stored one's call and tokens
    still count in usage and budgets (they were lost: 17 model calls where 18 were made)."""
    provider = FailingAfterSummary()
    async with agent_env(
        client, task_queue, reader_config(), tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(
            entry_agent="reader", input="read", session={"context_window": 1000}
        )
        result = await env.agents.run(request)
        turns = [
            entry.usage or {}
            for entry in env.store.load_entries("local", result.session_id)
            if entry.role == "assistant"
        ]
        stored = env.store.latest_compaction("local", result.session_id)
    summaries = [r for r in provider.calls("reader") if r.purpose == "summary"]
    retried = [r for r in provider.calls("reader") if r.purpose == "turn" and r.attempt == 2]
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert summaries and len(retried) == len(summaries)  # every summary's turn was retried
    assert result.usage.model_calls == 13 + len(summaries)
    assert result.usage.output_tokens == sum(u["output_tokens"] for u in turns) + 32 * len(
        summaries
    )
    assert stored is not None
    assert stored.usage == {"input_tokens": ANY, "output_tokens": 32, "calls": 1}
