"""`agent.handoff` on a real dev server: a conversation passes from agent to agent.

A handoff continues the root run as new under the next agent (same workflow id, session,
deadline and budget); these tests check what the next agent's model really receives (system
prompt, tools, messages) under each context policy, the bounds (max_handoffs, one per turn,
authorised targets, roots only), the shared budget and the lineage (events, search attribute,
Temporal's continue-as-new chain).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import tomllib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone import search_attributes as attrs
from otherone.activities.providers.base import ModelRequest, StreamEvent
from otherone.authorization import AuthorizationDecision, CallerView, HandoffRequest
from otherone.client.agent_client import AgentClient, build_request
from otherone.client.console import EventPrinter, make_console
from otherone.client.records_view import print_record
from otherone.client.watch import WatchState
from otherone.config import RuntimeConfig
from otherone.contracts import STORE_HEARTBEAT_TIMEOUT
from otherone.definitions import (
    AccessPolicy,
    AgentDefinition,
    HandoffPolicy,
    ModelProfile,
    RuntimeLimits,
    RuntimePolicy,
)
from otherone.errors import ConfigurationError
from otherone.runs import AgentCallRequest, AgentRunResult, RunOutcome
from otherone.toml_config import parse_config
from otherone.tools import tool
from otherone.workflows.handoffs import HandoffArgumentsError, parse_handoff
from tests.harness import AgentEnv, agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider


@tool
def lookup(invoice: int) -> str:
    """Look an invoice up."""
    return f"invoice {invoice}: paid on 2026-11-30"


def handoff(target: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"name": "agent.handoff", "id": call_id, "arguments": {"agent": target, **arguments}}
        ]
    }


def agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {
            "id": agent_id,
            "description": f"{agent_id} agent",
            "system_prompt": f"You are {agent_id}.",
            **fields,
        }
    )


def chain_config(context: str, **limits: Any) -> RuntimeConfig:
    """greeter (answers once); triage → billing → expert, each handing off under ``context``."""
    policy = {"context": context, "last_turns": 1}
    return scripted_config(
        {
            "greeter": ["Hello! How can I help?"],
            "triage": [
                handoff("billing", "h1", reason="a billing question", message="Invoice 42.")
            ],
            "billing": [handoff("expert", "h2", reason="needs the expert")],
            "expert": [
                {"tool_calls": [{"name": "lookup", "arguments": {"invoice": 42}}]},
                "Invoice 42 was paid on 2026-11-30.",
            ],
        },
        agents=[
            agent("greeter"),
            agent("triage", handoff={"agents": ["billing"], **policy}),
            agent("billing", handoff={"agents": ["expert"], **policy}),
            agent("expert", tools=["lookup"]),
        ],
        tools=[lookup],
        limits=RuntimeLimits(**limits),
    )


async def run_chain(env: AgentEnv, session_id: str) -> AgentRunResult:
    """A first exchange in the session, then the question that is handed on twice."""
    session = {"session_id": session_id}
    first = await env.agents.run(
        build_request(entry_agent="greeter", input="Hi there", session=session)
    )
    assert first.outcome is RunOutcome.COMPLETED
    return await env.agents.run(
        build_request(entry_agent="triage", input="Where is my invoice 42?", session=session)
    )


def tool_names(request: ModelRequest) -> list[str]:
    return [tool_["function"]["name"] for tool_ in request.tools]


def texts(request: ModelRequest) -> list[str]:
    return [str(message.get("content") or "") for message in request.messages]


def first_request(provider: RecordingProvider, agent_id: str) -> ModelRequest:
    return next(r for r in provider.calls(agent_id) if r.purpose == "turn")


async def events_of(env: AgentEnv, run_id: str) -> list[dict[str, Any]]:
    return [record.event async for record in env.agents.events(run_id)]


@pytest.mark.parametrize("context", ["full", "summary", "last_turns"])
async def test_a_chain_of_handoffs_under_each_context_policy(
    client: Client, task_queue: str, tmp_path: Path, context: str
) -> None:
    provider = RecordingProvider()
    config = chain_config(context)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await run_chain(env, f"s-{context}")
        events = await events_of(env, result.run_id)
        handle = client.get_workflow_handle(result.run_id)
        description = await handle.describe()
        histories = [
            execution
            async for execution in client.list_workflows(f'WorkflowId = "{result.run_id}"')
        ]
        record = env.store.get_run_record("local", result.run_id)
        finished = await AgentClient(client, task_queue=task_queue).get_run(result.run_id)

    # The root's result is the last agent's, in the same run and session.
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.agent_id == "expert"
    assert result.text == "Invoice 42 was paid on 2026-11-30."
    assert result.session_id == f"s-{context}"
    # The budget is shared: the run's usage counts every agent's calls (and the summaries).
    assert result.usage.model_calls == 4 + (2 if context == "summary" else 0)
    assert result.usage.tool_calls == 3
    # Lineage: events, the run record, the search attribute and Temporal's chain of histories.
    handed = [event for event in events if event["type"] == "handed_off"]
    assert [(e["from_agent"], e["to_agent"], e["handoff"]) for e in handed] == [
        ("triage", "billing", 1),
        ("billing", "expert", 2),
    ]
    assert handed[0]["reason"] == "a billing question" and handed[0]["context"] == context
    assert [e["type"] for e in events].count("run_started") == 1
    assert events[-1]["type"] == "run_completed"
    assert record is not None and record.agent_id == "expert"
    assert [(step.from_agent, step.to_agent, step.turn) for step in record.handoffs] == [
        ("triage", "billing", 1),
        ("billing", "expert", 2),
    ]
    assert record.handoffs[0].reason == "a billing question"
    # Without the store, the finished run's record has them too (from its result).
    assert finished.handoffs == record.handoffs and finished.iteration == record.iteration > 0
    assert finished.agent_definition_version == record.agent_definition_version is not None
    shown = io.StringIO()
    print_record(make_console(shown), record)  # `otherone show`
    assert "triage → billing → expert" in shown.getvalue()
    assert description.typed_search_attributes.get(attrs.AGENT_ID) == "expert"
    assert len(histories) == 3  # one Temporal history per agent, linked by continue-as-new

    # What each next agent's model receives: its own system prompt and tools ...
    billing, expert = first_request(provider, "billing"), first_request(provider, "expert")
    assert texts(billing)[0] == "You are billing."
    assert tool_names(billing) == ["agent.handoff"]
    enum = billing.tools[0]["function"]["parameters"]["properties"]["agent"]["enum"]
    assert enum == ["expert"]
    assert texts(expert)[0] == "You are expert."
    assert tool_names(expert) == ["lookup"]
    # ... and the conversation under the context policy, ending with the handoff note.
    note = texts(billing)[-1]
    assert billing.messages[-1]["role"] == "user"
    assert "Agent 'triage' handed this conversation over to you (Agent 'billing')" in note
    assert "Reason given: a billing question" in note and "Invoice 42." in note
    assert "Agent 'billing' handed this conversation over" in texts(expert)[-1]
    seen = "\n".join(texts(billing))
    if context == "full":
        assert "Hi there" in seen and "Hello! How can I help?" in seen
        assert "Where is my invoice 42?" in seen
        assert [m["role"] for m in billing.messages][-4:] == ["user", "assistant", "tool", "user"]
        assert "Hi there" in "\n".join(texts(expert))
    elif context == "last_turns":
        assert "Hi there" not in seen and "Hello! How can I help?" not in seen
        assert texts(billing)[1] == "Where is my invoice 42?"
        # The expert sees the user's last turn (handoff notes are not the user's turns): the
        # question, both handoffs and the handoff note for itself.
        assert texts(expert)[1] == "Where is my invoice 42?"
        roles = [m["role"] for m in expert.messages]
        assert roles == ["system", "user", "assistant", "tool", "user", "assistant", "tool", "user"]
        assert "Agent 'triage' handed this conversation over" in texts(expert)[4]
        assert "Agent 'billing' handed this conversation over" in texts(expert)[-1]
    else:
        assert [m["role"] for m in billing.messages] == ["system", "system", "user"]
        assert texts(billing)[1].startswith("Summary of the earlier conversation:")
        assert "Hi there" not in seen
        summaries = [r for r in provider.calls() if r.purpose == "summary"]
        assert [r.agent_id for r in summaries] == ["triage", "billing"]
        assert "Where is my invoice 42?" in str(summaries[0].messages[-1]["content"])
        # The summaries' tokens count too (the scripted summary reports 32 output tokens).
        turns = [
            entry.usage or {}
            for entry in env.store.load_entries("local", result.session_id)
            if entry.role == "assistant" and entry.run_id == result.run_id
        ]
        assert result.usage.output_tokens == sum(u["output_tokens"] for u in turns) + 2 * 32


async def test_a_handoff_loop_is_bounded_by_max_handoffs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {
            "ping": [handoff("pong", "to-pong"), "ping answers itself"],
            "pong": [handoff("ping", "to-ping")],
        },
        agents=[
            agent("ping", handoff={"agents": ["pong"]}),
            agent("pong", handoff={"agents": ["ping"]}),
        ],
        limits=RuntimeLimits(max_handoffs=2),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="ping", input="loop"))
        records = [record async for record in env.agents.events(result.run_id)]
    events = [record.event for record in records]

    # `otherone run` and `otherone watch` show each handoff; watch names the current agent.
    out, err = io.StringIO(), io.StringIO()
    printer, state = EventPrinter(result.run_id, out, make_console(err)), WatchState(result.run_id)
    for record in records:
        printer.handle(record)
        state.apply(record)
    assert "⇢ ping handed the conversation to pong (context full)" in err.getvalue()
    assert "⇢ pong handed the conversation to ping (context full)" in err.getvalue()
    assert state.root is not None and state.root.agent_id == "ping"
    assert [a.text for a in state.activity if a.text.startswith("⇢")] == [
        "⇢ ping handed the conversation to pong (context full)",
        "⇢ pong handed the conversation to ping (context full)",
    ]

    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.agent_id == "ping" and result.text == "ping answers itself"
    assert [e["to_agent"] for e in events if e["type"] == "handed_off"] == ["pong", "ping"]
    refused = [e for e in events if e["type"] == "tool_completed" and e.get("error")]
    assert len(refused) == 1 and "max_handoffs (2) reached" in refused[0]["error"]
    # ping's second stint: its first call handed off again and was refused; the model saw why.
    last = provider.calls("ping")[-1]
    assert last.messages[-1]["role"] == "tool"
    assert "max_handoffs (2) reached" in last.messages[-1]["content"]
    # Once the run has none left, `agent.handoff` is no longer offered (a scripted model calls
    # it all the same, and is refused as above).
    offered = [
        {tool["function"]["name"] for tool in request.tools}
        for request in provider.calls("ping")
        if request.purpose == "turn"
    ]
    assert "agent.handoff" in offered[0] and "agent.handoff" not in offered[-1]


async def test_the_default_max_handoffs_is_five(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "ping": [handoff("pong", "to-pong"), "ping is done"],
            "pong": [handoff("ping", "to-ping"), "pong is done"],
        },
        agents=[
            agent("ping", handoff={"agents": ["pong"]}),
            agent("pong", handoff={"agents": ["ping"]}),
        ],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="ping", input="loop"))
        events = await events_of(env, result.run_id)

    assert RuntimeLimits().max_handoffs == 5
    assert len([e for e in events if e["type"] == "handed_off"]) == 5
    # Five handoffs: ping, pong, ping, pong, ping, then pong's hand-back is refused.
    assert result.agent_id == "pong" and result.text == "pong is done"


async def test_the_budget_is_shared_along_the_chain(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = chain_config("full", max_model_calls=3)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(
            build_request(entry_agent="triage", input="Where is my invoice 42?")
        )

    # triage, billing and the expert's first call spend the 3 model calls of the whole run.
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    assert result.agent_id == "expert"
    assert result.failure is not None and "model_calls" in result.failure.message
    assert result.usage.model_calls == 3


def summarising_triage() -> AgentDefinition:
    return agent("triage", handoff={"agents": ["billing"], "context": "summary"})


@pytest.mark.parametrize("spent", ["model_calls", "tokens"])
async def test_a_summary_past_the_budget_ends_the_run_budget_exceeded(
    client: Client, task_queue: str, tmp_path: Path, spent: str
) -> None:
    """The summary is a model call of the run: a budget it would overrun ends the run
    `budget_exceeded` (a model-call budget before the summary is asked for)."""
    provider = RecordingProvider()
    limits = {"max_model_calls": 1} if spent == "model_calls" else {"token_budget": 30}
    config = scripted_config(
        {
            # 20 tokens: within the token budget; the summary's (at least 33) is not.
            "triage": [{**handoff("billing", "h1"), "input_tokens": 10, "output_tokens": 10}],
            "billing": ["never reached"],
        },
        agents=[summarising_triage(), agent("billing")],
        limits=RuntimeLimits(**limits),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="triage", input="Invoice?"))
        events = await events_of(env, result.run_id)

    assert result.outcome is RunOutcome.BUDGET_EXCEEDED, result
    assert result.failure is not None
    assert result.agent_id == "triage" and not provider.calls("billing")
    assert events[-1]["type"] == "run_failed"
    summaries = [r for r in provider.calls() if r.purpose == "summary"]
    if spent == "model_calls":
        assert "max_model_calls (1)" in result.failure.message
        assert summaries == [] and result.usage.model_calls == 1
        assert "handed_off" not in [e["type"] for e in events]
    else:
        assert "token_budget (30)" in result.failure.message
        assert len(summaries) == 1 and result.usage.model_calls == 2
        assert result.usage.total_tokens is not None and result.usage.total_tokens > 30


async def test_the_workers_authorizer_judges_handoffs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    seen: list[tuple[CallerView, str, AgentCallRequest]] = []

    async def authorizer(
        caller: CallerView, target: AgentDefinition, request: AgentCallRequest
    ) -> AuthorizationDecision:
        seen.append((caller, target.id, request))
        if "secret" in request.task:  # written for agent calls: judges handoffs unchanged
            return AuthorizationDecision.deny("no secrets")
        return AuthorizationDecision.allow()

    provider = RecordingProvider()
    config = scripted_config(
        {
            "triage": [
                handoff("billing", "h1", message="a secret", reason="billing"),
                handoff("billing", "h2", message="invoice 42"),
            ],
            "billing": ["Paid."],
        },
        agents=[summarising_triage(), agent("billing")],
    )
    async with agent_env(
        client,
        task_queue,
        config,
        tmp_path,
        providers={"scripted": provider},
        authorizer=authorizer,
    ) as env:
        result = await env.agents.run(build_request(entry_agent="triage", input="Invoice?"))
        events = await events_of(env, result.run_id)
        results = {
            entry.tool_call_id: entry
            for entry in env.store.load_entries("local", result.session_id)
            if entry.role == "tool"
        }

    assert result.outcome is RunOutcome.COMPLETED and result.text == "Paid."
    assert result.agent_id == "billing"
    # The denied handoff is the call's result: triage went on and handed off again.
    denied = results["h1"]
    assert denied.error_kind == "permission_denied"
    assert "may not hand off to 'billing': no secrets" in json.loads(denied.content)["error"]
    assert "handed_off_to" in json.loads(results["h2"].content)
    completed = {e["tool_call_id"]: e for e in events if e["type"] == "tool_completed"}
    assert "no secrets" in completed["h1"]["error"] and completed["h2"]["error"] is None
    assert [e["handoff"] for e in events if e["type"] == "handed_off"] == [1]
    # What the authorizer saw: a handoff, from the root, with its message and reason.
    caller, target, request = seen[0]
    assert (caller.action, caller.agent_id, caller.depth, target) == (
        "handoff",
        "triage",
        0,
        "billing",
    )
    assert isinstance(request, HandoffRequest)
    assert (request.task, request.reason, request.handoff_context) == (
        "a secret",
        "billing",
        "summary",
    )
    # Two triage turns, one summary (for the allowed handoff), one billing turn.
    assert [r.purpose for r in provider.calls("triage")].count("summary") == 1
    assert result.usage.model_calls == 4


class SlowSummaries(RecordingProvider):
    """Summaries take longer than a store activity's heartbeat timeout."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if request.purpose == "summary":
            await asyncio.sleep(STORE_HEARTBEAT_TIMEOUT.total_seconds() + 3)
        async for event in super().stream(request):
            yield event


@pytest.mark.timeout(120)
async def test_a_slow_summary_keeps_the_handoff_activity_alive(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = SlowSummaries()
    config = scripted_config(
        {"triage": [handoff("billing", "h1")], "billing": ["Paid."]},
        agents=[summarising_triage(), agent("billing")],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="triage", input="Invoice?"))

    assert result.outcome is RunOutcome.COMPLETED and result.text == "Paid."
    # One attempt: the activity heartbeated while the model wrote (no heartbeat timeout).
    assert [r.attempt for r in provider.calls() if r.purpose == "summary"] == [1]


async def test_an_unauthorised_target_and_a_second_handoff_in_a_turn_are_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    both = {
        "tool_calls": [
            {"name": "agent.handoff", "id": "bad", "arguments": {"agent": "expert"}},
            {"name": "agent.handoff", "id": "h1", "arguments": {"agent": "billing"}},
            {"name": "agent.handoff", "id": "h2", "arguments": {"agent": "billing"}},
            {
                "name": "agent.handoff",
                "id": "ctx",
                "arguments": {"agent": "billing", "context": "summary"},
            },
        ]
    }
    config = scripted_config(
        {"triage": [both], "billing": ["billing answers"]},
        agents=[
            agent("triage", handoff={"agents": ["billing"]}),
            agent("billing"),
            agent("expert"),
        ],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="triage", input="help"))

    assert result.agent_id == "billing" and result.text == "billing answers"
    results = {
        m["tool_call_id"]: json.loads(m["content"])
        for m in provider.calls("billing")[0].messages
        if m["role"] == "tool"
    }
    assert "handoff to agent 'expert' is not allowed (allowed: billing)" in results["bad"]["error"]
    assert results["h1"]["handed_off_to"] == "billing"
    assert "only one handoff per turn" in results["h2"]["error"]
    assert "does not let the model choose the context" in results["ctx"]["error"]


async def test_the_model_may_choose_the_context_when_the_policy_allows(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {
            "triage": [handoff("billing", "h1", context="summary")],
            "billing": ["billing answers"],
        },
        agents=[
            agent(
                "triage",
                handoff={"agents": ["billing"], "model_may_choose_context": True},
            ),
            agent("billing"),
        ],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="triage", input="help"))

    assert result.text == "billing answers"
    offered = first_request(provider, "triage").tools[0]["function"]["parameters"]
    assert offered["properties"]["context"]["enum"] == ["full", "summary", "last_turns"]
    billing = first_request(provider, "billing")
    assert [m["role"] for m in billing.messages] == ["system", "system", "user"]


async def test_a_child_run_cannot_hand_off(client: Client, task_queue: str, tmp_path: Path) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {
            "boss": [
                {
                    "tool_calls": [
                        {"name": "agent.call", "arguments": {"agent": "triage", "task": "help"}}
                    ]
                },
                "boss is done",
            ],
            "triage": [handoff("billing", "h1"), "triage answers itself"],
            "billing": ["never"],
        },
        agents=[
            agent("boss", callable_agents=["triage"]),
            agent("triage", handoff={"agents": ["billing"]}),
            agent("billing"),
        ],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))

    assert result.text == "boss is done"
    child_first, child_second = provider.calls("triage")
    assert "agent.handoff" not in tool_names(child_first)
    assert "not available to this agent" in child_second.messages[-1]["content"]
    assert provider.calls("billing") == []


def test_handoff_arguments_are_checked() -> None:
    assert parse_handoff('{"agent": "b", "message": " hi ", "reason": ""}').message == "hi"
    for bad, problem in [
        ("[]", "JSON object"),
        ('{"agent": 1}', "'agent'"),
        ('{"agent": "b", "task": "x"}', "unknown argument(s): task"),
        ('{"agent": "b", "context": "half"}', "'context' must be one of"),
        ('{"agent": "b", "message": 3}', "'message' must be a string"),
    ]:
        with pytest.raises(HandoffArgumentsError, match=re.escape(problem)):
            parse_handoff(bad)


def test_handoff_configuration_is_validated() -> None:
    config = scripted_config({"a": ["x"]}, agents=[agent("a", handoff={"agents": ["nobody"]})])
    with pytest.raises(ConfigurationError, match="unknown agent 'nobody'") as raised:
        config.validate()
    assert raised.value.field == "handoff.agents"
    with pytest.raises(ValueError, match="last_turns"):
        agent("a", handoff={"last_turns": 0})


def test_toml_and_python_declare_the_same_handoff_policy() -> None:
    toml = """
[models.demo]
provider = "scripted"
model = "demo"

[policy]
handoff_agents = ["billing"]

[limits]
max_handoffs = 2

[agents.triage]
description = "triage agent"
handoff = { agents = ["billing"], context = "last_turns", last_turns = 4 }

[agents.billing]
description = "billing agent"
"""
    loaded = parse_config(tomllib.loads(toml), source="otherone.toml", base_dir=Path("."))
    declared = RuntimeConfig(
        agents=[
            AgentDefinition(
                id="triage",
                description="triage agent",
                handoff=HandoffPolicy(
                    agents=AccessPolicy.allow("billing"), context="last_turns", last_turns=4
                ),
            ),
            AgentDefinition(id="billing", description="billing agent"),
        ],
        models=[ModelProfile(id="demo", provider="scripted", model="demo")],
        policy=RuntimePolicy(handoff_agents=AccessPolicy.allow("billing")),
        limits=RuntimeLimits(max_handoffs=2),
    )
    assert loaded.snapshot().version == declared.snapshot().version
    snapshot = loaded.snapshot()
    assert [a.id for a in snapshot.handoff_targets(snapshot.agent("triage"))] == ["billing"]
    assert snapshot.handoff_targets(snapshot.agent("billing")) == []  # nothing allowed
    with pytest.raises(ConfigurationError, match="handoff_agents"):
        parse_config(
            tomllib.loads(toml.replace('handoff_agents = ["billing"]', 'handoff_agents = ["x"]')),
            source="otherone.toml",
            base_dir=Path("."),
        )


async def test_a_handoff_can_wait_for_a_persons_approval(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"triage": [handoff("billing", "h1")], "billing": ["billing answers"]},
        agents=[
            agent(
                "triage",
                handoff={"agents": ["billing"]},
                approval={"agent.handoff": "always"},
            ),
            agent("billing"),
        ],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="triage", input="help"))

        async def requested() -> bool:
            return bool(await env.agents.pending_approvals(handle.run_id))

        await wait_until(requested, within=30, message="the handoff's approval request")
        (request,) = await env.agents.pending_approvals(handle.run_id)
        assert request.tool_name == "agent.handoff" and request.agent_id == "triage"
        await env.agents.approve(handle.run_id, "h1")
        result = await handle.result()

    assert result.agent_id == "billing" and result.text == "billing answers"


async def test_the_roots_result_contract_binds_the_last_agent(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A typed root result: the agent the run was handed to is told the contract and its
    answer is checked against it (an answer that breaks it is retried, as for any root)."""
    provider = RecordingProvider()
    schema = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
    config = scripted_config(
        {
            "triage": [handoff("billing", "h1")],
            "billing": ["The total is 42.", '{"total": 42}'],
        },
        agents=[agent("triage", handoff={"agents": ["billing"]}), agent("billing")],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(
            build_request(
                entry_agent="triage",
                input="What is the total?",
                result_contract={"kind": "json", "schema": schema},
            )
        )

    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.agent_id == "billing"
    assert result.output is not None and result.output.value == {"total": 42}
    first = first_request(provider, "billing")
    assert texts(first)[0].startswith("You are billing.")
    assert "must be a single JSON value" in texts(first)[0]


async def test_the_next_agent_keeps_the_requests_max_iterations(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """After a handoff the next agent's iterations are the smaller of the request's
    `max_iterations_per_run` and its own `max_iterations` (as for the first agent), counted
    from the handoff's turn."""
    loop = {"tool_calls": [{"name": "lookup", "arguments": {"invoice": 1}}]}
    config = scripted_config(
        {
            "to-long": [handoff("long", "h1")],
            "to-short": [handoff("short", "h1")],
            "long": [loop] * 12,
            "short": [loop] * 12,
        },
        agents=[
            agent("to-long", handoff={"agents": ["long"]}),
            agent("to-short", handoff={"agents": ["short"]}),
            agent("long", tools=["lookup"], limits={"max_iterations": 6}),
            agent("short", tools=["lookup"], limits={"max_iterations": 1}),
        ],
        tools=[lookup],
        limits=RuntimeLimits(max_iterations_per_run=10),
    )
    limits = {"max_iterations_per_run": 2}
    async with agent_env(client, task_queue, config, tmp_path) as env:
        by_request, by_agent = await asyncio.gather(
            env.agents.run(build_request(entry_agent="to-long", input="go", limits=limits)),
            env.agents.run(build_request(entry_agent="to-short", input="go", limits=limits)),
        )
    for result, turns in ((by_request, 1 + 2), (by_agent, 1 + 1)):
        assert result.outcome is RunOutcome.BUDGET_EXCEEDED, result.failure
        assert result.failure is not None
        assert result.failure.message == f"max_iterations ({turns}) exceeded"
        assert result.usage.model_calls == turns


async def test_a_handoff_beside_a_call_waiting_for_a_person_is_announced_with_the_turn(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A handoff takes effect once its turn has every result: while another call of the turn
    waits for a person, it is not announced as done; cancelled meanwhile, it has one start and
    one end, the end the session holds (it had two, contradicting each other: a user found)."""
    turn = {
        "tool_calls": [
            {"name": "lookup", "id": "ap", "arguments": {"invoice": 7}},
            {"name": "agent.handoff", "id": "ah", "arguments": {"agent": "billing"}},
        ]
    }
    config = scripted_config(
        {"triage": [turn], "billing": ["billing answers"]},
        agents=[
            agent(
                "triage",
                tools=["lookup"],
                approval={"lookup": "always"},
                handoff={"agents": ["billing"]},
            ),
            agent("billing"),
        ],
        tools=[lookup],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="triage", input="help"))

        async def requested() -> bool:
            return bool(await env.agents.pending_approvals(handle.run_id))

        await wait_until(requested, within=30, message="the lookup's approval request")
        waiting = [r.event for r in env.store.read_events(handle.run_id)]
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), 30)
        events = [r.event for r in env.store.read_events(handle.run_id)]
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.CANCELLED
    assert not [e for e in waiting if e.get("tool_call_id") == "ah"]  # not done while it waits
    handoff_events = [(e["type"], e.get("error")) for e in events if e.get("tool_call_id") == "ah"]
    (answer,) = [e for e in entries if e.tool_call_id == "ah"]
    assert answer.error_kind == "cancelled"
    message = json.loads(answer.content)["error"]
    assert handoff_events == [("tool_started", None), ("tool_completed", message)]


async def test_a_summary_takes_the_fleets_model_permit_like_any_model_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The handoff's summary is a model call: it holds a permit of the fleet's model scope
    while the model writes (README "Fleet capacity"), and gives it back after."""
    held: list[tuple[str, tuple[int, int]]] = []
    env_box: list[AgentEnv] = []

    class Watching(RecordingProvider):
        async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
            scope = f"model@{task_queue}"
            held.append((request.purpose, env_box[0].store.capacity.in_flight(scope, _now())))
            async for event in super().stream(request):
                yield event

    provider = Watching()
    config = scripted_config(
        {"triage": [handoff("billing", "h1")], "billing": ["Paid."]},
        agents=[summarising_triage(), agent("billing")],
        limits=RuntimeLimits(max_concurrent_model_calls=1),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        env_box.append(env)
        result = await env.agents.run(build_request(entry_agent="triage", input="Invoice?"))
        after = env.store.capacity.in_flight(f"model@{task_queue}", _now())
    assert result.outcome is RunOutcome.COMPLETED, result
    assert [purpose for purpose, _ in held].count("summary") == 1
    assert all(counts == (1, 0) for _, counts in held), held  # each call, the summary too
    assert after == (0, 0)


def _now() -> datetime:
    return datetime.now(UTC)
