"""Representative runs whose histories are checked in and replayed (determinism guard).

Each scenario drives a real run and returns its workflow id; `record.py` stores the history.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.contracts import SIGNAL_CAPACITY_FREED
from otherone.contracts.agent_calls import child_run_id
from otherone.definitions import (
    AgentDefinition,
    ModelOverrides,
    ModelProfile,
    RuntimeLimits,
    RuntimePolicy,
)
from otherone.examples import EXAMPLE_CONFIG
from otherone.mcp_servers import McpServer
from otherone.runs import AgentCallRequest
from otherone.store.capacity import CapacityClaim, ScopeLimit
from otherone.toml_config import load_config
from otherone.tools import tool
from tests.edge_seams import GateStore
from tests.harness import agent_env, scripted_config, wait_until
from tests.histories.fork_scenarios import forked_run
from tests.histories.guardrail_scenarios import (
    guardrail_input_tripped,
    guardrail_parallel_trip,
    guardrail_result_withheld,
    guardrails_passed_refused_retried,
)
from tests.histories.multimodal_scenarios import image_agent_call, image_input
from tests.histories.webhook_scenarios import webhook, webhook_delivery
from tests.providers import RecordingProvider


@tool
def get_weather(city: str) -> dict[str, str]:
    """Weather of a city (fixed data)."""
    return {"city": city, "condition": "sunny"}


@tool(approval="always")
def send_note(to: str, text: str) -> str:
    """Send a note (needs a person's approval)."""
    return f"sent to {to}"


@tool(approval="always", approval_timeout_seconds=1)
def publish(text: str) -> str:
    """Publish a text (needs approval within a second, else it is denied)."""
    return "published"


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


async def cancelled_while_children_start(client: Client, task_queue: str, tmp: Path) -> str:
    """Cancelled while two parallel children's starts are with the server: the starts are
    waited for and the children stopped. The cancel is sent the moment the first call is
    announced; a run it missed the window of is tried again (most land in it)."""
    agents = [
        AgentDefinition.model_validate(
            {
                "id": "a",
                "description": "a",
                "callable_agents": ["b"],
                "model_overrides": {"parallel_tool_calls": True},
            }
        ),
        AgentDefinition.model_validate({"id": "b", "description": "b"}),
    ]
    script = {"a": [{"tool_calls": [_call("b1", "b", "one"), _call("b2", "b", "two")]}, "a done"]}
    config = scripted_config({**script, "b": ["b done"]}, agents=agents)
    async with agent_env(client, task_queue, config, tmp) as env:
        for _ in range(20):
            handle = await env.agents.start(build_request(entry_agent="a", input="go"))

            def announced(run_id: str = handle.run_id) -> bool:
                events = env.store.read_events(run_id)
                return any(record.event["type"] == "agent_call_started" for record in events)

            await wait_until(announced, interval=0.002)
            await handle.cancel()
            await handle.result()
            history = await client.get_workflow_handle(handle.run_id).fetch_history()
            if _cancelled_between_start_and_started(history.events):
                return handle.run_id
    raise RuntimeError("no cancel landed while a child's start was under way in 20 runs")


def _cancelled_between_start_and_started(events: Sequence[HistoryEvent]) -> bool:
    """The cancel request arrived after a child's start was initiated, before it started."""
    kinds = [event.event_type for event in events]
    try:
        initiated = kinds.index(EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
        requested = kinds.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
        started = kinds.index(EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED)
    except ValueError:
        return False
    return initiated < requested < started


async def cancelled_sequential_calls(client: Client, task_queue: str, tmp: Path) -> str:
    """Cancelled while the first of two sequential calls runs: the second is never started."""
    provider = RecordingProvider()
    provider.gate("b", 1)
    agents = [
        AgentDefinition.model_validate(
            {"id": "a", "description": "a", "callable_agents": ["b", "c"]}
        ),
        AgentDefinition.model_validate({"id": "b", "description": "b"}),
        AgentDefinition.model_validate({"id": "c", "description": "c"}),
    ]
    config = scripted_config(
        {"a": [{"tool_calls": [_call("to_b", "b", "one"), _call("to_c", "c", "two")]}]},
        agents=agents,
    )
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        handle = await env.agents.start(build_request(entry_agent="a", input="go"))
        await wait_until(lambda: any(request.agent_id == "b" for request in provider.requests))
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


async def single_agent(client: Client, task_queue: str, tmp: Path) -> str:
    config = scripted_config({"agent": ["Hello there."]})
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="hi"))
    return result.run_id


async def agent_call(client: Client, task_queue: str, tmp: Path) -> str:
    config = _team_config(a=[{"tool_calls": [_call("to_b", "b", "help")]}, "a done"], b=["b done"])
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="a", input="go"))
    return result.run_id


async def readable_ids(client: Client, task_queue: str, tmp: Path) -> str:
    """A keyed root (readable id) calls a child on the `readable-child-ids` path: the child's id
    names its agent and call id, and it starts with Web UI details."""
    config = _team_config(a=[{"tool_calls": [_call("to_b", "b", "help")]}, "a done"], b=["b done"])
    async with agent_env(client, task_queue, config, tmp) as env:
        request = build_request(entry_agent="a", input="go", idempotency_key=f"history {tmp.name}")
        result = await env.agents.run(request)
    return result.run_id


async def parallel_children(client: Client, task_queue: str, tmp: Path) -> str:
    agents = [
        AgentDefinition.model_validate(
            {
                "id": "boss",
                "description": "boss",
                "callable_agents": ["x", "y"],
                "model_overrides": {"parallel_tool_calls": True},
            }
        ),
        AgentDefinition.model_validate({"id": "x", "description": "x"}),
        AgentDefinition.model_validate({"id": "y", "description": "y"}),
    ]
    config = scripted_config(
        {
            "boss": [{"tool_calls": [_call("cx", "x", "one"), _call("cy", "y", "two")]}, "merged"],
            "x": ["x done"],
            "y": ["y done"],
        },
        agents=agents,
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
    return result.run_id


async def trusted_call(client: Client, task_queue: str, tmp: Path) -> str:
    provider = RecordingProvider()
    gate = provider.gate("a", 1)
    config = _team_config(a=["a done"], b=["b done"])
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        handle = await env.agents.start(build_request(entry_agent="a", input="go"))
        await asyncio.wait_for(provider.started.wait(), 10)
        await env.agents.call_agent(handle.run_id, "t1", AgentCallRequest(target="b", task="t"))
        gate.set()
        await handle.result()
    return handle.run_id


async def tool_concurrency(client: Client, task_queue: str, tmp: Path) -> str:
    """Four parallel tool calls, at most two at a time (`max_concurrent_tool_calls`)."""
    calls = [{"name": "get_weather", "arguments": {"city": f"c{n}"}} for n in range(4)]
    config = scripted_config(
        {"agent": [{"tool_calls": calls}, "All sunny."]},
        agents=[
            _agent(tools=["get_weather"], model_overrides=ModelOverrides(parallel_tool_calls=True))
        ],
        tools=[get_weather],
        limits=RuntimeLimits(max_concurrent_tool_calls=2),
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="four cities"))
    return result.run_id


async def budget_exceeded(client: Client, task_queue: str, tmp: Path) -> str:
    again = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    config = scripted_config(
        {"agent": [again, again, again]},
        agents=[_agent(tools=["get_weather"])],
        tools=[get_weather],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(
            build_request(entry_agent="agent", input="loop", limits={"max_iterations_per_run": 2})
        )
    return result.run_id


async def output_budget_exceeded(client: Client, task_queue: str, tmp: Path) -> str:
    """a's child b answers within the tree's `max_output_bytes`; a's own answer passes it."""
    config = _team_config(
        a=[{"tool_calls": [_call("to_b", "b", "answer")]}, "a done"], b=["b done"]
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(
            build_request(entry_agent="a", input="go", limits={"max_output_bytes": 10})
        )
    return result.run_id


async def cost_budget_exceeded(client: Client, task_queue: str, tmp: Path) -> str:
    """Priced calls: a's call ($0.0045) leaves half of its $0.005 budget's rest to its child b,
    whose call ($0.0002) fits; a's second call passes `cost_budget`."""

    def turn(**fields: Any) -> dict[str, Any]:
        return {"input_tokens": 1000, "output_tokens": 100, **fields}

    model = ModelProfile.model_validate(
        {
            "id": "scripted",
            "provider": "scripted",
            "model": "test",
            "prices": {"input": "3", "output": "15", "cache_read": "0.3"},
            "script": {
                "a": [turn(tool_calls=[_call("to_b", "b", "answer")]), turn(text="a done")],
                "b": [{"text": "b done", "input_tokens": 40, "output_tokens": 5}],
            },
        }
    )
    agents = [_agent(id="a", callable_agents=["b"]), _agent(id="b")]
    config = RuntimeConfig(agents=agents, models=[model])
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(
            build_request(entry_agent="a", input="go", limits={"cost_budget": "0.005"})
        )
    return result.run_id


async def continue_as_new(client: Client, task_queue: str, tmp: Path) -> str:
    turns: list[Any] = [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": f"c{n}"}}]} for n in range(5)
    ]
    config = scripted_config(
        {"agent": [*turns, "done"]},
        agents=[_agent(tools=["get_weather"])],
        tools=[get_weather],
        policy=RuntimePolicy(continue_as_new_after_turns=3),
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="count"))
    return result.run_id


async def compaction(client: Client, task_queue: str, tmp: Path) -> str:
    """Long turns in a 1,000-token window: the later model calls summarise the older part."""
    long_turn = {
        "text": "word " * 300,
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
    }
    config = scripted_config(
        {"agent": [long_turn, long_turn, long_turn, "short"]},
        agents=[_agent(tools=["get_weather"])],
        tools=[get_weather],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(
            build_request(entry_agent="agent", input="talk", session={"context_window": 1000})
        )
        events = [e.event["type"] async for e in env.agents.events(result.run_id)]
    assert "context_compacted" in events, events
    return result.run_id


async def _open_requests(env: Any, run_id: str, count: int) -> None:
    async def listed() -> bool:
        return len(await env.agents.pending_approvals(run_id)) >= count

    await wait_until(listed, within=20, message="open approval requests")


async def approval_mixed_turn(client: Client, task_queue: str, tmp: Path) -> str:
    """Parallel calls: one approved with edits (twice: idempotent), one plain, one denied."""
    calls = [
        {"id": "a", "name": "send_note", "arguments": {"to": "ann", "text": "hi"}},
        {"id": "p", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "d", "name": "send_note", "arguments": {"to": "all", "text": "spam"}},
    ]
    config = scripted_config(
        {"agent": [{"tool_calls": calls}, "done"]},
        agents=[
            _agent(
                tools=["send_note", "get_weather"],
                model_overrides=ModelOverrides(parallel_tool_calls=True),
            )
        ],
        tools=[send_note, get_weather],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="notes"))
        await _open_requests(env, handle.run_id, 2)
        edited = {"to": "ann", "text": "hello"}
        await env.agents.approve(handle.run_id, "a", edited)
        await env.agents.approve(handle.run_id, "a", edited)
        await env.agents.deny(handle.run_id, "d", "not to everyone")
        await handle.result()
    return handle.run_id


async def approval_decided_at_once(client: Client, task_queue: str, tmp: Path) -> str:
    """Two people approve one call at the same moment (two updates in one activation: the
    second waits for the first, patch `decisions-wait-their-turn`), then a later turn repeats
    the call id (a new request, decided by a new update)."""
    note = {"name": "send_note", "arguments": {"to": "ann", "text": "hi"}}
    config = scripted_config(
        {
            "agent": [
                {"tool_calls": [{"id": "a", **note}]},
                {"tool_calls": [{"id": "a", **note}]},
                "done",
            ]
        },
        agents=[_agent(tools=["send_note"])],
        tools=[send_note],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="notes"))
        await _open_requests(env, handle.run_id, 1)
        other = AgentClient(client, task_queue=task_queue, store=env.store, identity="bo")
        await asyncio.gather(
            env.agents.approve(handle.run_id, "a"), other.approve(handle.run_id, "a")
        )
        await wait_until(lambda: _decided_twice(env, handle.run_id), within=20, message="turn 2")
        await env.agents.approve(handle.run_id, "a")
        await handle.result()
    return handle.run_id


async def _decided_twice(env: Any, run_id: str) -> bool:
    """Whether the second turn's request (the repeated call id) is open."""
    requested = [
        e for e in env.store.read_events(run_id) if e.event["type"] == "approval_requested"
    ]
    return len(requested) == 2 and bool(await env.agents.pending_approvals(run_id))


async def approval_question_and_timeout(client: Client, task_queue: str, tmp: Path) -> str:
    """Sequential: a plain call runs before an approved one; a question answered; then an
    approval nobody gives in time (denied by its timeout)."""
    sequential = [
        {"id": "n", "name": "send_note", "arguments": {"to": "bo", "text": "x"}},
        {"id": "w", "name": "get_weather", "arguments": {"city": "Rome"}},
    ]
    config = scripted_config(
        {
            "agent": [
                {"tool_calls": sequential},
                {"tool_calls": [{"id": "q", "name": "human.ask", "arguments": {"question": "?"}}]},
                {"tool_calls": [{"id": "late", "name": "publish", "arguments": {"text": "x"}}]},
                "done",
            ]
        },
        agents=[_agent(tools=["send_note", "get_weather", "publish"], ask_human=True)],
        tools=[send_note, get_weather, publish],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="go"))
        await _open_requests(env, handle.run_id, 1)
        await env.agents.approve(handle.run_id, "n")
        await wait_until(
            lambda: _has_question(env, handle.run_id), within=20, message="the question"
        )
        await env.agents.answer(handle.run_id, "q", "yes")
        await handle.result()
    return handle.run_id


async def _has_question(env: Any, run_id: str) -> bool:
    return any(r.call_id == "q" for r in await env.agents.pending_approvals(run_id))


async def approval_cancelled(client: Client, task_queue: str, tmp: Path) -> str:
    config = scripted_config(
        {
            "agent": [
                {
                    "tool_calls": [
                        {"id": "n", "name": "send_note", "arguments": {"to": "a", "text": "b"}}
                    ]
                }
            ]
        },
        agents=[_agent(tools=["send_note"])],
        tools=[send_note],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="go"))
        await _open_requests(env, handle.run_id, 1)
        await handle.cancel()
        await handle.result()
    return handle.run_id


async def mcp_tools(client: Client, task_queue: str, tmp: Path) -> str:
    """Two MCP calls (mcp-server-time over stdio), one refused for bad arguments."""
    ask = {"name": "mcp.time.get_current_time", "arguments": {"timezone": "Europe/Paris"}}
    bad = {"name": "mcp.time.get_current_time", "arguments": {"timezone": 7}}
    config = scripted_config(
        {"agent": [{"tool_calls": [bad]}, {"tool_calls": [ask]}, "It is noon in Paris."]},
        agents=[_agent(tools=["mcp.time.*"])],
    )
    config.add_mcp_server(
        McpServer(name="time", command=sys.executable, args=("-m", "mcp_server_time"))
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="Time in Paris?"))
    return result.run_id


async def cancelled_in_prepare(client: Client, task_queue: str, tmp: Path) -> str:
    """Cancelled while `prepare_run` is held: ends cancelled once prepare has stopped."""
    store = GateStore(f"sqlite:///{tmp / 'store.db'}")
    config = scripted_config({"agent": ["never"]})
    try:
        async with agent_env(client, task_queue, config, tmp, store=store) as env:
            handle = await env.agents.start(build_request(entry_agent="agent", input="wait"))
            assert await asyncio.to_thread(store.entered.wait, 20)
            await handle.cancel()
            result = await handle.result()
    finally:
        store.release.set()
        store.close()
    assert result.outcome.value == "cancelled", result
    return handle.run_id


async def cancelled_mid_tool(client: Client, task_queue: str, tmp: Path) -> str:
    """Cancelled while two parallel tool calls run: both get a `cancelled` result."""
    started = asyncio.Event()

    @tool
    async def slow_lookup(topic: str) -> str:
        """Look a topic up (waits until cancelled)."""
        started.set()
        await asyncio.Event().wait()
        return topic

    calls = [{"name": "slow_lookup", "arguments": {"topic": t}} for t in ("a", "b")]
    config = scripted_config(
        {"agent": [{"tool_calls": calls}]},
        agents=[
            _agent(tools=["slow_lookup"], model_overrides=ModelOverrides(parallel_tool_calls=True))
        ],
        tools=[slow_lookup],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="look up"))
        await asyncio.wait_for(started.wait(), 20)
        await handle.cancel()
        result = await handle.result()
    assert result.outcome.value == "cancelled", result
    return handle.run_id


async def cancelled_after_inline_results(client: Client, task_queue: str, tmp: Path) -> str:
    """Small results come back inline (`ToolOutcome.content`) in a first turn; in the second,
    one call's result arrives inline and the run is cancelled while the other waits: the run's
    end writes the inline result that arrived (`ToolSteps.arrived`)."""
    waiting = asyncio.Event()

    @tool
    async def lookup(topic: str) -> str:
        """Look a topic up ("wait" waits until cancelled)."""
        if topic == "wait":
            waiting.set()
            await asyncio.Event().wait()
        return topic

    def lookups(*topics: str) -> list[dict[str, object]]:
        return [{"name": "lookup", "arguments": {"topic": t}} for t in topics]

    config = scripted_config(
        {"agent": [{"tool_calls": lookups("a", "b")}, {"tool_calls": lookups("c", "wait")}]},
        agents=[_agent(tools=["lookup"], model_overrides=ModelOverrides(parallel_tool_calls=True))],
        tools=[lookup],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="look up"))
        await asyncio.wait_for(waiting.wait(), 20)
        await wait_until(lambda: _completed_tools(client, handle.run_id, 3), within=20)
        await handle.cancel()
        result = await handle.result()
    assert result.outcome.value == "cancelled", result
    return handle.run_id


async def _completed_tools(client: Client, run_id: str, count: int) -> bool:
    """Whether ``count`` tool activities of the run have completed (in its history)."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    done = [
        event
        for event in history.events
        if event.HasField("activity_task_completed_event_attributes")
        and b'"tool_call_id"'
        in event.activity_task_completed_event_attributes.result.payloads[0].data
    ]
    return len(done) >= count


async def plain_client_start(client: Client, task_queue: str, tmp: Path) -> str:
    """Started by a plain Temporal client (no search attributes: the run sets them), one
    malformed and one good signal, an approval decided by the update."""
    run_id = f"run-plain-{task_queue}"
    config = load_config(EXAMPLE_CONFIG)
    async with agent_env(client, task_queue, config, tmp) as env:
        raw = {
            "run_id": run_id,
            "root_run_id": run_id,
            "request": {"entry_agent": "clerk", "input": "Add 2 and 3."},
        }
        handle = await client.start_workflow(
            "AgentRunWorkflow", raw, id=run_id, task_queue=task_queue
        )
        await _open_requests(env, run_id, 1)
        await handle.signal("user_messages", {"messages": "not a list"})
        await handle.signal("user_messages", {"messages": ["In one sentence."]})
        await env.agents.approve(run_id, "call_sum")
        await handle.result()
    return run_id


async def plain_client_session(client: Client, task_queue: str, tmp: Path) -> str:
    """Started by a plain Temporal client naming a session (patch `session-described`: it
    lists its session itself) and leaving out the ids."""
    run_id = f"run-plain-session-{task_queue}"
    config = scripted_config({"agent": ["Noted."]}, agents=[_agent()])
    async with agent_env(client, task_queue, config, tmp):
        # Without run_id and root_run_id, as a schedule starts it (patch `ids-from-workflow-id`).
        raw = {
            "request": {"entry_agent": "agent", "input": "Hi.", "session": {"session_id": "talk"}}
        }
        await client.execute_workflow("AgentRunWorkflow", raw, id=run_id, task_queue=task_queue)
    return run_id


_COUNT_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


async def output_retry(client: Client, task_queue: str, tmp: Path) -> str:
    """A root with a JSON Schema contract: prose, then a schema violation, each fed back to the
    model (patch output-retries), then a valid answer."""
    config = scripted_config({"agent": ["About one.", '{"n": "one"}', '{"n": 1}']})
    contract = {"kind": "json", "schema": _COUNT_SCHEMA}
    async with agent_env(client, task_queue, config, tmp) as env:
        request = build_request(entry_agent="agent", input="Count.", result_contract=contract)
        result = await env.agents.run(request)
    assert result.outcome.value == "completed" and result.usage.model_calls == 3, result
    return result.run_id


async def output_retries_spent(client: Client, task_queue: str, tmp: Path) -> str:
    """One output retry allowed, two broken answers: the run ends failed/invalid_agent_output."""
    config = scripted_config({"agent": ["About one.", '{"n": "one"}']})
    contract = {"kind": "json", "schema": _COUNT_SCHEMA}
    async with agent_env(client, task_queue, config, tmp) as env:
        request = build_request(
            entry_agent="agent", input="Count.", result_contract=contract, output_retries=1
        )
        result = await env.agents.run(request)
    assert result.failure is not None and result.failure.code.value == "invalid_agent_output"
    return result.run_id


async def handoff_chain(client: Client, task_queue: str, tmp: Path) -> str:
    """triage → billing (summary; in a parallel turn with a tool call and a refused handoff)
    → expert (last_turns), which calls a tool and answers: three histories."""

    def agent(agent_id: str, **fields: object) -> AgentDefinition:
        return AgentDefinition.model_validate(
            {"id": agent_id, "description": f"{agent_id} agent", **fields}
        )

    def handoff(call_id: str, target: str, **arguments: object) -> dict[str, Any]:
        return {
            "name": "agent.handoff",
            "id": call_id,
            "arguments": {"agent": target, **arguments},
        }

    weather = {"name": "get_weather", "arguments": {"city": "Paris"}}
    config = scripted_config(
        {
            "triage": [
                {
                    "tool_calls": [
                        weather,
                        handoff("h0", "expert"),  # not allowed: refused to the model
                        handoff("h1", "billing", reason="billing", message="invoice 42"),
                    ]
                }
            ],
            "billing": [{"tool_calls": [handoff("h2", "expert")]}],
            "expert": [{"tool_calls": [weather]}, "Paid, and sunny."],
        },
        agents=[
            agent(
                "triage",
                tools=["get_weather"],
                model_overrides=ModelOverrides(parallel_tool_calls=True),
                handoff={"agents": ["billing"], "context": "summary"},
            ),
            agent("billing", handoff={"agents": ["expert"], "context": "last_turns"}),
            agent("expert", tools=["get_weather"]),
        ],
        tools=[get_weather],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="triage", input="invoice?"))
    assert result.agent_id == "expert" and result.text == "Paid, and sunny.", result
    return result.run_id


def _spawn(call_id: str, task: str = "work") -> dict[str, object]:
    return {"name": "agent.spawn", "id": call_id, "arguments": {"agent": "b", "task": task}}


def _spawn_tool(call_id: str, name: str, **arguments: object) -> dict[str, object]:
    return {"name": f"agent.{name}", "id": call_id, "arguments": arguments}


def _spawn_config(a: list[Any], b: list[Any], policy: RuntimePolicy | None = None) -> RuntimeConfig:
    agents = [
        AgentDefinition.model_validate(
            {"id": "a", "description": "a", "callable_agents": ["b"], "spawn": True}
        ),
        AgentDefinition.model_validate({"id": "b", "description": "b"}),
    ]
    return scripted_config({"a": a, "b": b}, agents=agents, policy=policy)


async def spawn_await(client: Client, task_queue: str, tmp: Path) -> str:
    """Spawn two, look at one while they run, await both (results by signal and by the
    children's ends)."""
    config = _spawn_config(
        a=[
            {"tool_calls": [_spawn("s1"), _spawn("s2")]},
            {"tool_calls": [_spawn_tool("st", "status", handle="s1")]},
            {"tool_calls": [_spawn_tool("aw", "await")]},
            "a done",
        ],
        b=[{"text": "b done", "delay_seconds": 2}],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="a", input="go"))
    return result.run_id


async def spawn_timeout_and_cancel_at_end(client: Client, task_queue: str, tmp: Path) -> str:
    """An await that times out, then one that gets the result; a child still running when
    the caller completes is cancelled (by workflow id) and waited for."""
    config = _spawn_config(
        a=[
            {"tool_calls": [_spawn("s1")]},
            {"tool_calls": [_spawn_tool("a1", "await", handles=["s1"], timeout_seconds=1)]},
            {"tool_calls": [_spawn_tool("a2", "await", handles=["s1"]), _spawn("s2", "long")]},
            "a done",
        ],
        b=[{"text": "b done", "delay_seconds": 3}],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="a", input="go"))
    return result.run_id


async def spawned_child(client: Client, task_queue: str, tmp: Path) -> str:
    """The history of a spawned child: it signals its result to its caller as it ends."""
    config = _spawn_config(
        a=[{"tool_calls": [_spawn("s1")]}, {"tool_calls": [_spawn_tool("aw", "await")]}, "done"],
        b=["b done"],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="a", input="go"))
    return child_run_id(result.run_id, result.run_id, "s1", "b")


async def spawn_continue_as_new(client: Client, task_queue: str, tmp: Path) -> str:
    """Continue-as-new with open handles: the next history awaits them by their signals."""
    config = _spawn_config(
        a=[
            {"tool_calls": [_spawn("s1"), _spawn("s2")]},
            {"tool_calls": [_spawn_tool("st", "status", handle="s2")]},
            {"tool_calls": [_spawn_tool("aw", "await")]},
            "a done",
        ],
        b=[{"text": "b done", "delay_seconds": 3}],
        policy=RuntimePolicy(continue_as_new_after_turns=2),
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="a", input="go"))
    return result.run_id


async def capacity_wait(client: Client, task_queue: str, tmp: Path) -> str:
    """The fleet's only model permit is taken: the run's call is refused, the run waits in its
    workflow, a release wakes it (`SIGNAL_CAPACITY_FREED`) and the call is made."""
    config = scripted_config(
        {"agent": ["done"]}, limits=RuntimeLimits(max_concurrent_model_calls=1)
    )
    blocker = CapacityClaim(
        holder="blocker",
        partition_key="local",
        workflow_id="blocker",
        limits=(ScopeLimit(f"model@{task_queue}", concurrent=1),),
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        assert env.store.capacity.admit(blocker, datetime.now(UTC)).granted
        handle = await env.agents.start(build_request(entry_agent="agent", input="hi"))

        def refused() -> bool:
            events = env.store.read_events(handle.run_id)
            return any(record.event["type"] == "model_waiting" for record in events)

        await wait_until(refused, within=30, message="the model call refused a permit")
        woken = env.store.capacity.release(blocker, datetime.now(UTC))
        assert woken == (handle.run_id,)
        await client.get_workflow_handle(handle.run_id).signal(SIGNAL_CAPACITY_FREED)
        result = await handle.result()
    assert result.text == "done"
    return result.run_id


async def model_fallback(client: Client, task_queue: str, tmp: Path) -> str:
    """Turn 1: the run's model fails (retryable) on its only attempt, its fallback answers with
    a tool call; turn 2: the run's model answers again."""
    failing = {"fail": {"message": "HTTP 503: overloaded", "attempts": 9}}
    primary = {
        "id": "primary",
        "provider": "scripted",
        "model": "p",
        "max_attempts": 1,
        "fallbacks": ["backup"],
        "script": {"agent": [failing, "It is sunny."]},
    }
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    backup = {
        "id": "backup",
        "provider": "scripted",
        "model": "b",
        "script": {"agent": [{"tool_calls": [call]}]},
    }
    config = RuntimeConfig(
        agents=[_agent(tools=["get_weather"], model="primary")],
        models=[ModelProfile.model_validate(primary), ModelProfile.model_validate(backup)],
        tools=[get_weather],
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="Weather?"))
    assert result.text == "It is sunny.", result.failure
    assert result.usage.models == {"backup": 1, "primary": 1}
    return result.run_id


def _sleep_config(turns: list[Any]) -> RuntimeConfig:
    return scripted_config(
        {"agent": turns},
        agents=[_agent(sleep=True)],
        limits=RuntimeLimits(run_timeout=timedelta(days=3), root_timeout=timedelta(days=3)),
    )


async def _sleeping(env: Any, run_id: str) -> None:
    async def asleep() -> bool:
        return (await env.agents.get_run(run_id)).status.value == "sleeping"

    await wait_until(asleep, within=30, message="the run sleeping")


async def sleep(client: Client, task_queue: str, tmp: Path) -> str:
    """`time.sleep` for a day woken by a message; then a turn with a refused sleep (-1) and a
    one-second `time.sleep` that ends by its timer."""
    turns = [
        {"tool_calls": [{"id": "day", "name": "time.sleep", "arguments": {"duration": "P1D"}}]},
        {
            "tool_calls": [
                {"id": "bad", "name": "time.sleep", "arguments": {"duration": -1}},
                {"id": "nap", "name": "time.sleep", "arguments": {"duration": 1}},
            ]
        },
        "rested",
    ]
    async with agent_env(client, task_queue, _sleep_config(turns), tmp) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="rest"))
        await _sleeping(env, handle.run_id)
        await handle.send_message("wake up")
        result = await handle.result()
    assert result.text == "rested", result
    return handle.run_id


async def sleep_cancelled(client: Client, task_queue: str, tmp: Path) -> str:
    """Cancelled while `time.wake_at` sleeps."""
    until = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    turns = [
        {"tool_calls": [{"id": "w", "name": "time.wake_at", "arguments": {"time": until}}]},
        "never",
    ]
    async with agent_env(client, task_queue, _sleep_config(turns), tmp) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="rest"))
        await _sleeping(env, handle.run_id)
        await handle.cancel()
        result = await handle.result()
    assert result.outcome.value == "cancelled", result
    return handle.run_id


SCENARIOS: dict[str, Callable[[Client, str, Path], Awaitable[str]]] = {
    "single_agent": single_agent,
    "agent_call": agent_call,
    "parallel_children": parallel_children,
    "trusted_call": trusted_call,
    "tool_concurrency": tool_concurrency,
    "budget_exceeded": budget_exceeded,
    "output_budget_exceeded": output_budget_exceeded,
    "cost_budget_exceeded": cost_budget_exceeded,
    "continue_as_new": continue_as_new,
    "compaction": compaction,
    "tools_and_streaming": tools_and_streaming,
    "parallel_tools": parallel_tools,
    "cancelled_after_inline_results": cancelled_after_inline_results,
    "signal_mid_run": signal_mid_run,
    "cancelled": cancelled,
    "timed_out": timed_out,
    "nested_call": nested_call,
    "cancelled_tree": cancelled_tree,
    "timed_out_child": timed_out_child,
    "cancelled_sequential_calls": cancelled_sequential_calls,
    "cancelled_while_children_start": cancelled_while_children_start,
    "approval_mixed_turn": approval_mixed_turn,
    "approval_decided_at_once": approval_decided_at_once,
    "approval_question_and_timeout": approval_question_and_timeout,
    "approval_cancelled": approval_cancelled,
    "mcp_tools": mcp_tools,
    "cancelled_in_prepare": cancelled_in_prepare,
    "cancelled_mid_tool": cancelled_mid_tool,
    "plain_client_start": plain_client_start,
    "plain_client_session": plain_client_session,
    "output_retry": output_retry,
    "output_retries_spent": output_retries_spent,
    "handoff_chain": handoff_chain,
    "spawn_await": spawn_await,
    "spawn_timeout_and_cancel_at_end": spawn_timeout_and_cancel_at_end,
    "spawned_child": spawned_child,
    "spawn_continue_as_new": spawn_continue_as_new,
    "readable_ids": readable_ids,
    "capacity_wait": capacity_wait,
    "model_fallback": model_fallback,
    "guardrails_passed_refused_retried": guardrails_passed_refused_retried,
    "guardrail_input_tripped": guardrail_input_tripped,
    "guardrail_parallel_trip": guardrail_parallel_trip,
    "guardrail_result_withheld": guardrail_result_withheld,
    "sleep": sleep,
    "sleep_cancelled": sleep_cancelled,
    "webhook": webhook,
    "webhook_delivery": webhook_delivery,
    "forked_run": forked_run,
    "image_input": image_input,
    "image_agent_call": image_agent_call,
}
