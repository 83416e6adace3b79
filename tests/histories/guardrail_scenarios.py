"""Replay scenarios of guardrails (issue 45): each guardrail an activity, its verdict decided
by the workflow."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, RuntimeLimits
from tests.guardrail_fixtures import ALL_GUARDRAILS, lookup_contact, send_money
from tests.harness import agent_env, scripted_config
from tests.providers import RecordingProvider


def _config(turns: list[object], guardrails: dict[str, object]) -> RuntimeConfig:
    agent = AgentDefinition.model_validate(
        {
            "id": "agent",
            "description": "replay agent",
            "tools": ["send_money"],
            "guardrails": guardrails,
        }
    )
    config = scripted_config({"agent": turns}, agents=[agent], tools=[send_money])
    for check in ALL_GUARDRAILS:
        config.add_guardrail(check)
    return config


def _transfer(amount: int, call_id: str) -> dict[str, object]:
    arguments = {"to": "bob", "amount": amount}
    return {"tool_calls": [{"name": "send_money", "id": call_id, "arguments": arguments}]}


async def guardrails_passed_refused_retried(client: Client, task_queue: str, tmp: Path) -> str:
    """The input passes; a transfer is refused by its tool guardrail (the model sees why), a
    small one runs; the first answer trips the output guardrail and the model answers again."""
    config = _config(
        [_transfer(5000, "t1"), _transfer(5, "t2"), "a stupid answer", "All done."],
        {
            "input": ["no_secrets"],
            "output": ["polite_answer"],
            "tools": {"send_money": ["small_amounts"]},
            "on_output_trip": "retry",
        },
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="Pay bob."))
    assert result.text == "All done.", result
    return result.run_id


async def guardrail_input_tripped(client: Client, task_queue: str, tmp: Path) -> str:
    """The input trips its guardrail: the run fails before any model call."""
    config = _config(["never"], {"input": ["no_secrets"]})
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(
            build_request(entry_agent="agent", input="my password is hunter2")
        )
    assert result.failure is not None and result.failure.code.value == "guardrail_tripped"
    return result.run_id


async def guardrail_parallel_trip(client: Client, task_queue: str, tmp: Path) -> str:
    """Parallel input mode: the model call (held until cancelled) starts beside the guardrail,
    whose trip cancels it."""
    provider = RecordingProvider()
    provider.gate("agent", 1)  # never opened
    config = _config(["never"], {"input": ["no_secrets"], "input_mode": "parallel"})
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        result = await env.agents.run(
            build_request(entry_agent="agent", input="my password is hunter2")
        )
    assert result.failure is not None and result.failure.code.value == "guardrail_tripped"
    assert len(provider.requests) == 1
    return result.run_id


async def guardrail_result_withheld(client: Client, task_queue: str, tmp: Path) -> str:
    """A tool result (stored, read back by the guardrail) is withheld by its guardrail: the
    model answers without it."""
    agent = AgentDefinition.model_validate(
        {
            "id": "agent",
            "description": "replay agent",
            "tools": ["lookup_contact"],
            "guardrails": {"tool_result": ["no_contact_details"]},
        }
    )
    call = {"name": "lookup_contact", "id": "l1", "arguments": {"name": "ann"}}
    config = scripted_config(
        {"agent": [{"tool_calls": [call]}, "I cannot share it."]},
        agents=[agent],
        tools=[lookup_contact],
        limits=RuntimeLimits(inline_tool_result_bytes=0),
    )
    for check in ALL_GUARDRAILS:
        config.add_guardrail(check)
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="ann's mail?"))
    assert result.text == "I cannot share it.", result
    return result.run_id
