"""The built-in guardrails (issue 45): a tool-argument allowlist, and a topic guardrail decided
by a small agent whose typed answer trips or passes (a real run of its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.definitions import AgentDefinition
from otherone.errors import FailureCode
from otherone.guardrails import GuardrailCheck
from otherone.guardrails.builtin import argument_allowlist, topic_guardrail
from otherone.runs import RunOutcome
from tests.guardrail_fixtures import SIDE_EFFECTS, send_money
from tests.harness import AgentEnv, agent_env, scripted_config
from tests.providers import RecordingProvider

ALLOW_BOB = argument_allowlist("allow_bob", {"send_money": {"to": ["bob", "carol"]}})
ON_TOPIC = topic_guardrail("on_topic", "topic_judge")


def _events(env: AgentEnv, run_id: str) -> list[dict[str, Any]]:
    return [record.event for record in env.store.read_events(run_id, after=0)]


def test_the_allowlist_passes_listed_values_and_other_tools() -> None:
    def check(tool: str, arguments: dict[str, Any]) -> GuardrailCheck:
        return GuardrailCheck(
            kind="tool", run_id="r", agent_id="a", turn=1, tool_name=tool, arguments=arguments
        )

    assert not ALLOW_BOB.function(check("send_money", {"to": "bob", "amount": 5})).tripped
    assert not ALLOW_BOB.function(check("other_tool", {"to": "mallory"})).tripped
    tripped = ALLOW_BOB.function(check("send_money", {"to": "mallory", "amount": 5}))
    assert tripped.tripped
    assert tripped.reason == (
        'argument \'to\' of tool \'send_money\' may not be "mallory" (allowed: ["bob", "carol"])'
    )


async def test_the_allowlist_refuses_a_call_outside_it_in_a_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SIDE_EFFECTS.clear()
    call = {"name": "send_money", "id": "m1", "arguments": {"to": "mallory", "amount": 1}}
    agent = AgentDefinition.model_validate(
        {
            "id": "clerk",
            "description": "a clerk",
            "tools": ["send_money"],
            "guardrails": {"tool": ["allow_bob"]},
        }
    )
    config = scripted_config(
        {"clerk": [{"tool_calls": [call]}, "refused"]}, agents=[agent], tools=[send_money]
    )
    config.add_guardrail(ALLOW_BOB)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="pay"))
    assert result.outcome is RunOutcome.COMPLETED and SIDE_EFFECTS == []


def _topic_config(verdicts: list[str]) -> Any:
    agents = [
        AgentDefinition.model_validate(
            {"id": "clerk", "description": "a clerk", "guardrails": {"input": ["on_topic"]}}
        ),
        AgentDefinition(
            id="topic_judge",
            description="Judges topics.",
            system_prompt="Allowed topics: banking. Anything else is off topic.",
        ),
    ]
    config = scripted_config(
        {"clerk": ["Your balance is 12."], "topic_judge": verdicts}, agents=agents
    )
    config.add_guardrail(ON_TOPIC)
    return config


async def test_a_topic_guardrail_backed_by_an_agent_trips_on_its_typed_answer(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = _topic_config(['{"allowed": false, "reason": "cooking is not banking"}'])
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(
            build_request(entry_agent="clerk", input="How do I bake bread?")
        )
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_TRIPPED
    assert "input guardrail 'on_topic' tripped: cooking is not banking" in result.failure.message
    assert provider.calls("clerk") == []  # the clerk's model was never called
    [asked] = provider.calls("topic_judge")
    assert "How do I bake bread?" in asked.messages[-1]["content"]
    assert "Allowed topics: banking" in asked.messages[0]["content"]
    [tripped] = [event for event in events if event["type"] == "guardrail_tripped"]
    assert tripped["guardrail"] == "on_topic"


async def test_a_topic_guardrail_passes_an_allowed_message(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _topic_config(['{"allowed": true}'])
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="My balance?"))
    assert result.outcome is RunOutcome.COMPLETED and result.text == "Your balance is 12."
