"""Outputs over the inline payload limit travel through Temporal as artifact references."""

from __future__ import annotations

import json
import re
from pathlib import Path

from temporalio.client import Client

from otherone.client.agent_client import AgentClient, build_request
from otherone.definitions import AgentDefinition, RuntimeLimits
from otherone.runs import DEFAULT_PARTITION, AgentCallRequest, ResultContract, RunOutcome
from otherone.tools import tool
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider

#: Outputs up to 1 MiB are allowed (max_result_bytes); the inline limit is the default 256 KiB.
BIG_LIMITS = RuntimeLimits(max_result_bytes=1024 * 1024)
#: Every history event stays far below Temporal's 2 MB payload limit.
MAX_EVENT_BYTES = 300 * 1024


def agent(agent_id: str, **fields: object) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


async def biggest_event(client: Client, workflow_id: str) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return max(len(event.SerializeToString()) for event in history.events)


async def test_a_large_final_output_is_stored_as_an_artifact_and_resolved_by_the_client(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    big = "Grüße, " + "x" * 900_000  # ~900 KB: inline it would be ~2 MB in two payloads
    config = scripted_config({"writer": [big]}, agents=[agent("writer")], limits=BIG_LIMITS)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="writer", input="write"))
        record = await env.agents.get_run(result.run_id)
        bare = await AgentClient(client, task_queue=task_queue).result(result.run_id)
        assert bare.output is not None and bare.output.artifact is not None
        reference = bare.output.artifact
        stored = env.store.get_artifact(DEFAULT_PARTITION, reference.artifact_id)
        elsewhere = env.store.get_artifact("other-tenant", reference.artifact_id)
    assert result.outcome is RunOutcome.COMPLETED
    assert result.text == big and record.output is not None and record.output.value == big
    assert result.artifacts and result.artifacts[0]["size_bytes"] == len(big.encode())  # type: ignore[index,call-overload]
    # A client without a store sees the reference, never a silently empty value.
    assert bare.output.is_reference and bare.output.value is None
    assert reference.partition_key == DEFAULT_PARTITION
    assert stored is not None and stored.content == big.encode()
    assert stored.media_type.startswith("text/plain")
    assert elsewhere is None  # artifacts are scoped by partition
    assert await biggest_event(client, result.run_id) < MAX_EVENT_BYTES


async def test_large_child_outputs_reach_the_callers_model_and_trusted_callers_whole(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    big_text = "y" * 700_000
    big_json = json.dumps({"rows": [{"n": n, "pad": "z" * 40} for n in range(12_000)]})
    provider = RecordingProvider()
    # The boss waits in its second model call while a trusted call runs.
    boss_second_turn = provider.gate("boss", 2)
    config = scripted_config(
        {
            "boss": [
                {
                    "tool_calls": [
                        {
                            "id": "c1",
                            "name": "agent.call",
                            "arguments": {"agent": "texter", "task": "write"},
                        }
                    ]
                },
                "combined",
            ],
            "texter": [big_text],
            "tabler": [big_json],
        },
        agents=[
            agent("boss", callable_agents=["texter", "tabler"]),
            agent("texter"),
            agent("tabler"),
        ],
        limits=BIG_LIMITS,
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        no_compaction = {"context_window": 10_000_000}  # the model sees the whole result
        handle = await env.agents.start(
            build_request(entry_agent="boss", input="go", session=no_compaction)
        )
        await wait_until(lambda: len(provider.calls("boss")) >= 2, message="boss turn 2")
        table = await env.agents.call_agent(
            handle.run_id,
            "t1",
            AgentCallRequest(
                target="tabler", task="table", result_contract=ResultContract(kind="json")
            ),
        )
        boss_second_turn.set()
        result = await handle.result()
        tree = await env.agents.list_run_tree(result.run_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "combined"
    tool_messages = [m for m in provider.calls("boss")[1].messages if m["role"] == "tool"]
    assert len(tool_messages) == 1 and big_text in tool_messages[0]["content"]
    assert table.outcome is RunOutcome.COMPLETED and table.output is not None
    assert table.output.type == "json" and table.output.value == json.loads(big_json)
    for record in tree:
        assert await biggest_event(client, record.run_id) < MAX_EVENT_BYTES


async def test_an_oversized_tool_result_is_kept_as_an_artifact_while_the_run_ends(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    @tool
    def dump() -> str:
        """Returns far too much."""
        return "q" * (3 * 1024 * 1024)

    config = scripted_config(
        {"agent": [{"tool_calls": [{"name": "dump", "arguments": {}}]}, "never"]},
        agents=[agent("agent", tools=["dump"])],
        tools=[dump],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
        assert result.failure is not None
        match = re.search(r"stored as artifact (art-[0-9a-f]+)", result.failure.message)
        assert match, result.failure.message
        artifact = env.store.get_artifact(DEFAULT_PARTITION, match.group(1))
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    assert artifact is not None and json.loads(artifact.content) == "q" * (3 * 1024 * 1024)
    assert await biggest_event(client, result.run_id) < MAX_EVENT_BYTES
