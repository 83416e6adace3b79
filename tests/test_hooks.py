"""Lifecycle hooks (issue 45): before a model call (rewrite what goes to the provider, proven
by what a real HTTP server received; add metadata; refuse), before and after a tool call
(rewrite arguments, refuse with no side effect, redact a result); their order; bad ones named."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile, RuntimePolicy
from otherone.errors import ConfigurationError, FailureCode
from otherone.hook_policy import HookPolicy
from otherone.hooks.builtin import redact_pii, redact_text
from otherone.runs import RunOutcome
from otherone.toml_config import load_config
from otherone.tools import tool
from tests.fixtures.providers.wire_server import Reply, Seen, WireServer, openai_stream
from tests.harness import AgentEnv, agent_env, scripted_config
from tests.hook_fixtures import (
    RUN_ENDS,
    TOOL_LEDGER,
    audit_answer,
    audit_end,
    broken_end,
    cap_amount,
    closed_on_weekends,
    mark_agent,
    mark_policy,
    refuse_model,
    returns_text,
)
from tests.providers import RecordingProvider

#: Random: a key the suite's redaction layer has never been given (tests before this one register
#: their secrets process-wide, and a fixed key could share a 12-character piece with one).
SECRET = f"sk-proj-{secrets.token_hex(16)}"
EMAIL = "alice@example.com"
HOOKS = [
    redact_pii,
    mark_policy,
    mark_agent,
    refuse_model,
    returns_text,
    cap_amount,
    audit_answer,
    closed_on_weekends,
    audit_end,
    broken_end,
]


@tool
def pay(to: str, amount: int) -> dict[str, Any]:
    """Pay someone (a side effect: recorded in the ledger); answers with a receipt."""
    TOOL_LEDGER.append(f"paid {amount} to {to}")
    return {"receipt": f"paid {amount} to {to}", "contact": "billing@bank.example"}


def _wire_config(url: str, agent_hooks: dict[str, Any], policy: RuntimePolicy | None) -> Any:
    profile = ModelProfile(id="wire", provider="local", model="m", base_url=f"{url}/v1")
    agent = AgentDefinition.model_validate(
        {"id": "clerk", "description": "a clerk", "hooks": agent_hooks}
    )
    return RuntimeConfig(agents=[agent], models=[profile], policy=policy, hooks=HOOKS)


def _events(env: AgentEnv, run_id: str) -> list[dict[str, Any]]:
    return [record.event for record in env.store.read_events(run_id, after=0)]


def _answer(seen: Seen) -> Reply:
    return Reply(body=openai_stream(["Noted."]))


def test_redaction_of_text() -> None:
    text, count = redact_text(f"key {SECRET}, mail {EMAIL}, card 4111 1111 1111 1111, ok")
    assert text == "key [REDACTED:secret], mail [REDACTED:email], card [REDACTED:card], ok"
    assert count == 3


async def test_the_redaction_hook_rewrites_what_the_provider_receives(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    policy = RuntimePolicy(
        hooks=HookPolicy(before_model_call=("redact_pii", "mark_policy")),
    )
    async with WireServer(_answer) as server:
        config = _wire_config(server.url, {"before_model_call": ["mark_agent"]}, policy)
        async with agent_env(client, task_queue, config, tmp_path) as env:
            said = f"My key is {SECRET}; write to {EMAIL}."
            result = await env.agents.run(build_request(entry_agent="clerk", input=said))
            entries = env.store.load_entries("local", result.session_id)
            events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    wire = json.dumps(server.requests[0].body)
    assert SECRET not in wire and EMAIL not in wire
    assert "My key is [REDACTED:secret]; write to [REDACTED:email]." in wire
    # Only the copy that left is redacted: the transcript keeps what the user said.
    assert entries[0].content == said
    [started] = [event for event in events if event["type"] == "model_started"]
    assert started["metadata"] == {"redacted": 2, "order": ["policy", "agent"]}


async def test_a_refusing_model_hook_fails_the_run_before_the_provider_is_called(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with WireServer(_answer) as server:
        config = _wire_config(server.url, {"before_model_call": ["refuse_model"]}, None)
        async with agent_env(client, task_queue, config, tmp_path) as env:
            result = await env.agents.run(build_request(entry_agent="clerk", input="hi"))
            events = _events(env, result.run_id)
    assert server.requests == []
    assert result.failure is not None and result.failure.code is FailureCode.HOOK_REFUSED
    assert "hook 'refuse_model' refused the model call: no model calls on Sundays" in (
        result.failure.message
    )
    [refused] = [event for event in events if event["type"] == "hook_refused"]
    assert (refused["hook"], refused["stage"]) == ("refuse_model", "before_model_call")


async def test_a_hook_returning_the_wrong_type_fails_the_run_naming_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with WireServer(_answer) as server:
        config = _wire_config(server.url, {"before_model_call": ["returns_text"]}, None)
        async with agent_env(client, task_queue, config, tmp_path) as env:
            result = await env.agents.run(build_request(entry_agent="clerk", input="hi"))
    assert server.requests == []
    assert result.failure is not None and result.failure.code is FailureCode.HOOK_FAILED
    assert "hook 'returns_text' (before_model_call) returned str, not a ModelCallView" in (
        result.failure.message
    )


def _pay(to: str, amount: int, call_id: str) -> dict[str, Any]:
    arguments = {"to": to, "amount": amount}
    return {"tool_calls": [{"name": "pay", "id": call_id, "arguments": arguments}]}


async def test_tool_hooks_rewrite_arguments_refuse_calls_and_redact_results(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    TOOL_LEDGER.clear()
    provider = RecordingProvider()
    agent = AgentDefinition.model_validate(
        {
            "id": "clerk",
            "description": "a clerk",
            "tools": ["pay"],
            "hooks": {"before_tool_call": ["cap_amount"], "after_tool_call": ["redact_pii"]},
        }
    )
    config = scripted_config(
        {"clerk": [_pay("mallory", 5, "p1"), _pay("bob", 5000, "p2"), "done"]},
        agents=[agent],
        tools=[pay],
    )
    for hook_ in HOOKS:
        config.add_hook(hook_)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="pay"))
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert TOOL_LEDGER == ["paid 100 to bob"]  # mallory's call never ran; bob's was capped
    refusal = provider.calls("clerk")[1].messages[-1]
    assert "hook 'cap_amount' refused this call" in refusal["content"]
    assert "mallory is blocked" in refusal["content"]
    receipt = json.loads(provider.calls("clerk")[2].messages[-1]["content"])
    assert receipt == {"receipt": "paid 100 to bob", "contact": "[REDACTED:email]"}
    [refused] = [event for event in events if event["type"] == "hook_refused"]
    assert (refused["hook"], refused["tool_call_id"]) == ("cap_amount", "p1")


def test_an_unknown_hook_is_refused_naming_the_field() -> None:
    agent = AgentDefinition.model_validate(
        {"id": "clerk", "description": "d", "hooks": {"after_tool_call": ["nope"]}}
    )
    config = scripted_config({"clerk": ["hi"]}, agents=[agent])
    with pytest.raises(ConfigurationError) as refused:
        config.validate()
    assert (refused.value.table, refused.value.field) == ("agents.clerk", "hooks.after_tool_call")
    assert "unknown hook 'nope'" in refused.value.message


def test_toml_registers_hooks_and_declares_them(tmp_path: Path) -> None:
    body = """
[runtime]
hooks = ["otherone.hooks.builtin:redact_pii", "tests.hook_fixtures:{second}"]
[policy.hooks]
before_model_call = ["redact_pii"]
[models.demo]
provider = "scripted"
model = "demo-1"
[agents.clerk]
description = "a clerk"
model = "demo"
hooks = {{ before_tool_call = ["cap_amount"] }}
"""
    good = tmp_path / "good.toml"
    good.write_text(body.format(second="cap_amount"))
    config = load_config(good)
    assert config.hooks.names() == ["cap_amount", "redact_pii"]
    assert config.agents["clerk"].hooks.before_tool_call == ("cap_amount",)
    bad = tmp_path / "bad.toml"
    bad.write_text(body.format(second="missing"))
    with pytest.raises(ConfigurationError) as refused:
        load_config(bad)
    assert (refused.value.table, refused.value.field) == ("runtime", "hooks.1")


def _scripted(turns: list[Any], hooks: dict[str, Any]) -> RuntimeConfig:
    agent = AgentDefinition.model_validate(
        {"id": "clerk", "description": "a clerk", "hooks": hooks}
    )
    config = scripted_config({"clerk": turns}, agents=[agent])
    for hook_ in HOOKS:
        config.add_hook(hook_)
    return config


async def test_after_model_call_hooks_note_the_answer_or_refuse_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _scripted(["a fine answer"], {"after_model_call": ["audit_answer"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        fine = await env.agents.run(build_request(entry_agent="clerk", input="hi"))
        completed = [e for e in _events(env, fine.run_id) if e["type"] == "model_completed"]
    assert fine.outcome is RunOutcome.COMPLETED and completed[0]["metadata"] == {"chars": 13}

    config = _scripted(["a forbidden answer"], {"after_model_call": ["audit_answer"]})
    async with agent_env(client, f"{task_queue}-2", config, tmp_path / "2") as env:
        refused = await env.agents.run(build_request(entry_agent="clerk", input="hi"))
        entries = env.store.load_entries("local", refused.session_id)
    assert refused.failure is not None and refused.failure.code is FailureCode.HOOK_REFUSED
    assert "hook 'audit_answer' refused the model's answer" in refused.failure.message
    assert [entry.role for entry in entries] == ["user"]  # the answer was not kept


async def test_run_hooks_may_refuse_a_start_and_observe_every_end(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    RUN_ENDS.clear()
    provider = RecordingProvider()
    hooks = {"on_run_start": ["closed_on_weekends"], "on_run_end": ["audit_end", "broken_end"]}
    config = _scripted(["open"], hooks)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        sunday = await env.agents.run(
            build_request(entry_agent="clerk", input="hi", metadata={"day": "sunday"})
        )
        monday = await env.agents.run(
            build_request(entry_agent="clerk", input="hi", metadata={"day": "monday"})
        )
        monday_events = _events(env, monday.run_id)
    assert sunday.failure is not None and sunday.failure.code is FailureCode.HOOK_REFUSED
    assert "hook 'closed_on_weekends' refused the run: closed on Sundays" in (
        sunday.failure.message
    )
    assert [request.run_id for request in provider.requests] == [monday.run_id]
    # The end hook saw both ends; the broken one's error is an event, the run completed.
    assert (monday.run_id, "completed", 1) in RUN_ENDS
    assert monday.outcome is RunOutcome.COMPLETED
    [failed] = [e for e in monday_events if e["type"] == "hook_failed"]
    assert failed["stage"] == "on_run_end" and "audit log unreachable" in failed["error"]
