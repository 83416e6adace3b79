"""Long-term memory: policies grant the tools, scopes and partitions isolate, secrets refused.

Tests that take ``store`` (tests/conftest.py) run on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from temporalio.client import Client

from otherone.activities.context import system_prompt_for
from otherone.activities.memory_tools import MemoryTools
from otherone.client.agent_client import build_request
from otherone.config import MEMORY_RECALL_TOOL, MEMORY_STORE_TOOL, RuntimeConfig
from otherone.definitions import AgentDefinition, MemoryPolicy, ModelProfile
from otherone.runs import RunOutcome
from otherone.store import Store
from otherone.store.memory import (
    MAX_RECALLED_MEMORIES,
    SHARED_SCOPE,
    MemoryStore,
    agent_scope,
    contains_sensitive_memory,
)
from otherone.store.schema import memory_points
from otherone.tools import ToolContext, ToolError, ToolErrorKind
from tests.harness import agent_env, scripted_config
from tests.providers import RecordingProvider


@pytest.fixture
def tools(store: Store) -> MemoryTools:
    return MemoryTools(MemoryStore(store.engine))


def context(
    policy: MemoryPolicy | str,
    *,
    agent_id: str = "agent-1",
    partition_key: str = "tenant-a",
    call_id: str = "call-1",
    run_id: str = "run-1",
) -> ToolContext:
    return ToolContext(
        tool_call_id=call_id,
        tool_name=MEMORY_STORE_TOOL,
        run_id=run_id,
        root_run_id="root-1",
        agent_id=agent_id,
        session_id="session-1",
        partition_key=partition_key,
        metadata={"memory_policy": str(policy)},
    )


async def store_memory(tools: MemoryTools, storage: str, types: str, ctx: ToolContext) -> str:
    ctx = ctx.model_copy(update={"idempotency_key": f"key-{uuid.uuid4()}"})
    spec = tools.specs[MEMORY_STORE_TOOL]
    result = await spec.invoke({"storage": storage, "types": types}, ctx)
    assert result["stored"] is True
    return str(result["point_id"])


async def recall(tools: MemoryTools, memory_types: list[str], ctx: ToolContext) -> list[str]:
    result = await tools.specs[MEMORY_RECALL_TOOL].invoke({"memory_types": memory_types}, ctx)
    return list(result["memories"])


async def tool_error(tools: MemoryTools, name: str, arguments: Any, ctx: ToolContext) -> ToolError:
    with pytest.raises(ToolError) as info:
        await tools.specs[name].invoke(arguments, ctx)
    return info.value


# --------------------------------------------------------------------------- policy


def test_memory_policy_controls_builtin_memory_tools() -> None:
    """The seed's test, plus the two other policies."""
    policies = {
        "off": MemoryPolicy.DISABLED,
        "reader": MemoryPolicy.READ_ONLY_SHARED,
        "writer": MemoryPolicy.READ_WRITE_SHARED,
        "private": MemoryPolicy.PRIVATE_AGENT,
    }
    snapshot = RuntimeConfig(
        agents=[
            AgentDefinition(id=agent_id, description=agent_id, memory=policy)
            for agent_id, policy in policies.items()
        ],
        models=[ModelProfile(id="default", provider="scripted", model="test")],
    ).snapshot()
    tools = {agent_id: snapshot.tool_names_for(snapshot.agent(agent_id)) for agent_id in policies}
    assert tools["off"] == []
    assert tools["reader"] == [MEMORY_RECALL_TOOL]
    assert tools["writer"] == [MEMORY_RECALL_TOOL, MEMORY_STORE_TOOL]
    assert tools["private"] == [MEMORY_RECALL_TOOL, MEMORY_STORE_TOOL]
    prompts = {
        agent_id: system_prompt_for(snapshot, snapshot.agent(agent_id)) for agent_id in tools
    }
    assert prompts["off"] == ""
    assert prompts["reader"] == (
        "\nLong-term memory is read-only. Use memory.recall only when relevant."
    )
    sentence = (
        "\nLong-term memory is available. Recall relevant facts before answering and store only "
        "durable, non-sensitive information."
    )
    assert prompts["writer"] == prompts["private"] == sentence


def test_memory_tools_have_the_seed_schemas(tools: MemoryTools) -> None:
    recall_tool, store_tool = tools.definitions([MEMORY_RECALL_TOOL, MEMORY_STORE_TOOL, "other"])
    assert recall_tool["function"] == {
        "name": "memory.recall",
        "description": "Recall scoped long-term memories by semantic type.",
        "parameters": {
            "type": "object",
            "properties": {
                "memory_types": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "maxItems": 8,
                }
            },
            "required": ["memory_types"],
            "additionalProperties": False,
        },
    }
    assert store_tool["function"] == {
        "name": "memory.store",
        "description": "Store one durable, non-sensitive long-term memory.",
        "parameters": {
            "type": "object",
            "properties": {"storage": {"type": "string"}, "types": {"type": "string"}},
            "required": ["storage", "types"],
            "additionalProperties": False,
        },
    }


async def test_tools_check_the_policy_they_are_given(tools: MemoryTools) -> None:
    args = {"storage": "The user likes tea", "types": "preference"}
    denied = await tool_error(tools, MEMORY_STORE_TOOL, args, context("read_only_shared"))
    assert denied.kind is ToolErrorKind.PERMISSION_DENIED
    for policy in ("disabled", "nonsense"):
        denied = await tool_error(
            tools, MEMORY_RECALL_TOOL, {"memory_types": ["x"]}, context(policy)
        )
        assert denied.kind is ToolErrorKind.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        (MEMORY_RECALL_TOOL, {"memory_types": []}),
        (MEMORY_RECALL_TOOL, {"memory_types": ["a"] * 9}),
        (MEMORY_RECALL_TOOL, {}),
        (MEMORY_STORE_TOOL, {"storage": "   ", "types": "preference"}),
        (MEMORY_STORE_TOOL, {"storage": "fact", "types": ""}),
        (MEMORY_STORE_TOOL, {"storage": "fact"}),
        (MEMORY_STORE_TOOL, {"storage": "fact", "types": "t" * 513}),
        (MEMORY_STORE_TOOL, {"storage": "f" * 16_385, "types": "t"}),
    ],
)
async def test_bad_arguments_are_invalid_arguments(
    tools: MemoryTools, name: str, arguments: dict[str, Any]
) -> None:
    error = await tool_error(tools, name, arguments, context("read_write_shared"))
    assert error.kind is ToolErrorKind.INVALID_ARGUMENTS


# --------------------------------------------------------------------------- provenance and scopes


async def test_memory_writes_include_run_session_and_agent_provenance(
    tools: MemoryTools,
) -> None:
    """The seed's test: the stored point names the run, session and agent that wrote it."""
    ctx = context("read_write_shared", agent_id="agent-1", run_id="run-1")
    point_id = await store_memory(
        tools, "The user prefers concise answers", "response preference", ctx
    )
    point = tools.memory.get("tenant-a", point_id)
    assert point is not None
    assert (point.source_run_id, point.source_session_id, point.source_agent_id) == (
        "run-1",
        "session-1",
        "agent-1",
    )
    assert (point.scope, point.types, point.active) == (SHARED_SCOPE, "response preference", True)
    assert tools.memory.get("tenant-b", point_id) is None, "points are read within a partition"


async def test_a_retried_store_writes_once(tools: MemoryTools) -> None:
    ctx = context("read_write_shared")
    spec = tools.specs[MEMORY_STORE_TOOL]
    args = {"storage": "The user lives in Lyon", "types": "location"}
    first = await spec.invoke(args, ctx)
    second = await spec.invoke(args, ctx.model_copy(update={"attempt": 2}))
    assert first == second
    assert await recall(tools, ["location"], ctx) == ["The user lives in Lyon"]


async def test_shared_and_private_scopes_and_partitions_are_isolated(tools: MemoryTools) -> None:
    shared_writer = context("read_write_shared", agent_id="writer")
    await store_memory(tools, "Team standup is at 9:30", "schedule", shared_writer)
    await store_memory(
        tools,
        "Alice keeps her notes in Markdown",
        "schedule habit",
        context("private_agent", agent_id="alice"),
    )
    other_tenant = context("read_write_shared", agent_id="writer", partition_key="tenant-b")
    await store_memory(tools, "Tenant B standup is at 11:00", "schedule", other_tenant)

    reader = context("read_only_shared", agent_id="reader")
    assert await recall(tools, ["schedule"], reader) == ["Team standup is at 9:30"]
    assert await recall(tools, ["schedule"], context("private_agent", agent_id="alice")) == [
        "Alice keeps her notes in Markdown"
    ]
    assert await recall(tools, ["schedule"], context("private_agent", agent_id="bob")) == []
    assert await recall(tools, ["schedule"], other_tenant) == ["Tenant B standup is at 11:00"]
    with tools.memory.engine.connect() as conn:
        rows = conn.execute(memory_points.select()).all()
    point_scopes = {(row.partition_key, row.scope) for row in rows}
    assert point_scopes == {
        ("tenant-a", "shared"),
        ("tenant-a", agent_scope("alice")),
        ("tenant-b", "shared"),
    }


# --------------------------------------------------------------------------- recall


async def test_recall_matches_types_like_the_seed(tools: MemoryTools) -> None:
    ctx = context("read_write_shared")
    await store_memory(tools, "Concise answers", "Response Preference", ctx)
    await store_memory(tools, "Lives in Lyon", "location", ctx)
    assert await recall(tools, ["preference"], ctx) == ["Concise answers"], "query in types"
    assert await recall(tools, ["user response preference and style"], ctx) == [
        "Concise answers"
    ], "types in query"
    assert await recall(tools, ["  LOCATION "], ctx) == ["Lives in Lyon"], "trimmed, any case"
    assert await recall(tools, ["weather", "   "], ctx) == []
    both = await recall(tools, ["location", "preference"], ctx)
    assert both == ["Lives in Lyon", "Concise answers"], "newest first"


async def test_recall_skips_inactive_points_and_returns_at_most_64(tools: MemoryTools) -> None:
    ctx = context("read_write_shared")
    hidden = await store_memory(tools, "Outdated fact", "fact", ctx)
    with tools.memory.engine.begin() as conn:
        conn.execute(update(memory_points).where(memory_points.c.id == hidden).values(active=False))
    assert await recall(tools, ["fact"], ctx) == []
    for index in range(MAX_RECALLED_MEMORIES + 6):
        await store_memory(tools, f"fact {index}", "fact", ctx)
    recalled = await recall(tools, ["fact"], ctx)
    assert len(recalled) == MAX_RECALLED_MEMORIES
    assert "Outdated fact" not in recalled


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize(
    "storage",
    [
        # the seed's patterns
        "The user's password is hunter2",
        "API key: abc123",
        "api_key=abc123",
        "Verification code 483920",
        "Credit card ends in 4242",
        "用户的密码是 123456",
        "验证码是 839201",
        "银行卡尾号 6789",
        # more of the same kind
        "apikey=abc123",
        "Secret key for the staging bucket is in the vault",
        "passwd: letmein",
        "Auth token: 1234abcd",
        "his token is abcdef",
        "Card number on file",
        "身份证号 110101199003074514",
        "信用卡 on file",
        "支付口令 778899",
        "use sk-ant-api03-abcdefghijklmnopqrstu for the provider",
        "key AKIAIOSFODNN7EXAMPLE",
        "-----BEGIN RSA PRIVATE KEY----- MIIE",
        # card numbers that pass the Luhn check, in any grouping
        "Pay with 4111 1111 1111 1111 next time",
        "Card 5555-5555-5555-4444",
        "378282246310005",
    ],
)
async def test_secret_looking_values_are_refused(tools: MemoryTools, storage: str) -> None:
    assert contains_sensitive_memory(storage)
    ctx = context("read_write_shared")
    args = {"storage": storage, "types": "note"}
    error = await tool_error(tools, MEMORY_STORE_TOOL, args, ctx)
    assert error.kind is ToolErrorKind.PERMISSION_DENIED
    assert error.message == "sensitive values must not be stored in long-term memory"
    assert await recall(tools, ["note"], ctx) == [], "nothing was written"


async def test_secret_looking_types_are_refused(tools: MemoryTools) -> None:
    error = await tool_error(
        tools,
        MEMORY_STORE_TOOL,
        {"storage": "hunter2", "types": "password"},
        context("private_agent"),
    )
    assert error.kind is ToolErrorKind.PERMISSION_DENIED


@pytest.mark.parametrize(
    "storage",
    [
        "The user prefers answers under 500 tokens",
        "The user wants token-efficient replies",
        "Order 4111111111111112 shipped",  # 16 digits, fails the Luhn check
        "Call +86 138 0013 8000 after 6pm",
        "The build number 0000000000000 is a placeholder",
        "Pin the dependency to version 2.1",
        "用户喜欢简洁的回答",
    ],
)
def test_ordinary_facts_are_not_secrets(storage: str) -> None:
    assert not contains_sensitive_memory(storage)


# --------------------------------------------------------------------------- through runs


def memory_agents() -> list[AgentDefinition]:
    return [
        AgentDefinition(id="writer", description="writes", memory=MemoryPolicy.READ_WRITE_SHARED),
        AgentDefinition(id="reader", description="reads", memory=MemoryPolicy.READ_ONLY_SHARED),
    ]


def memory_script() -> dict[str, list[Any]]:
    store_call = {
        "name": MEMORY_STORE_TOOL,
        "id": "store-1",
        "arguments": {"storage": "The user prefers concise answers", "types": "preference"},
    }
    secret_call = {
        "name": MEMORY_STORE_TOOL,
        "id": "store-2",
        "arguments": {"storage": "The user's password is hunter2", "types": "credentials"},
    }
    recall_call = {
        "name": MEMORY_RECALL_TOOL,
        "id": "recall-1",
        "arguments": {"memory_types": ["preference"]},
    }
    forbidden_store = {**store_call, "id": "store-3"}
    return {
        "writer": [{"tool_calls": [store_call, secret_call]}, "stored"],
        "reader": [{"tool_calls": [recall_call, forbidden_store]}, "recalled"],
    }


def tool_results(store: Store, partition_key: str, session_id: str) -> dict[str, tuple[Any, ...]]:
    return {
        str(entry.tool_call_id): (json.loads(entry.content), entry.error_kind)
        for entry in store.load_entries(partition_key, session_id)
        if entry.role == "tool"
    }


async def test_a_memory_stored_in_one_run_is_recalled_by_another_run_of_the_partition(
    client: Client, task_queue: str, tmp_path: Path, store: Store
) -> None:
    config = scripted_config(memory_script(), agents=memory_agents())
    provider = RecordingProvider()
    async with agent_env(
        client, task_queue, config, tmp_path, store=store, providers={"scripted": provider}
    ) as env:

        async def run(agent: str, partition_key: str) -> tuple[Any, dict[str, tuple[Any, ...]]]:
            request = build_request(
                entry_agent=agent,
                input="remember this" if agent == "writer" else "what do you know?",
                runtime_context={"partition_key": partition_key},
            )
            result = await env.agents.run(request)
            assert result.outcome is RunOutcome.COMPLETED
            return result, tool_results(store, partition_key, result.session_id)

        written, writer_results = await run("writer", "tenant-a")
        _, same_partition = await run("reader", "tenant-a")
        _, other_partition = await run("reader", "tenant-b")

    stored, error_kind = writer_results["store-1"]
    assert error_kind is None and stored["stored"] is True
    assert writer_results["store-2"][1] == "permission_denied", "the password was refused"
    assert same_partition["recall-1"] == ({"memories": ["The user prefers concise answers"]}, None)
    assert other_partition["recall-1"] == ({"memories": []}, None)
    assert same_partition["store-3"][1] == "permission_denied", "read-only memory: not offered"

    point = MemoryStore(store.engine).get("tenant-a", stored["point_id"])
    assert point is not None
    assert (point.source_run_id, point.source_agent_id, point.source_session_id) == (
        written.run_id,
        "writer",
        written.session_id,
    )
    offered = {
        request.agent_id: [tool["function"]["name"] for tool in request.tools]
        for request in provider.calls()
    }
    assert offered == {"writer": ["memory.recall", "memory.store"], "reader": ["memory.recall"]}
    reader_system = provider.calls("reader")[0].messages[0]["content"]
    assert "Long-term memory is read-only." in reader_system
