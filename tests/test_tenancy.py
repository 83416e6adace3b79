"""Tenant isolation end to end: a client scoped to a partition sees nothing of another's runs.

Store-level isolation (sessions, entries, memory, artifacts, events by partition) is tested in
tests/test_store.py and tests/test_memory.py; this is the client API a multi-tenant service
hands to each tenant's requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import AgentClient, build_request
from otherone.definitions import AgentDefinition, RuntimeLimits
from otherone.errors import InvalidRequestError, RunNotFoundError
from otherone.runs import AgentCallRequest, RunOutcome
from tests.harness import agent_env, scripted_config
from tests.providers import RecordingProvider

BIG = "b" * 300_000  # over the inline payload limit: tenant B's output becomes an artifact


def agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


async def test_a_scoped_client_cannot_start_read_list_steer_or_cancel_other_tenants_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    hold = provider.gate("lead", 2)  # tenant B's root stays running for the steering calls
    config = scripted_config(
        {
            "lead": [
                {
                    "tool_calls": [
                        {
                            "id": "c",
                            "name": "agent.call",
                            "arguments": {"agent": "helper", "task": "t"},
                        }
                    ]
                },
                BIG,
            ],
            "helper": ["helped"],
        },
        agents=[agent("lead", callable_agents=["helper"]), agent("helper")],
        limits=RuntimeLimits(max_result_bytes=512 * 1024),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        tenant_a = AgentClient(client, task_queue=task_queue, store=env.store, partition_key="a")
        tenant_b = AgentClient(client, task_queue=task_queue, store=env.store, partition_key="b")

        with pytest.raises(InvalidRequestError) as refused:
            await tenant_a.start(
                build_request(entry_agent="lead", input="x", runtime_context={"partition_key": "b"})
            )
        assert refused.value.field == "runtime_context.partition_key"

        request_b = build_request(
            entry_agent="lead", input="b's secret task", runtime_context={"partition_key": "b"}
        )
        handle_b = await tenant_b.start(request_b)
        run_b = handle_b.run_id
        attempts: dict[str, Callable[[], Awaitable[object]]] = {
            "get_run": lambda: tenant_a.get_run(run_b),
            "get_run child": lambda: tenant_a.get_run(f"{run_b}/c"),
            "list_run_tree": lambda: tenant_a.list_run_tree(run_b),
            "events": lambda: anext(tenant_a.events(run_b)),
            "send_message": lambda: tenant_a.send_message(run_b, "hijack"),
            "call_agent": lambda: tenant_a.call_agent(
                run_b, "t1", AgentCallRequest(target="helper", task="t")
            ),
            "cancel": lambda: tenant_a.cancel(run_b),
            "result": lambda: tenant_a.result(run_b),
        }
        answered: list[str] = []  # each call must be refused as if the run did not exist
        for name, attempt in attempts.items():
            try:
                await attempt()
                answered.append(name)
            except RunNotFoundError:
                pass
        assert answered == []
        hold.set()
        result_b = await handle_b.result()
        tree_b = await tenant_b.list_run_tree(run_b)
        unscoped = await AgentClient(client, task_queue=task_queue).result(run_b)
        resolved_by_a = await tenant_a.resolve_output(unscoped.output)
        sessions_a = env.store.list_sessions("a", include_internal=True)

    assert result_b.outcome is RunOutcome.COMPLETED and result_b.text == BIG
    assert [r.partition_key for r in tree_b] == ["b", "b"] and len(tree_b) == 2
    user_messages = [
        m["content"] for m in provider.calls("lead")[1].messages if m["role"] == "user"
    ]
    assert user_messages == ["b's secret task"]  # tenant A's message never arrived
    assert resolved_by_a is not None and resolved_by_a.value is None  # no read of B's artifact
    assert sessions_a == []


def test_a_scoped_client_needs_a_valid_partition_key(client: Client) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        AgentClient(client, partition_key='a" OR WorkflowId != "')
    assert refused.value.field == "partition_key"
