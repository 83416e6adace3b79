"""Root idempotency: one run per (partition, key), from any client process, conflicts refused."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import build_request
from otherone.errors import IdempotencyConflictError
from otherone.runs import RunOutcome
from tests.harness import agent_env, scripted_config
from tests.providers import RecordingProvider

REPO = Path(__file__).resolve().parents[1]


async def test_same_key_returns_the_original_run_and_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config({"agent": ["once"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(entry_agent="agent", input="hello", idempotency_key="request-1")
        first = await env.agents.run(request)
        second = await env.agents.run(request)
    assert first.run_id == second.run_id
    assert second.text == "once"
    assert len(provider.calls()) == 1


async def test_concurrent_starts_while_running_join_one_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["once"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(entry_agent="agent", input="hello", idempotency_key="concurrent")
        handles = await asyncio.gather(*(env.agents.start(request) for _ in range(5)))
        await asyncio.wait_for(provider.started.wait(), 10)
        joined = await env.agents.start(request)  # while it is running
        gate.set()
        results = await asyncio.gather(*(handle.result() for handle in [*handles, joined]))
    assert len({handle.run_id for handle in handles} | {joined.run_id}) == 1
    assert {result.text for result in results} == {"once"}
    assert len(provider.calls()) == 1


async def test_a_cancelled_waiter_does_not_lose_the_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["once"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(entry_agent="agent", input="hello", idempotency_key="waiter")
        waiter = asyncio.create_task(env.agents.run(request))
        await asyncio.wait_for(provider.started.wait(), 10)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        gate.set()
        result = await asyncio.wait_for(env.agents.run(request), 20)
    assert result.text == "once"
    assert len(provider.calls()) == 1


async def test_same_key_with_a_different_request_is_a_conflict(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["once"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        original = build_request(entry_agent="agent", input="hello", idempotency_key="k")
        changed = build_request(entry_agent="agent", input="something else", idempotency_key="k")
        handle = await env.agents.start(original)
        with pytest.raises(IdempotencyConflictError) as while_running:
            await env.agents.start(changed)
        gate.set()
        await handle.result()
        with pytest.raises(IdempotencyConflictError):
            await env.agents.run(changed)
    assert while_running.value.code == "idempotency_conflict"
    assert while_running.value.run_id == handle.run_id
    assert "'k'" in str(while_running.value)


async def test_the_key_is_scoped_by_partition(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"agent": ["a", "b"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        tenant_a = await env.agents.run(
            build_request(
                entry_agent="agent",
                input="hi",
                idempotency_key="k",
                runtime_context={"partition_key": "a"},
            )
        )
        tenant_b = await env.agents.run(
            build_request(
                entry_agent="agent",
                input="hi",
                idempotency_key="k",
                runtime_context={"partition_key": "b"},
            )
        )
    assert tenant_a.run_id != tenant_b.run_id
    assert tenant_a.outcome is tenant_b.outcome is RunOutcome.COMPLETED


CLIENT_PROCESS = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from otherone.client.agent_client import AgentClient, build_request
    from otherone.worker.app import connect

    async def main() -> None:
        temporal = await connect(sys.argv[1])
        agents = AgentClient(temporal, task_queue=sys.argv[2])
        request = build_request(entry_agent="agent", input="hello", idempotency_key="cross-process")
        handle = await agents.start(request)
        print(json.dumps({"run_id": handle.run_id}), flush=True)
        result = await handle.result()
        print(json.dumps({"run_id": result.run_id, "text": result.text}), flush=True)

    if __name__ == "__main__":
        asyncio.run(main())
        os._exit(0)
    """
)


async def test_two_client_processes_get_the_same_run(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    script = tmp_path / "start_run.py"
    script.write_text(CLIENT_PROCESS)
    address = client.service_client.config.target_host
    config = scripted_config({"agent": ["once"]})
    async with agent_env(client, task_queue, config, tmp_path, providers={"scripted": provider}):
        processes = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(script),
                address,
                task_queue,
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=asyncio.subprocess.PIPE,
            )
            for _ in range(2)
        ]
        started = [
            json.loads(await asyncio.wait_for(p.stdout.readline(), 30))
            for p in processes
            if p.stdout
        ]
        await asyncio.wait_for(provider.started.wait(), 10)
        gate.set()
        finished = [
            json.loads(await asyncio.wait_for(p.stdout.readline(), 30))
            for p in processes
            if p.stdout
        ]
        codes = [await asyncio.wait_for(p.wait(), 30) for p in processes]
    assert codes == [0, 0]
    assert started[0]["run_id"] == started[1]["run_id"]
    assert [f["text"] for f in finished] == ["once", "once"]
    assert len(provider.calls()) == 1
