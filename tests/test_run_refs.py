"""Compact run references (`otherone.activities.run_refs`): model and tool inputs carry
`RunRef.key`; a worker that has not seen the reference asks the run for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.activities.run_refs import RunRefs
from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.contracts import ModelCallInput, RunRef, ToolCallInput, ToolCallSpec
from otherone.definitions import AgentDefinition
from otherone.runs import RunOutcome
from otherone.tools import tool
from otherone.worker.connection import data_converter
from tests.harness import agent_env, scripted_config

REF = RunRef(
    run_id="run-1",
    root_run_id="run-1",
    agent_id="agent",
    partition_key="local",
    session_id="s1",
    snapshot_version="v1",
)


def test_the_key_names_one_reference() -> None:
    assert REF.key() == REF.model_copy().key()
    assert len(REF.key()) == 10
    for change in (
        {"agent_id": "other"},
        {"session_id": "s2"},
        {"snapshot_version": "v2"},
        {"depth": 1},
        {"event_visibility": "lifecycle_only"},
    ):
        assert REF.model_copy(update=change).key() != REF.key(), change


def test_inputs_carry_the_key_and_still_read_full_references() -> None:
    converter = data_converter().payload_converter
    call = ToolCallSpec(id="c", name="t", arguments="{}")
    compact = ToolCallInput(ref=REF.key(), call=call)
    [payload] = converter.to_payloads([compact])
    assert b'"ref":"' + REF.key().encode() + b'"' in payload.data
    assert b"run-1" not in payload.data  # no ids: the key only
    assert converter.from_payloads([payload], [ToolCallInput]) == [compact]
    # A payload written before (the whole reference) reads as the reference.
    full = ModelCallInput(ref=REF, model_profile_id="m", turn=1)
    [old] = converter.to_payloads([full])
    [read] = converter.from_payloads([old], [ModelCallInput])
    assert read.run_ref == REF
    with pytest.raises(TypeError, match="not resolved"):
        _ = compact.run_ref


def test_the_cache_keeps_the_most_recent_references() -> None:
    refs = RunRefs(capacity=2)
    others = [REF.model_copy(update={"run_id": f"run-{n}"}) for n in range(3)]
    for ref in others:
        refs.remember(ref)
    assert list(refs._refs) == [(ref.run_id, ref.key()) for ref in others[1:]]


async def test_a_worker_that_has_not_seen_the_reference_asks_the_run(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a restarted worker, or one serving only model or tool calls, would."""
    asked: list[str] = []
    ask_run = RunRefs._ask_run

    async def counted(self: RunRefs, workflow_id: str, run_id: str | None, key: str) -> RunRef:
        asked.append(key)
        return await ask_run(self, workflow_id, run_id, key)

    def forget(self: RunRefs, entry: tuple[str, str], ref: RunRef) -> None:
        return None

    monkeypatch.setattr(RunRefs, "_ask_run", counted)
    monkeypatch.setattr(RunRefs, "_keep", forget)

    async with agent_env(client, task_queue, _config(), tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "42"
    assert len(asked) == 3  # two model calls and a tool call, each resolved by the run
    assert len(set(asked)) == 1
    assert [entry.role for entry in entries] == ["user", "assistant", "tool", "assistant"]


async def test_a_worker_that_prepared_the_run_asks_nothing(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`prepare_run` leaves the reference the run's inputs name: no query on the usual path."""
    asked: list[str] = []

    async def counted(self: RunRefs, workflow_id: str, run_id: str | None, key: str) -> RunRef:
        asked.append(key)
        raise AssertionError("the reference should have been known")

    monkeypatch.setattr(RunRefs, "_ask_run", counted)
    async with agent_env(client, task_queue, _config(), tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
    assert result.outcome is RunOutcome.COMPLETED and result.text == "42"
    assert (result.usage.model_calls, result.usage.tool_calls) == (2, 1)
    assert asked == []


def _config() -> RuntimeConfig:
    """An agent that calls a tool once, then answers "42"."""

    @tool
    def lookup(key: str) -> dict[str, Any]:
        """Look a key up."""
        return {"key": key, "value": 42}

    return scripted_config(
        {"agent": [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]}, "42"]},
        agents=[AgentDefinition(id="agent", description="agent", tools=["lookup"])],
        tools=[lookup],
    )
