"""The run loop on a real Temporal dev server: one test per behaviour of the foundation issue."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.activities.providers.base import ModelRequest, StreamEvent, TextDelta
from otherone.client.agent_client import AgentClient, build_request
from otherone.contracts import ACTIVITY_CALL_MODEL
from otherone.definitions import AgentDefinition, ModelOverrides, RuntimeLimits
from otherone.errors import FailureCode
from otherone.runs import RunOutcome, RunStatus
from otherone.store import SessionBusyError
from otherone.tools import ToolContext, ToolError, tool
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider


def call(
    name: str, arguments: dict[str, Any] | str | None = None, call_id: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "arguments": arguments if arguments is not None else {}}
    if call_id:
        spec["id"] = call_id
    return spec


def agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition(id=agent_id, description=f"{agent_id} agent", **fields)


async def test_runs_a_root_agent(client: Client, task_queue: str, tmp_path: Path) -> None:
    config = scripted_config({"agent": ["done"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="hello"))
    assert result.outcome is RunOutcome.COMPLETED
    assert result.text == "done"
    assert result.usage.model_calls == 1
    assert result.usage.total_tokens is not None
    assert result.run_id == result.root_run_id
    assert result.session_id


async def test_tool_call_gets_context_and_result_reaches_model(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    seen: list[ToolContext] = []

    @tool
    def lookup(key: str, ctx: ToolContext) -> dict[str, str]:
        """Look a key up."""
        seen.append(ctx)
        return {"key": key, "value": "42"}

    provider = RecordingProvider()
    config = scripted_config(
        {"agent": [{"tool_calls": [call("lookup", {"key": "answer"}, "c1")]}, "it is 42"]},
        agents=[agent("agent", tools=["lookup"])],
        tools=[lookup],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(
            build_request(entry_agent="agent", input="what is the answer?")
        )
        entries = env.store.load_entries("local", result.session_id)
    assert result.text == "it is 42"
    assert result.usage.tool_calls == 1 and result.usage.model_calls == 2
    [ctx] = seen
    assert (ctx.run_id, ctx.root_run_id, ctx.agent_id, ctx.session_id) == (
        result.run_id,
        result.run_id,
        "agent",
        result.session_id,
    )
    assert ctx.idempotency_key == f"{result.run_id}:c1"
    assert [e.role for e in entries] == ["user", "assistant", "tool", "assistant"]
    second_request = provider.calls()[1].messages
    assert second_request[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": '{"key": "answer", "value": "42"}',
    }
    assert provider.calls()[0].tools[0]["function"]["name"] == "lookup"


async def test_parallel_tools_run_concurrently_and_results_keep_call_order(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    both_started = asyncio.Event()
    running: list[str] = []

    @tool
    async def slow(name: str) -> str:
        """Waits until both calls run at once (deadlocks if they were sequential)."""
        running.append(name)
        if len(running) == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), 10)
        return f"done {name}" if name == "first" else await _later(name)

    async def _later(name: str) -> str:
        await asyncio.sleep(0.2)  # the second call finishes last; order must still be call order
        return f"done {name}"

    config = scripted_config(
        {
            "agent": [
                {
                    "tool_calls": [
                        call("slow", {"name": "second"}, "a"),
                        call("slow", {"name": "first"}, "b"),
                    ]
                },
                "ok",
            ]
        },
        agents=[
            agent("agent", tools=["slow"], model_overrides=ModelOverrides(parallel_tool_calls=True))
        ],
        tools=[slow],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        tool_entries = [
            e for e in env.store.load_entries("local", result.session_id) if e.role == "tool"
        ]
    assert result.outcome is RunOutcome.COMPLETED
    assert [e.tool_call_id for e in tool_entries] == ["a", "b"]
    assert [json.loads(e.content) for e in tool_entries] == ["done second", "done first"]


async def test_parallel_tools_run_at_most_max_concurrent_tool_calls_at_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    active = 0
    peak = 0

    @tool
    async def step(n: int) -> int:
        """One step."""
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.1)
        active -= 1
        return n

    config = scripted_config(
        {"agent": [{"tool_calls": [call("step", {"n": i}, f"c{i}") for i in range(5)]}, "ok"]},
        agents=[
            agent("agent", tools=["step"], model_overrides=ModelOverrides(parallel_tool_calls=True))
        ],
        tools=[step],
        limits=RuntimeLimits(max_concurrent_tool_calls=2),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        tool_entries = [
            e for e in env.store.load_entries("local", result.session_id) if e.role == "tool"
        ]
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    # Tool activities scheduled by each workflow task: never more than two at once.
    batches: list[int] = [0]
    for event in history.events:
        if event.HasField("workflow_task_completed_event_attributes"):
            batches.append(0)
        attributes = event.activity_task_scheduled_event_attributes
        if event.HasField("activity_task_scheduled_event_attributes") and (
            attributes.activity_type.name == "otherone.run_tool"
        ):
            batches[-1] += 1
    assert result.outcome is RunOutcome.COMPLETED
    assert [json.loads(e.content) for e in tool_entries] == [0, 1, 2, 3, 4]
    assert max(batches) == 2 and sum(batches) == 5
    assert peak <= 2


async def test_tools_run_one_at_a_time_without_parallel_tool_calls(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    active = 0
    peak = 0

    @tool
    async def step(n: int) -> int:
        """One step."""
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1
        return n

    config = scripted_config(
        {"agent": [{"tool_calls": [call("step", {"n": i}) for i in range(3)]}, "ok"]},
        agents=[agent("agent", tools=["step"])],
        tools=[step],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
    assert result.outcome is RunOutcome.COMPLETED
    assert peak == 1


async def test_disallowed_and_hallucinated_tools_are_refused_and_never_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    executions = 0

    @tool
    def dangerous() -> str:
        """Dangerous."""
        nonlocal executions
        executions += 1
        return "executed"

    config = scripted_config(
        {"agent": [{"tool_calls": [call("dangerous", {}, "x"), call("made_up", {}, "y")]}, "done"]},
        tools=[dangerous],  # registered, but the agent's policy is `none`
    )
    provider = RecordingProvider()
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="start"))
        tool_entries = [
            e for e in env.store.load_entries("local", result.session_id) if e.role == "tool"
        ]
    assert result.outcome is RunOutcome.COMPLETED
    assert executions == 0
    assert [e.error_kind for e in tool_entries] == ["permission_denied", "permission_denied"]
    assert "not available" in json.loads(tool_entries[0].content)["error"]
    assert provider.calls()[0].tools == []  # nothing was offered either


async def test_recoverable_and_invalid_argument_errors_go_back_to_the_model(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    @tool
    def picky(count: int) -> int:
        """Only likes 7."""
        if count != 7:
            raise ToolError.recoverable("try seven")
        return count

    config = scripted_config(
        {
            "agent": [
                {
                    "tool_calls": [
                        call("picky", {"count": "many"}, "a"),
                        call("picky", {"count": 3}, "b"),
                    ]
                },
                {"tool_calls": [call("picky", {"count": 7}, "c")]},
                "seven it is",
            ]
        },
        agents=[agent("agent", tools=["picky"])],
        tools=[picky],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="start"))
        tool_entries = [
            e for e in env.store.load_entries("local", result.session_id) if e.role == "tool"
        ]
    assert result.text == "seven it is"
    assert [e.error_kind for e in tool_entries] == ["invalid_arguments", "recoverable", None]
    assert "count" in json.loads(tool_entries[0].content)["error"]
    assert tool_entries[2].content == "7"


async def test_fatal_tool_error_ends_the_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    @tool
    def fatal_tool() -> str:
        """Fails fatally."""
        raise ToolError.fatal("disk on fire")

    provider = RecordingProvider()
    config = scripted_config(
        {"agent": [{"tool_calls": [call("fatal_tool")]}, "never"]},
        agents=[agent("agent", tools=["fatal_tool"])],
        tools=[fatal_tool],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="start"))
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.TOOL_ERROR
    assert "disk on fire" in result.failure.message
    assert (result.usage.model_calls, result.usage.tool_calls) == (1, 1)
    assert len(provider.calls()) == 1


async def test_unexpected_tool_exception_is_retried_with_the_same_idempotency_key(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    attempts: list[tuple[int, str]] = []

    @tool(max_attempts=2)
    def flaky(ctx: ToolContext) -> str:
        """Always crashes."""
        attempts.append((ctx.attempt, ctx.idempotency_key))
        raise RuntimeError("connection reset")

    config = scripted_config(
        {"agent": [{"tool_calls": [call("flaky", {}, "f1")]}, "never"]},
        agents=[agent("agent", tools=["flaky"])],
        tools=[flaky],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="start"))
    assert [attempt for attempt, _ in attempts] == [1, 2]
    assert {key for _, key in attempts} == {f"{result.run_id}:f1"}
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.TOOL_ERROR
    assert "connection reset" in result.failure.message


async def test_output_over_max_result_bytes_is_stopped_and_never_persisted(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"agent": [{"chunks": ["ok ", "this is far too long"]}]},
        limits=RuntimeLimits(max_result_bytes=4),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="start"))
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    assert result.failure is not None and "max_result_bytes" in result.failure.message
    assert [e.role for e in entries] == ["user"]


async def test_oversized_tool_result_ends_the_run_budget_exceeded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    @tool
    def huge() -> str:
        """Too big."""
        return "x" * 10_000

    config = scripted_config(
        {"agent": [{"tool_calls": [call("huge")]}, "never"]},
        agents=[agent("agent", tools=["huge"], limits={"max_result_bytes": 1000})],
        tools=[huge],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="start"))
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    # The result itself is not kept in the session, but the call is answered (an unanswered
    # tool call would make every provider refuse the session's next request).
    [tool_row] = [e for e in entries if e.role == "tool"]
    assert tool_row.error_kind == "fatal" and "max_result_bytes" in tool_row.content


async def test_max_iterations_exceeded_is_budget_exceeded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    @tool
    def again() -> str:
        """Again."""
        return "again"

    turns = [{"tool_calls": [call("again")]}] * 3
    config = scripted_config(
        {"agent": turns},
        agents=[agent("agent", tools=["again"], limits={"max_iterations": 2})],
        tools=[again],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="loop"))
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    assert result.failure is not None and "max_iterations (2)" in result.failure.message
    assert result.usage.model_calls == 2
    assert [e.role for e in entries] == ["user", "assistant", "tool", "assistant", "tool"]


async def test_message_sent_while_the_model_answers_makes_the_run_go_round_again(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["first answer", "answer to the follow-up"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="hello"))
        await asyncio.wait_for(provider.started.wait(), 10)
        await handle.send_message("and one more thing")
        await wait_until(lambda: _queued(handle), message="message queued in the workflow")
        gate.set()
        result = await handle.result()
        entries = env.store.load_entries("local", result.session_id)
    assert result.text == "answer to the follow-up"
    assert [(e.role, e.content) for e in entries] == [
        ("user", "hello"),
        ("assistant", "first answer"),
        ("user", "and one more thing"),
        ("assistant", "answer to the follow-up"),
    ]
    assert provider.calls()[1].messages[-1] == {"role": "user", "content": "and one more thing"}


async def _queued(handle: Any) -> bool:
    # The signal is recorded in history once the workflow has it; a record query proves it.
    await handle.record()
    return True


async def test_message_sent_during_a_tool_waits_for_its_results(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    in_tool = asyncio.Event()
    release = asyncio.Event()

    @tool
    async def wait_here() -> str:
        """Blocks until released."""
        in_tool.set()
        await asyncio.wait_for(release.wait(), 20)
        return "tool done"

    config = scripted_config(
        {"agent": [{"tool_calls": [call("wait_here", {}, "w")]}, "final"]},
        agents=[agent("agent", tools=["wait_here"])],
        tools=[wait_here],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="hello"))
        await asyncio.wait_for(in_tool.wait(), 10)
        await handle.send_message(["between", "turns"])
        await handle.record()
        release.set()
        result = await handle.result()
        entries = env.store.load_entries("local", result.session_id)
        events = [e.event["type"] async for e in env.agents.events(result.run_id)]
    assert [(e.role, e.content) for e in entries][1:] == [
        ("assistant", ""),
        ("tool", '"tool done"'),
        ("user", "between"),
        ("user", "turns"),
        ("assistant", "final"),
    ]
    assert "user_message_queued" in events


async def test_cancel_during_a_model_call_returns_a_cancelled_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("agent", 1)  # never released: the model "hangs"
    config = scripted_config({"agent": ["never"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(
            build_request(entry_agent="agent", input="wait", session={"session_id": "s1"})
        )
        await asyncio.wait_for(provider.started.wait(), 10)
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), 20)
        record = await env.agents.get_run(handle.run_id)
        # The session lease was released: a new run on the same session can start.
        provider.gate("agent", 1).set()
        again = await env.agents.run(
            build_request(entry_agent="agent", input="again", session={"session_id": "s1"})
        )
    assert result.outcome is RunOutcome.CANCELLED
    assert result.failure is None
    assert record.status is RunStatus.CANCELLED
    assert again.outcome is RunOutcome.COMPLETED


async def test_cancellation_stops_the_streaming_model_call_within_seconds(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The provider's stream itself is cancelled (no tokens paid for a cancelled run), promptly:
    heartbeats go to the server every second, not every 0.8 x the heartbeat timeout."""
    streaming = asyncio.Event()
    stopped = asyncio.Event()

    class Endless:
        async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
            yield TextDelta("thinking about it")
            streaming.set()
            try:
                await asyncio.Event().wait()  # a model that never finishes
            except asyncio.CancelledError:
                stopped.set()
                raise

    config = scripted_config({"agent": ["never"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": Endless()}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="wait"))
        await asyncio.wait_for(streaming.wait(), 10)
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), 10)
        # Well under the 10 s heartbeat timeout: the cancellation came with a heartbeat.
        await asyncio.wait_for(stopped.wait(), 5)
    assert result.outcome is RunOutcome.CANCELLED


async def test_deadline_ends_the_run_timed_out(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("agent", 1)
    config = scripted_config({"agent": ["never"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(entry_agent="agent", input="wait", limits={"root_timeout": 2})
        result = await asyncio.wait_for(env.agents.run(request), 30)
    assert result.outcome is RunOutcome.TIMED_OUT
    assert result.failure is not None and result.failure.code is FailureCode.TIMED_OUT
    assert 1500 <= result.usage.duration_millis < 15_000


async def test_agent_timeout_tightens_the_deadline(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("agent", 1)
    config = scripted_config(
        {"agent": ["never"]}, agents=[agent("agent", limits={"timeout_millis": 1500})]
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await asyncio.wait_for(
            env.agents.run(build_request(entry_agent="agent", input="wait")), 30
        )
    assert result.outcome is RunOutcome.TIMED_OUT


async def test_query_returns_the_live_record(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["done"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(
            build_request(entry_agent="agent", input="hi", metadata={"ticket": 7})
        )
        await asyncio.wait_for(provider.started.wait(), 10)
        live = await handle.record()
        gate.set()
        await handle.result()
        final = await env.agents.get_run(handle.run_id)
    assert live.status is RunStatus.RUNNING
    assert (live.iteration, live.usage.model_calls, live.agent_id, live.depth) == (1, 1, "agent", 0)
    assert live.metadata == {"ticket": 7}
    assert final.status is RunStatus.COMPLETED
    assert final.output is not None and final.output.text == "done"


async def test_model_errors_are_retried_then_fail_cleanly(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "flaky": [
                {"text": "recovered", "fail": {"message": "503 from provider", "attempts": 1}}
            ],
            "broken": [{"text": "never", "fail": {"message": "401 bad key", "retryable": False}}],
        }
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        flaky = await env.agents.run(build_request(entry_agent="flaky", input="hi"))
        broken = await env.agents.run(build_request(entry_agent="broken", input="hi"))
    assert flaky.text == "recovered"
    assert broken.outcome is RunOutcome.FAILED
    assert broken.failure is not None and broken.failure.code is FailureCode.MODEL_ERROR
    assert "401 bad key" in broken.failure.message


async def test_unknown_agent_and_loosening_overrides_fail_with_structured_results(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"agent": ["done"]}, limits=RuntimeLimits(max_tool_calls=10))
    async with agent_env(client, task_queue, config, tmp_path) as env:
        unknown = await env.agents.run(build_request(entry_agent="nobody", input="hi"))
        unknown_events = [e.event async for e in env.agents.events(unknown.run_id)]
        loosened = await env.agents.run(
            build_request(entry_agent="agent", input="hi", limits={"max_tool_calls": 11})
        )
    assert unknown.failure is not None and unknown.failure.code is FailureCode.AGENT_NOT_FOUND
    assert unknown_events[-1]["type"] == "run_failed"
    assert unknown_events[-1]["failure"]["code"] == "agent_not_found"
    assert (
        loosened.failure is not None and loosened.failure.code is FailureCode.INVALID_CONFIGURATION
    )
    assert "limits.max_tool_calls" in loosened.failure.message


async def test_second_run_on_a_busy_session_fails_fast(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["first"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(entry_agent="agent", input="one", session={"session_id": "shared"})
        first = await env.agents.start(request)
        await asyncio.wait_for(provider.started.wait(), 10)
        again = build_request(entry_agent="agent", input="two", session={"session_id": "shared"})
        # A client with the store refuses the start itself (no workflow is left behind)...
        with pytest.raises(SessionBusyError):
            await env.agents.run(again)
        # ...one without it starts a run that fails fast.
        second = await AgentClient(client, task_queue=task_queue).run(again)
        gate.set()
        first_result = await first.result()
    assert second.outcome is RunOutcome.FAILED
    assert second.failure is not None and second.failure.code is FailureCode.SESSION_BUSY
    assert first_result.outcome is RunOutcome.COMPLETED


async def test_events_cover_the_lifecycle_in_one_sequence(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    config = scripted_config(
        {"agent": [{"tool_calls": [call("ping")]}, {"chunks": ["a", "b", "c"]}]},
        agents=[agent("agent", tools=["ping"])],
        tools=[ping],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        events = [e async for e in env.agents.events(result.run_id)]
    kinds = [e.event["type"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_completed"
    for expected in (
        "model_started",
        "model_delta",
        "model_completed",
        "tool_started",
        "tool_completed",
    ):
        assert expected in kinds
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert all(e.root_run_id == result.run_id and e.agent_id == "agent" for e in events)
    streamed = "".join(
        e.event["content"]
        for e in events
        if e.event["type"] == "model_delta" and e.event["turn"] == 2
    )
    assert streamed == "abc"


async def test_a_10_mb_tool_result_does_not_wedge_the_workflow(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    @tool
    def dump() -> str:
        """Returns far too much."""
        return "y" * (10 * 1024 * 1024)

    config = scripted_config(
        {"agent": [{"tool_calls": [call("dump")]}, "never"]},
        agents=[agent("agent", tools=["dump"])],
        tools=[dump],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await asyncio.wait_for(
            env.agents.run(build_request(entry_agent="agent", input="go")), 60
        )
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    assert len(history.to_json()) < 200 * 1024  # the result never entered a payload


async def test_two_calls_of_one_turn_with_one_id_are_two_calls(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Two calls of one turn that a provider gave the same id (distinct indexes): both run,
    the later under a fresh id the model then sees. They were merged into one call (the
    arguments run together: invalid JSON); with ids kept as sent, one transcript entry would
    have answered both. A call id repeated in a *later* turn stays the same call (the seed's
    rule, `test_repeated_agent_call_id_executes_child_once`)."""
    keys: list[tuple[str, str]] = []

    @tool
    def charge(order: str, ctx: ToolContext) -> str:
        """Charge an order."""
        keys.append((order, ctx.idempotency_key))
        return f"charged {order}"

    provider = RecordingProvider()
    config = scripted_config(
        {
            "agent": [
                {
                    "tool_calls": [
                        call("charge", {"order": "A"}, "c1"),
                        call("charge", {"order": "B"}, "c2"),
                        call("charge", {"order": "C"}, "c1"),
                    ]
                },
                "done",
            ]
        },
        agents=[agent("agent", tools=["charge"])],
        tools=[charge],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert sorted(order for order, _ in keys) == ["A", "B", "C"]
    assert len({key for _, key in keys}) == 3
    called = [c["id"] for e in entries if e.tool_calls for c in e.tool_calls]
    answered = [e.tool_call_id for e in entries if e.role == "tool"]
    assert called[:2] == ["c1", "c2"] and called[2].startswith("c1_")
    assert answered == called
    last_request = provider.calls()[-1].messages
    assert [m["tool_call_id"] for m in last_request if m["role"] == "tool"] == called


async def test_a_model_call_may_stream_until_the_run_deadline(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A model call's attempt may last until the run's deadline (a stream that keeps sending
    is healthy however long: a long answer, a slow local model); the fixed 10 minutes cut
    such a stream at 600 s and began it again, five times. Silence is the read timeout's
    and the heartbeat timeout's to catch."""
    limits = RuntimeLimits(run_timeout=timedelta(hours=2), root_timeout=timedelta(hours=2))
    config = scripted_config({"agent": ["done"]}, limits=limits)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    [scheduled] = [
        event.activity_task_scheduled_event_attributes
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.activity_task_scheduled_event_attributes.activity_type.name == ACTIVITY_CALL_MODEL
    ]
    allowed = scheduled.start_to_close_timeout.ToTimedelta()
    assert timedelta(hours=1, minutes=59) < allowed <= timedelta(hours=2)
    assert scheduled.heartbeat_timeout.ToTimedelta() == timedelta(seconds=10)
