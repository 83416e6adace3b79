"""Representative runs whose histories are checked in and replayed (determinism guard).

Each scenario drives a real run and returns its workflow id; `record.py` stores the history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelOverrides
from otherone.tools import tool
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider


@tool
def get_weather(city: str) -> dict[str, str]:
    """Weather of a city (fixed data)."""
    return {"city": city, "condition": "sunny"}


def _agent(**fields: object) -> AgentDefinition:
    return AgentDefinition.model_validate({"id": "agent", "description": "replay agent", **fields})


async def tools_and_streaming(client: Client, task_queue: str, tmp: Path) -> str:
    config = scripted_config(
        {
            "agent": [
                {
                    "text": "checking",
                    "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
                },
                {"chunks": ["It is ", "sunny."]},
            ]
        },
        agents=[_agent(tools=["get_weather"])],
        tools=[get_weather],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="Weather in Paris?"))
    return result.run_id


async def parallel_tools(client: Client, task_queue: str, tmp: Path) -> str:
    calls = [
        {"name": "get_weather", "arguments": {"city": city}} for city in ("Paris", "Rome", "Oslo")
    ]
    config = scripted_config(
        {"agent": [{"tool_calls": calls}, "All sunny."]},
        agents=[
            _agent(tools=["get_weather"], model_overrides=ModelOverrides(parallel_tool_calls=True))
        ],
        tools=[get_weather],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(
            build_request(entry_agent="agent", input="Weather in three cities?")
        )
    return result.run_id


async def signal_mid_run(client: Client, task_queue: str, tmp: Path) -> str:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["first", "second"]})
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="hello"))
        await asyncio.wait_for(provider.started.wait(), 10)
        await handle.send_message("one more thing")
        await handle.record()
        gate.set()
        await handle.result()
    return handle.run_id


async def cancelled(client: Client, task_queue: str, tmp: Path) -> str:
    provider = RecordingProvider()
    provider.gate("agent", 1)
    config = scripted_config({"agent": ["never"]})
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="wait"))
        await asyncio.wait_for(provider.started.wait(), 10)
        await handle.cancel()
        await handle.result()
    return handle.run_id


async def timed_out(client: Client, task_queue: str, tmp: Path) -> str:
    provider = RecordingProvider()
    provider.gate("agent", 1)
    config = scripted_config({"agent": ["never"]})
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        result = await env.agents.run(
            build_request(entry_agent="agent", input="wait", limits={"root_timeout": 1})
        )
    return result.run_id


def _call(call_id: str, target: str, task: str) -> dict[str, object]:
    return {"name": "agent.call", "id": call_id, "arguments": {"agent": target, "task": task}}


def _team_config(**script: list[Any]) -> RuntimeConfig:
    agents = [
        AgentDefinition.model_validate({"id": "a", "description": "a", "callable_agents": ["b"]}),
        AgentDefinition.model_validate({"id": "b", "description": "b", "callable_agents": ["c"]}),
        AgentDefinition.model_validate({"id": "c", "description": "c"}),
    ]
    return scripted_config(script, agents=agents)


async def nested_call(client: Client, task_queue: str, tmp: Path) -> str:
    config = _team_config(
        a=[{"tool_calls": [_call("to_b", "b", "ask c")]}, "a done"],
        b=[{"tool_calls": [_call("to_c", "c", "answer")]}, "b done"],
        c=["c done"],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="a", input="go"))
    return result.run_id


async def cancelled_tree(client: Client, task_queue: str, tmp: Path) -> str:
    provider = RecordingProvider()
    provider.gate("c", 1)
    config = _team_config(
        a=[{"tool_calls": [_call("to_b", "b", "ask c")]}],
        b=[{"tool_calls": [_call("to_c", "c", "answer")]}],
        c=["never"],
    )
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        handle = await env.agents.start(build_request(entry_agent="a", input="go"))
        await wait_until(lambda: any(request.agent_id == "c" for request in provider.requests))
        await handle.cancel()
        await handle.result()
    return handle.run_id


async def timed_out_child(client: Client, task_queue: str, tmp: Path) -> str:
    provider = RecordingProvider()
    provider.gate("b", 1)
    config = _team_config(a=[{"tool_calls": [_call("to_b", "b", "slow")]}, "a done"], b=["never"])
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        result = await env.agents.run(
            build_request(entry_agent="a", input="go", limits={"root_timeout": 1})
        )
    return result.run_id


SCENARIOS: dict[str, Callable[[Client, str, Path], Awaitable[str]]] = {
    "tools_and_streaming": tools_and_streaming,
    "parallel_tools": parallel_tools,
    "signal_mid_run": signal_mid_run,
    "cancelled": cancelled,
    "timed_out": timed_out,
    "nested_call": nested_call,
    "cancelled_tree": cancelled_tree,
    "timed_out_child": timed_out_child,
}
