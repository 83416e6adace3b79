"""Durable sleep: `time.sleep` / `time.wake_at` as workflow timers (real Temporal, real store)."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, RunHandle, build_request
from otherone.client.watch import WatchState, render_tree
from otherone.contracts import QUERY_RECORD
from otherone.definitions import AgentDefinition, RuntimeLimits, RuntimePolicy
from otherone.errors import ConfigurationError
from otherone.run_types import RunLimitOverrides
from otherone.runs import RunOutcome, RunRecord, RunStatus
from otherone.search_attributes import CUSTOM_SEARCH_ATTRIBUTES, STATUS
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.tools import ToolDefinitionError, tool
from tests.harness import AgentEnv, agent_env, scripted_config, wait_until
from tests.processes import BackgroundProcess, worker_module
from tests.providers import RecordingProvider

#: Long enough for a week's sleep (the deadline bounds every sleep).
LONG = RuntimeLimits(run_timeout=timedelta(days=30), root_timeout=timedelta(days=30))


def sleep_call(call_id: str, name: str = "time.sleep", **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def sleeper(**fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": "sleeper", "description": "sleeps", "sleep": True, **fields}
    )


def events(store: Store, root: str, kind: str) -> list[dict[str, Any]]:
    return [
        record.event
        for record in store.read_events(root, limit=10_000)
        if record.event["type"] == kind
    ]


def tool_results(provider: RecordingProvider) -> dict[str, dict[str, Any]]:
    """The tool results the model read on its last call, by call id."""
    last = provider.requests[-1]
    return {
        message["tool_call_id"]: json.loads(message["content"])
        for message in last.messages
        if message.get("role") == "tool"
    }


async def start(env: AgentEnv, text: str = "go") -> RunHandle:
    return await env.agents.start(build_request(entry_agent="sleeper", input=text))


async def sleeping(agents: AgentClient, run_id: str) -> None:
    async def asleep() -> bool:
        return (await agents.get_run(run_id)).status is RunStatus.SLEEPING

    await wait_until(asleep, within=30, message="the run sleeping")


async def sleeping_by_query(client: Client, run_id: str) -> None:
    """The run's own record (the time-skipping server has no advanced visibility)."""

    async def asleep() -> bool:
        record = await client.get_workflow_handle(run_id).query(QUERY_RECORD, result_type=RunRecord)
        return record.status is RunStatus.SLEEPING

    await wait_until(asleep, within=30, message="the run sleeping")


async def test_a_week_long_sleep_is_woken_by_a_message(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {"sleeper": [{"tool_calls": [sleep_call("nap", duration="P7D")]}, "awake"]},
        agents=[sleeper()],
        limits=LONG,
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await start(env)
        await sleeping(env.agents, handle.run_id)
        offered = {tool["function"]["name"] for tool in provider.requests[0].tools}
        assert {"time.sleep", "time.wake_at"} <= offered
        workflow = client.get_workflow_handle(handle.run_id)
        assert (await workflow.describe()).typed_search_attributes.get(STATUS) == "sleeping"
        metadata = await workflow.query("__temporal_workflow_metadata")
        assert "**sleeping** until" in str(metadata)  # the Web UI's "current details"
        [started] = events(env.store, handle.run_id, "sleep_started")
        assert started["tool_call_id"] == "nap" and started["seconds"] == 7 * 86400
        watched = WatchState(handle.run_id)  # what `otherone watch` shows
        for record in env.store.read_events(handle.run_id, limit=10_000):
            watched.apply(record)
        assert watched.runs[handle.run_id].status == "sleeping"
        console = Console(file=io.StringIO(), width=160, color_system=None)
        console.print(render_tree(watched, datetime.now(UTC)))
        assert "sleeping" in console.file.getvalue()  # type: ignore[attr-defined]

        await handle.send_message("wake up, there is news")
        result = await asyncio.wait_for(handle.result(), 60)

        assert result.outcome is RunOutcome.COMPLETED and result.text == "awake"
        woke = tool_results(provider)["nap"]
        assert woke["reason"] == "message" and woke["slept_seconds"] < 86400
        last = provider.requests[-1].messages
        assert last[-1] == {"role": "user", "content": "wake up, there is news"}
        [ended] = events(env.store, handle.run_id, "sleep_ended")
        assert ended["reason"] == "message"
        for record in env.store.read_events(handle.run_id, after=watched.last_sequence):
            watched.apply(record)
        assert watched.runs[handle.run_id].status == "completed"
        # A sleep is neither a model nor a tool call.
        assert result.usage.tool_calls == 0 and result.usage.model_calls == 2
        [completed] = events(env.store, handle.run_id, "tool_completed")
        assert completed["tool_call_id"] == "nap" and completed["error"] is None


async def test_short_sleeps_end_by_their_timers(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    soon = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    turns = [
        {"tool_calls": [sleep_call("nap", duration="PT1S")]},
        {"tool_calls": [sleep_call("until", "time.wake_at", time=soon)]},
        "rested",
    ]
    config = scripted_config({"sleeper": turns}, agents=[sleeper()], limits=LONG)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await start(env)
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.outcome is RunOutcome.COMPLETED and result.text == "rested"
        assert datetime.now(UTC) >= datetime.fromisoformat(soon)
        woke = tool_results(provider)["until"]
        assert woke["reason"] == "timer"
        assert datetime.fromisoformat(woke["woke_at"]) >= datetime.fromisoformat(soon)
        [first, second] = events(env.store, handle.run_id, "sleep_ended")
        assert first["reason"] == second["reason"] == "timer"
        assert result.usage.tool_calls == 0 and result.usage.model_calls == 3


async def test_bad_sleeps_are_refused_to_the_model_with_the_reason(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    calls = [
        sleep_call("negative", duration=-1),
        sleep_call("zero", duration=0),
        sleep_call("garbage", duration="soon"),
        sleep_call("missing"),
        sleep_call("too-long", duration="P3D"),
        sleep_call("past-deadline", duration="PT30H"),
        sleep_call("bad-time", "time.wake_at", time="tomorrow at nine"),
        sleep_call("past", "time.wake_at", time="2020-01-01T00:00:00Z"),
        sleep_call("naive", "time.wake_at", time="2099-01-01T00:00:00"),
    ]
    limits = RuntimeLimits(
        run_timeout=timedelta(days=1), root_timeout=timedelta(days=1), max_sleep=timedelta(days=2)
    )
    config = scripted_config(
        {"sleeper": [{"tool_calls": calls}, "fine"]}, agents=[sleeper()], limits=limits
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await start(env)
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.outcome is RunOutcome.COMPLETED and result.text == "fine"
        errors = {call_id: body["error"] for call_id, body in tool_results(provider).items()}
        assert "greater than zero" in errors["negative"] and "-1" in errors["negative"]
        assert "greater than zero" in errors["zero"]
        assert "'soon' is neither seconds nor an ISO 8601 duration" in errors["garbage"]
        assert "duration: required" in errors["missing"]
        assert "longer than max_sleep (2 days)" in errors["too-long"]
        assert "the run's deadline is" in errors["past-deadline"]
        assert "'tomorrow at nine' is not an ISO 8601 date-time" in errors["bad-time"]
        assert "is not in the future" in errors["past"]
        assert "no timezone offset" in errors["naive"]
        assert events(env.store, handle.run_id, "sleep_started") == []
        refused = events(env.store, handle.run_id, "tool_completed")
        assert len(refused) == len(calls) and all(event["error"] for event in refused)
        assert result.usage.tool_calls == 0


async def test_sleep_is_offered_only_when_the_agent_and_the_policy_allow_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    turns = [{"tool_calls": [sleep_call("nap", duration=1)]}, "no nap"]
    config = scripted_config(
        {"sleeper": turns},
        agents=[sleeper()],
        policy=RuntimePolicy(allow_sleep=False),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await start(env)
        result = await asyncio.wait_for(handle.result(), 60)
        offered = {tool["function"]["name"] for tool in provider.requests[0].tools}
        assert not offered & {"time.sleep", "time.wake_at"}
        assert "not available to this agent" in tool_results(provider)["nap"]["error"]
        assert result.outcome is RunOutcome.COMPLETED
        assert result.usage.tool_calls == 1  # a refused call counts, as any refused tool call
    snapshot = config.snapshot()
    assert not snapshot.may_sleep(snapshot.agent("sleeper"))
    plain = scripted_config({"sleeper": ["hi"]}).snapshot()
    assert not plain.may_sleep(plain.agent("sleeper"))


def test_sleep_settings_are_validated_and_time_tools_reserved() -> None:
    with pytest.raises(ValueError, match="max_sleep"):
        RuntimeLimits.model_validate({"max_sleep": -5})
    with pytest.raises(ValueError, match="max_sleep"):
        RuntimeLimits.model_validate({"max_sleep": "soon"})
    assert RuntimeLimits.model_validate({"max_sleep": "P1D"}).max_sleep == timedelta(days=1)
    assert RuntimeLimits().max_sleep == timedelta(days=7)
    with pytest.raises(ValueError, match="sleep"):
        AgentDefinition.model_validate({"id": "a", "description": "a", "sleep": "yes"})

    def nap() -> str:
        """Not the built-in."""
        return ""

    with pytest.raises(ToolDefinitionError, match=r"time\.sleep"):
        tool(name="time.sleep")(nap)
    # A runtime that does not use sleep keeps its snapshot version (the new fields at their
    # defaults are left out of the hash).
    base = scripted_config({"sleeper": ["hi"]}).snapshot()
    assert base.version == scripted_config({"sleeper": ["hi"]}).snapshot().version
    asks = scripted_config({"sleeper": ["hi"]}, agents=[sleeper()]).snapshot()
    assert asks.version != base.version


def test_a_sleep_limit_override_only_tightens_and_toml_names_a_bad_one(tmp_path: Path) -> None:
    limits = RuntimeLimits(max_sleep=timedelta(hours=1))
    tighter = RunLimitOverrides(max_sleep=timedelta(minutes=5))
    assert limits.tightened(tighter).max_sleep == timedelta(minutes=5)
    with pytest.raises(ValueError, match="max_sleep"):
        limits.tightened(RunLimitOverrides(max_sleep=timedelta(hours=2)))
    path = tmp_path / "otherone.toml"
    body = '[limits]\nmax_sleep = "forever"\n[models.m]\nprovider = "scripted"\nmodel = "m"\n'
    path.write_text(body + '[agents.a]\ndescription = "a"\nsleep = true\n', encoding="utf-8")
    with pytest.raises(ConfigurationError, match="max_sleep") as refused:
        load_config(path)
    assert "limits" in str(refused.value)
    path.write_text(
        body.replace('"forever"', '"PT12H"') + '[agents.a]\ndescription = "a"\nsleep = true\n'
    )
    loaded = load_config(path)
    assert loaded.limits.max_sleep == timedelta(hours=12)
    snapshot = loaded.snapshot()
    assert snapshot.may_sleep(snapshot.agent("a"))


async def test_a_cancel_while_sleeping_cancels_the_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"sleeper": [{"tool_calls": [sleep_call("nap", duration="P1D")]}, "never"]},
        agents=[sleeper()],
        limits=LONG,
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await start(env)
        await sleeping(env.agents, handle.run_id)
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.outcome is RunOutcome.CANCELLED
        [ended] = events(env.store, handle.run_id, "sleep_ended")
        assert ended["reason"] == "cancelled"
        [completed] = events(env.store, handle.run_id, "tool_completed")
        assert "before this tool call had a result" in completed["error"]
        assert events(env.store, handle.run_id, "run_cancelled")


async def test_sleeps_on_both_sides_of_continue_as_new(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run continues as new between turns only: a sleep is never in progress then. The
    woken sleep's result crosses into the next history; the next sleep runs there."""
    provider = RecordingProvider()
    turns = [
        {"tool_calls": [sleep_call("first", duration="P1D")]},
        {"tool_calls": [sleep_call("second", duration=1)]},
        "done",
    ]
    config = scripted_config(
        {"sleeper": turns},
        agents=[sleeper()],
        limits=LONG,
        policy=RuntimePolicy(continue_as_new_after_turns=1),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await start(env)
        await sleeping(env.agents, handle.run_id)
        await handle.send_message("up")
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
        second_turn = provider.requests[1].messages
        first = next(m for m in second_turn if m.get("tool_call_id") == "first")
        assert json.loads(first["content"])["reason"] == "message"
        assert tool_results(provider)["second"]["reason"] == "timer"
        executions = [
            execution
            async for execution in client.list_workflows(f'WorkflowId = "{handle.run_id}"')
        ]
        assert len(executions) == 3  # two continue-as-new
        reasons = [event["reason"] for event in events(env.store, handle.run_id, "sleep_ended")]
        assert reasons == ["message", "timer"]


@pytest.mark.timeout(180)
async def test_a_sleeping_run_survives_sigkill_of_its_worker(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    address = temporal_env.client.service_client.config.target_host
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store.open(store_url)
    agents = AgentClient(client, task_queue=task_queue, store=store)

    def worker() -> Any:
        return worker_module("tests.sleep_worker", address, task_queue, store_url, tmp_path)

    try:
        first: BackgroundProcess
        async with worker() as first:
            handle = await agents.start(build_request(entry_agent="napper", input="nap"))
            await sleeping(agents, handle.run_id)
            first.send_signal(signal.SIGKILL)
            await first.exit_code()
        async with worker():
            result = await asyncio.wait_for(handle.result(), 90)
        [ended] = events(store, handle.run_id, "sleep_ended")
    finally:
        store.close()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "rested"
    assert ended["reason"] == "timer"


async def test_a_six_day_sleep_ends_by_its_timer_in_the_time_skipping_server(
    tmp_path: Path,
) -> None:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(Path(sys.executable).parent / "temporal-test-server"),
        data_converter=pydantic_data_converter,
    )
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={
                key.name: IndexedValueType.ValueType(key.indexed_value_type)
                for key in CUSTOM_SEARCH_ATTRIBUTES
            },
        )
    )
    provider = RecordingProvider()
    config = scripted_config(
        {"sleeper": [{"tool_calls": [sleep_call("nap", duration="P6D")]}, "a week later"]},
        agents=[sleeper()],
        limits=RuntimeLimits(run_timeout=timedelta(days=7), root_timeout=timedelta(days=7)),
    )
    try:
        async with agent_env(
            env.client, "six-days", config, tmp_path, providers={"scripted": provider}
        ) as sleeping_env:
            handle = await start(sleeping_env)
            await sleeping_by_query(env.client, handle.run_id)
            await env.sleep(timedelta(days=6, minutes=1))
            result = await asyncio.wait_for(handle.result(), 60)
    finally:
        await env.shutdown()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "a week later"
    assert result.usage.duration_millis >= timedelta(days=6).total_seconds() * 1000
    woke = tool_results(provider)["nap"]
    assert woke["reason"] == "timer" and woke["slept_seconds"] >= 6 * 86400
