"""Fleet capacity, counted where the provider sees the calls (issue 42).

Worker processes (`otherone worker`, several sharing one SQLite store) call a local server that
speaks OpenAI's wire format and holds each request a moment, so calls overlap: the server counts
how many are in flight at once and when each arrives. The limits are the seed's
``max_concurrent_model_calls`` (runtime-wide: here every worker of the queue) and a model
profile's ``max_concurrent_calls`` / ``requests_per_minute``; a 429 with Retry-After pauses the
profile for the whole fleet. In-process runs check the seed's no-deadlock case and fairness
between partitions.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import signal
import socket
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.contracts import ACTIVITY_CALL_MODEL
from otherone.definitions import AgentDefinition, ModelProfile, RuntimeLimits
from otherone.errors import ConfigurationError
from otherone.partition_limits import PartitionLimits
from otherone.runs import AgentRunRequest, AgentRunResult, RunOutcome
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.tools import tool
from tests.fixtures.providers.wire_server import Reply, Seen, WireServer, openai_stream
from tests.harness import agent_env, scripted_config, wait_until
from tests.processes import BackgroundProcess, address_of, cli_env, start_worker

pytestmark = pytest.mark.timeout(240)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _config(base_url: str, *, limits: str = "", profile: str = "") -> str:
    return textwrap.dedent(
        f"""
        [runtime]
        default_model = "slow"

        [limits]
        {limits}

        [models.slow]
        provider = "local"
        model = "slow-model"
        base_url = "{base_url}/v1"
        {profile}

        [agents.assistant]
        description = "Answers."
        system_prompt = "Answer."
        """
    )


def _answer(hold: float) -> Any:
    def answer(seen: Seen) -> Reply:
        return Reply(body=openai_stream(["done"]), hold=hold)

    return answer


@asynccontextmanager
async def _workers(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    config: str,
    count: int,
    *,
    metrics_port: int | None = None,
) -> AsyncIterator[list[BackgroundProcess]]:
    """``count`` worker processes; the first serves Prometheus metrics on ``metrics_port``."""
    (tmp_path / "otherone.toml").write_text(config)
    env = cli_env(address_of(temporal_env), task_queue, tmp_path, config=tmp_path / "otherone.toml")
    workers: list[BackgroundProcess] = []
    try:
        for index in range(count):
            metrics = {"OTHERONE_METRICS_PORT": str(metrics_port)} if metrics_port else {}
            if index:
                metrics = {}
            worker_env = {**env, **metrics}
            workers.append(await start_worker(worker_env, name=f"worker-{index + 1}"))
        yield workers
    finally:
        await asyncio.gather(*(worker.stop(30) for worker in workers))


async def _run_all(client: Client, task_queue: str, runs: int) -> list[AgentRunResult]:
    agents = AgentClient(client, task_queue=task_queue)
    handles = await asyncio.gather(
        *(
            agents.start(build_request(entry_agent="assistant", input=f"question {index}"))
            for index in range(runs)
        )
    )
    return list(
        await asyncio.wait_for(asyncio.gather(*(handle.result() for handle in handles)), 150)
    )


def _events(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        return [record.event for record in store.read_events(run_id)]
    finally:
        store.close()


async def test_three_workers_never_have_more_model_calls_at_the_provider_than_the_limit(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    port = free_port()
    async with WireServer(_answer(hold=0.4)) as provider:
        config = _config(provider.url, limits="max_concurrent_model_calls = 2")
        async with _workers(temporal_env, task_queue, tmp_path, config, 3, metrics_port=port):
            results = await _run_all(client, task_queue, 12)
            async with httpx.AsyncClient() as http:
                metrics = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    assert [result.outcome for result in results] == [RunOutcome.COMPLETED] * 12
    assert len(provider.requests) == 12
    assert provider.most_in_flight == 2  # reached, never passed, across the three workers
    waited = [
        event
        for result in results
        for event in _events(tmp_path, result.run_id)
        if event["type"] == "model_waiting"
    ]
    assert waited and all(event["scope"] == f"model@{task_queue}" for event in waited)
    assert {event["reason"] for event in waited} <= {"max_concurrent", "queued"}
    started = [
        event
        for result in results
        for event in _events(tmp_path, result.run_id)
        if event["type"] == "model_started" and event.get("waited_ms")
    ]
    assert len(started) == len(waited)  # each run that waited says for how long
    # The first worker's view of the fleet, for Prometheus: never more than the limit in flight.
    gauges = re.findall(
        rf'otherone_capacity_in_flight{{[^}}]*scope="model@{task_queue}"[^}}]*}} (\d+)', metrics
    )
    assert gauges and all(int(value) <= 2 for value in gauges), metrics


async def test_a_permit_freed_on_the_same_worker_reaches_its_waiter_without_a_workflow_task(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """One worker, one permit, three runs: the calls refused wait in their activity and take
    the permit when the call before them gives it back. No run returned to its workflow to
    wait (no second `call_model`, no `capacity_freed` signal): waiting only there,
    each hand-over cost a workflow task, and a burst of runs crawled."""
    async with WireServer(_answer(hold=0.5)) as provider:
        config = _config(provider.url, limits="max_concurrent_model_calls = 1")
        async with _workers(temporal_env, task_queue, tmp_path, config, 1):
            results = await _run_all(client, task_queue, 3)
    assert [result.outcome for result in results] == [RunOutcome.COMPLETED] * 3
    assert provider.most_in_flight == 1
    waited_ms = []
    for result in results:
        history = await client.get_workflow_handle(result.run_id).fetch_history()
        kinds = [event.WhichOneof("attributes") for event in history.events]
        scheduled = [
            event.activity_task_scheduled_event_attributes.activity_type.name
            for event in history.events
            if event.HasField("activity_task_scheduled_event_attributes")
        ]
        assert scheduled.count(ACTIVITY_CALL_MODEL) == 1, scheduled
        assert "workflow_execution_signaled_event_attributes" not in kinds
        events = _events(tmp_path, result.run_id)
        started = next(event for event in events if event["type"] == "model_started")
        waited_ms.append(started.get("waited_ms", 0))
        if started.get("waited_ms"):
            assert any(event["type"] == "model_waiting" for event in events)
    # Two of the three waited for the one before them (about a call's 0.5 s, or two).
    assert sorted(bool(ms) for ms in waited_ms) == [False, True, True], waited_ms


async def test_a_profiles_own_limit_holds_across_workers(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with WireServer(_answer(hold=0.3)) as provider:
        config = _config(provider.url, profile="max_concurrent_calls = 1")
        async with _workers(temporal_env, task_queue, tmp_path, config, 2):
            results = await _run_all(client, task_queue, 5)
    assert all(result.outcome is RunOutcome.COMPLETED for result in results)
    assert provider.most_in_flight == 1


async def test_a_429_with_retry_after_pauses_the_whole_fleet(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    told: list[float] = []

    def answer(seen: Seen) -> Reply:
        if not told:
            told.append(asyncio.get_running_loop().time())
            return Reply.error(429, {"error": {"message": "slow down"}}, **{"Retry-After": "3"})
        return Reply(body=openai_stream(["done"]), hold=0.2)

    async with WireServer(answer) as provider:
        config = _config(provider.url, limits="max_concurrent_model_calls = 1")
        async with _workers(temporal_env, task_queue, tmp_path, config, 2):
            results = await _run_all(client, task_queue, 4)
    assert all(result.outcome is RunOutcome.COMPLETED for result in results)
    after = [arrival - told[0] for arrival in provider.arrivals[1:]]
    # No worker called the profile again before the provider's pause ended (the runs waited).
    assert len(after) == 4 and min(after) >= 2.9, after


async def test_a_minutes_requests_hold_across_workers(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Five runs, three requests a minute: two wait for the window (about a minute)."""
    async with WireServer(_answer(hold=0.05)) as provider:
        config = _config(provider.url, profile="requests_per_minute = 3")
        async with _workers(temporal_env, task_queue, tmp_path, config, 2):
            results = await _run_all(client, task_queue, 5)
    assert all(result.outcome is RunOutcome.COMPLETED for result in results)
    arrivals = sorted(provider.arrivals)
    for index, arrival in enumerate(arrivals):
        in_its_minute = [other for other in arrivals[index:] if other < arrival + 60]
        assert len(in_its_minute) <= 3, arrivals
    assert arrivals[3] - arrivals[0] >= 60


async def test_a_nested_call_does_not_deadlock_with_concurrency_one(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The seed's `nested_call_does_not_deadlock_with_concurrency_one`: a caller waiting on
    its child holds no model permit (nor a tool one) while the child runs."""
    call = {"name": "agent.call", "id": "call_1", "arguments": {"agent": "worker", "task": "w"}}
    config = scripted_config(
        {"root": [{"tool_calls": [call]}, "done"], "worker": ["worked"]},
        agents=[
            AgentDefinition(id="root", description="root", callable_agents=["worker"]),
            AgentDefinition(id="worker", description="worker"),
        ],
        limits=RuntimeLimits(max_concurrent_model_calls=1, max_concurrent_tool_calls=1),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await asyncio.wait_for(
            env.agents.run(build_request(entry_agent="root", input="start")), 60
        )
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "done"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_concurrent_calls", 0),
        ("requests_per_minute", -1),
        ("tokens_per_minute", 0),
        ("max_concurrent_calls", "two"),
    ],
)
def test_bad_profile_limits_are_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        ModelProfile.model_validate({"id": "p", "provider": "openai", "model": "m", field: value})
    assert field in str(refused.value)


class _Overlap:
    """Counts tool calls running at once (both workers run in this process)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0


async def test_tool_calls_share_the_fleets_max_concurrent_tool_calls(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    overlap = _Overlap()

    @tool
    async def slow_lookup(key: str) -> str:
        """Look something up, slowly."""
        overlap.now += 1
        overlap.most = max(overlap.most, overlap.now)
        try:
            await asyncio.sleep(0.3)  # the tool's own work (calls overlap), not a sync point
        finally:
            overlap.now -= 1
        return key

    turn = {"tool_calls": [{"name": "slow_lookup", "arguments": {"key": "k"}}]}
    config = scripted_config(
        {"agent": [turn, "done"]},
        agents=[AgentDefinition(id="agent", description="looks up", tools=["slow_lookup"])],
        tools=[slow_lookup],
        limits=RuntimeLimits(max_concurrent_tool_calls=2),
    )
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    # A second connection: one client runs one worker per task queue (a second process's).
    other = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=client.data_converter,
    )
    try:
        async with (
            agent_env(client, task_queue, config, tmp_path, store=store) as env,
            agent_env(other, task_queue, config, tmp_path, store=store),
        ):
            handles = [
                await env.agents.start(build_request(entry_agent="agent", input=f"q{index}"))
                for index in range(8)
            ]
            results = await asyncio.wait_for(
                asyncio.gather(*(handle.result() for handle in handles)), 120
            )
        waited = [
            record.event
            for handle in handles
            for record in store.read_events(handle.run_id)
            if record.event["type"] == "tool_waiting"
        ]
    finally:
        store.close()
    assert all(result.outcome is RunOutcome.COMPLETED for result in results)
    assert overlap.most == 2
    assert waited and all(event["tool_name"] == "slow_lookup" for event in waited)


async def test_one_tenants_burst_does_not_queue_another_tenants_single_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Tenant a starts eight runs on a fleet with one model permit; tenant b's single run,
    started while a's wait, is the next call the provider sees once a permit frees (fewest
    calls in flight first), not the ninth."""
    async with WireServer(_answer(hold=0.3)) as provider:
        profile = ModelProfile(
            id="slow", provider="local", model="slow-model", base_url=f"{provider.url}/v1"
        )
        config = RuntimeConfig(
            agents=[AgentDefinition(id="assistant", description="Answers.")],
            models=[profile],
            limits=RuntimeLimits(max_concurrent_model_calls=1),
        )
        async with agent_env(client, task_queue, config, tmp_path) as env:
            tenants = {
                key: AgentClient(client, task_queue=task_queue, store=env.store, partition_key=key)
                for key in ("a", "b")
            }
            burst = [await tenants["a"].start(_tenant_request("a", f"a {n}")) for n in range(8)]
            await wait_until(
                lambda: (
                    len(provider.requests) >= 1 and _waiting(env.store, f"model@{task_queue}") >= 6
                ),
                within=30,
                message="tenant a's calls wait",
            )
            seen_before_b = len(provider.requests)
            single = await tenants["b"].start(_tenant_request("b", "b 0"))
            await asyncio.wait_for(single.result(), 60)
            await asyncio.wait_for(asyncio.gather(*(run.result() for run in burst)), 60)
    order = [json.dumps(seen.body) for seen in provider.requests]
    position = next(index for index, body in enumerate(order) if '"b 0"' in body)
    # At most the call in flight and one woken just before b asked: one slot's wait.
    assert position <= seen_before_b + 1, (position, seen_before_b)


async def test_a_partitions_cap_holds_while_other_partitions_go_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Partition a may hold one model call at a time (`[partitions.a]`), though the fleet has
    eight permits: a's three calls reach the provider one after the other, each after the one
    before it answered, while partition b's three go on beside them."""
    hold = 0.4
    async with WireServer(_answer(hold=hold)) as provider:
        profile = ModelProfile(
            id="slow", provider="local", model="slow-model", base_url=f"{provider.url}/v1"
        )
        limits = RuntimeLimits(
            max_concurrent_model_calls=8,
            partitions={"a": PartitionLimits(max_concurrent_model_calls=1)},
        )
        config = RuntimeConfig(
            agents=[AgentDefinition(id="assistant", description="Answers.")],
            models=[profile],
            limits=limits,
        )
        async with agent_env(client, task_queue, config, tmp_path) as env:
            tenants = {
                key: AgentClient(client, task_queue=task_queue, store=env.store, partition_key=key)
                for key in ("a", "b")
            }
            runs = [
                await tenants[key].start(_tenant_request(key, f"{key} {n}"))
                for n in range(3)
                for key in ("a", "b")
            ]
            results = await asyncio.wait_for(asyncio.gather(*(run.result() for run in runs)), 90)
    assert all(result.outcome is RunOutcome.COMPLETED for result in results)
    arrivals: dict[str, list[float]] = {"a": [], "b": []}
    for seen, arrival in zip(provider.requests, provider.arrivals, strict=True):
        arrivals["a" if '"a ' in json.dumps(seen.body) else "b"].append(arrival)
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals["a"])]
    assert len(arrivals["a"]) == 3 and min(gaps) >= hold * 0.9, gaps  # never two of a at once
    assert provider.most_in_flight >= 2  # b's calls did not wait for a's


def test_partition_caps_name_the_table_and_the_field(tmp_path: Path) -> None:
    base = _config("http://127.0.0.1:1")
    cases = {
        "[partitions.acme]\nmax_concurrent_model_calls = 0\n": (
            "[partitions.acme]",
            "max_concurrent_model_calls",
        ),
        "[partitions.acme]\nmax_concurrent_calls = 2\n": (
            "[partitions.acme]",
            "max_concurrent_calls",
        ),
        '[partitions."no spaces"]\nmax_concurrent_tool_calls = 2\n': ("[partitions]", "partitions"),
    }
    for table, (where, field) in cases.items():
        path = tmp_path / "otherone.toml"
        path.write_text(base + table)
        with pytest.raises(ConfigurationError) as refused:
            load_config(path)
        assert f"table {where}" in str(refused.value) and field in str(refused.value), table
    path.write_text(base + '[partitions."*"]\nmax_concurrent_tool_calls = 2\n')
    caps = load_config(path).limits.partitions
    assert caps == {"*": PartitionLimits(max_concurrent_tool_calls=2)}


def _tenant_request(partition: str, text: str) -> AgentRunRequest:
    context = {"partition_key": partition}
    return build_request(entry_agent="assistant", input=text, runtime_context=context)


def _waiting(store: Store, scope: str) -> int:
    return store.capacity.in_flight(scope, datetime.now(UTC))[1]


async def test_a_permit_held_by_a_killed_worker_comes_back(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """One model permit; worker 1 holds it for run x's call and is killed (SIGKILL) mid-call.
    Run y waits; x's retry on worker 2 takes its own permit back, then y gets it: both
    complete, y's call reaching the provider only after x's retry."""

    def answer(seen: Seen) -> Reply:
        first_of_x = "question x" in json.dumps(seen.body) and not any(
            "question x" in json.dumps(other.body) for other in provider.requests[:-1]
        )
        return Reply(body=openai_stream(["done"]), hold=120 if first_of_x else 0.1)

    async with WireServer(answer) as provider:
        (tmp_path / "otherone.toml").write_text(
            _config(provider.url, limits="max_concurrent_model_calls = 1")
        )
        env = cli_env(
            address_of(temporal_env), task_queue, tmp_path, config=tmp_path / "otherone.toml"
        )
        first = await start_worker(env, name="worker-1")
        second: BackgroundProcess | None = None
        try:
            agents = AgentClient(client, task_queue=task_queue)
            x = await agents.start(build_request(entry_agent="assistant", input="question x"))
            await wait_until(lambda: len(provider.requests) == 1, within=30, message="x's call")
            second = await start_worker(env, name="worker-2")
            y = await agents.start(build_request(entry_agent="assistant", input="question y"))
            await wait_until(
                lambda: any(e["type"] == "model_waiting" for e in _events(tmp_path, y.run_id)),
                within=30,
                message="y waits for the permit",
            )
            first.send_signal(signal.SIGKILL)
            results = await asyncio.wait_for(asyncio.gather(x.result(), y.result()), 120)
        finally:
            await first.kill()
            if second is not None:
                await second.stop(30)
    assert [result.outcome for result in results] == [RunOutcome.COMPLETED] * 2
    bodies = [json.dumps(seen.body) for seen in provider.requests]
    x_calls = [index for index, body in enumerate(bodies) if "question x" in body]
    y_calls = [index for index, body in enumerate(bodies) if "question y" in body]
    assert len(x_calls) == 2 and len(y_calls) == 1, bodies
    assert y_calls[0] > x_calls[1]  # y only once x's retry had given the permit back
