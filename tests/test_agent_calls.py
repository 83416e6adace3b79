"""Multi-agent runs on a real dev server: the seed's agent-call tests, ported, and more."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError

from otherone.authorization import AuthorizationDecision, CallerView
from otherone.client.agent_client import build_request
from otherone.definitions import AgentDefinition, RuntimeLimits, RuntimePolicy
from otherone.errors import FailureCode, RunNotActiveError
from otherone.runs import AgentCallRequest, AgentCallResult, ResultContract, RunOutcome, RunStatus
from otherone.tools import tool
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider

REPO = Path(__file__).resolve().parents[1]


def agent_call(
    call_id: str, target: str, task: str, context: dict[str, Any] | None = None
) -> dict[str, Any]:
    arguments: dict[str, Any] = {"agent": target, "task": task}
    if context is not None:
        arguments["context"] = context
    return {"name": "agent.call", "id": call_id, "arguments": arguments}


def calls(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(tool_calls)}


def agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


def team(*defs: AgentDefinition, **script: list[Any]) -> Any:
    return scripted_config(script, agents=list(defs))


def call_results(env: Any, session_id: str) -> list[dict[str, Any]]:
    return [
        json.loads(entry.content)
        for entry in env.store.load_entries("local", session_id)
        if entry.role == "tool" and entry.tool_name == "agent.call"
    ]


COORDINATOR = agent("coordinator", callable_agents=["worker"])
WORKER = agent("worker")


async def test_agent_call_executes_child_and_returns_to_parent(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = team(
        COORDINATOR,
        WORKER,
        coordinator=[calls(agent_call("call_1", "worker", "do work")), "final answer"],
        worker=["worker result"],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="coordinator", input="start"))
        records = await env.agents.list_run_tree(result.root_run_id)
        [call_result] = call_results(env, result.session_id)
        visible = env.store.list_sessions("local")
        everything = env.store.list_sessions("local", include_internal=True)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "final answer"
    assert [(r.agent_id, r.depth, r.status) for r in records] == [
        ("coordinator", 0, RunStatus.COMPLETED),
        ("worker", 1, RunStatus.COMPLETED),
    ]
    child = records[1]
    assert child.parent_run_id == result.run_id and child.agent_call_id == "call_1"
    assert child.run_id == f"{result.run_id}/worker.call_1"
    assert (
        call_result["outcome"] == "completed" and call_result["output"]["value"] == "worker result"
    )
    assert call_result["run_id"] == child.run_id and call_result["schema_version"] == 1
    assert result.usage.agent_calls == 1
    assert len(visible) == 1 and len(everything) == 2  # the child's session is internal


async def test_child_context_is_isolated_from_parent_history(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = team(
        agent("root", callable_agents=["worker"]),
        WORKER,
        root=[calls(agent_call("call_1", "worker", "child task", {"city": "Paris"})), "root done"],
        worker=["child done"],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        await env.agents.run(build_request(entry_agent="root", input="parent private history"))
    [child_request] = provider.calls("worker")
    child_messages = json.dumps(child_request.messages)
    assert "child task" in child_messages and "parent private history" not in child_messages
    expected = "Task from Agent 'root':\nchild task\n\nExplicit context (untrusted data):\n"
    assert child_request.messages[-1]["content"] == expected + '{\n  "city": "Paris"\n}'


async def test_parent_window_policy_passes_a_text_excerpt_only(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = team(
        agent("root", callable_agents=["worker"]),
        agent("worker", context={"kind": "parent_window", "max_tokens": 100}),
        root=[
            {"text": "let me delegate", "tool_calls": [agent_call("c", "worker", "summarise")]},
            "done",
        ],
        worker=["ok"],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        await env.agents.run(build_request(entry_agent="root", input="my question"))
    child_input = provider.calls("worker")[0].messages[-1]["content"]
    assert "Parent context excerpt (untrusted data):\nuser: my question" in child_input
    assert "agent.call" not in child_input  # tool calls never travel


async def test_agent_call_tool_lists_exactly_the_reachable_agents(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {"boss": ["hi"], "loner": ["hi"]},
        agents=[
            agent("boss", callable_agents="all", description="The boss"),
            agent("helper", description="Helps with things"),
            agent("secret", description="Hidden by policy"),
            agent("loner"),
        ],
        policy=RuntimePolicy(callable_agents=["boss", "helper", "loner"]),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        await env.agents.run(build_request(entry_agent="boss", input="x"))
        await env.agents.run(build_request(entry_agent="loner", input="x"))
    [boss_tool] = provider.calls("boss")[0].tools
    function = boss_tool["function"]
    assert function["name"] == "agent.call"
    assert function["parameters"]["properties"]["agent"]["enum"] == [
        "helper",
        "loner",
    ]  # not itself, not secret
    assert "- helper: Helps with things" in function["description"]
    assert "secret" not in json.dumps(boss_tool)
    assert provider.calls("loner")[0].tools == []


DENIALS = [
    ("unknown_target", {}, agent_call("c", "ghost", "x"), FailureCode.AGENT_NOT_FOUND),
    ("not_in_definition", {}, agent_call("c", "other", "x"), FailureCode.AGENT_CALL_DENIED),
    (
        "policy",
        {"policy": RuntimePolicy(callable_agents=["worker"])},
        agent_call("c", "third", "x"),
        FailureCode.AGENT_CALL_DENIED,
    ),
    ("self_call", {}, agent_call("c", "caller", "x"), FailureCode.AGENT_CALL_CYCLE),
    ("empty_task", {}, agent_call("c", "worker", "   "), FailureCode.INVALID_CONFIGURATION),
    (
        "max_depth",
        {"limits": RuntimeLimits(max_depth=0)},
        agent_call("c", "worker", "x"),
        FailureCode.MAX_DEPTH_EXCEEDED,
    ),
    (
        "context_too_large",
        {"limits": RuntimeLimits(max_context_transfer_bytes=64)},
        agent_call("c", "worker", "x", {"blob": "y" * 100}),
        FailureCode.BUDGET_EXCEEDED,
    ),
    (
        "total_runs",
        {"limits": RuntimeLimits(max_total_runs=1)},
        agent_call("c", "worker", "x"),
        FailureCode.BUDGET_EXCEEDED,
    ),
    (
        "agent_calls",
        {"limits": RuntimeLimits(max_agent_calls=1)},
        None,
        FailureCode.BUDGET_EXCEEDED,
    ),
]


@pytest.mark.parametrize(("name", "runtime", "call", "code"), DENIALS, ids=[d[0] for d in DENIALS])
async def test_denied_calls_come_back_as_structured_results(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    name: str,
    runtime: dict[str, Any],
    call: Any,
    code: FailureCode,
) -> None:
    turn = (
        calls(call)
        if call
        else calls(agent_call("a", "worker", "x"), agent_call("b", "worker", "y"))
    )
    config = scripted_config(
        {"caller": [turn, "handled"], "worker": ["worked"] * 2, "third": ["never"]},
        agents=[
            agent(
                "caller",
                callable_agents=["worker", "caller", "third"]
                if name != "unknown_target"
                else "all",
            ),
            agent("worker"),
            agent("other"),
            agent("third"),
        ],
        **runtime,
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="caller", input="go"))
        results = call_results(env, result.session_id)
        tree = await env.agents.list_run_tree(result.run_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "handled"
    denied = results[-1]
    assert denied["failure"]["code"] == code.value, denied
    assert denied.get("run_id") is None
    assert len(tree) == (2 if name == "agent_calls" else 1)  # a denied call starts nothing


async def test_max_children_per_run(client: Client, task_queue: str, tmp_path: Path) -> None:
    config = scripted_config(
        {
            "caller": [calls(*(agent_call(f"c{i}", "worker", "x") for i in range(3))), "done"],
            "worker": ["w"] * 3,
        },
        agents=[agent("caller", callable_agents=["worker"]), WORKER],
        limits=RuntimeLimits(max_children_per_run=2),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="caller", input="go"))
        results = call_results(env, result.session_id)
        events = [e.event async for e in env.agents.events(result.run_id)]
    # The seed's rule: a refused call is `failed`, its code says why.
    assert [r["outcome"] for r in results] == ["completed", "completed", "failed"]
    assert results[2]["failure"]["code"] == "budget_exceeded"
    # Checked (and announced) like any call, then refused: its end is announced too.
    ends = [e for e in events if e["type"] == "agent_call_completed" and e["call_id"] == "c2"]
    assert [(e["outcome"], e["code"]) for e in ends] == [("failed", "budget_exceeded")]


async def test_authorizer_hook_can_deny(client: Client, task_queue: str, tmp_path: Path) -> None:
    seen: list[CallerView] = []

    async def authorizer(
        caller: CallerView, target: AgentDefinition, request: AgentCallRequest
    ) -> AuthorizationDecision:
        seen.append(caller)
        if "secret" in request.task:
            return AuthorizationDecision.deny("no secrets")
        return AuthorizationDecision.allow()

    config = team(
        COORDINATOR,
        WORKER,
        coordinator=[
            calls(
                agent_call("a", "worker", "public task"), agent_call("b", "worker", "secret task")
            ),
            "done",
        ],
        worker=["ok"],
    )
    async with agent_env(client, task_queue, config, tmp_path, authorizer=authorizer) as env:
        result = await env.agents.run(build_request(entry_agent="coordinator", input="go"))
        results = call_results(env, result.session_id)
    assert [r["outcome"] for r in results] == ["completed", "failed"]
    assert (
        results[1]["failure"]["code"] == "agent_call_denied"
        and "no secrets" in results[1]["failure"]["message"]
    )
    assert seen[0].agent_id == "coordinator" and seen[0].ancestry == ("coordinator",)


async def test_denies_agent_call_cycles_without_starting_a_third_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = team(
        agent("agent_a", callable_agents=["agent_b"]),
        agent("agent_b", callable_agents=["agent_a"]),
        agent_a=[calls(agent_call("call_b", "agent_b", "go to B")), "A final"],
        agent_b=[calls(agent_call("call_a", "agent_a", "go back to A")), "B handled cycle"],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent_a", input="start"))
        records = await env.agents.list_run_tree(result.root_run_id)
        [b_result] = call_results(env, records[1].session_id or "")
    assert result.outcome is RunOutcome.COMPLETED
    assert len(records) == 2
    assert b_result["failure"]["code"] == "agent_call_cycle"
    assert "agent_a -> agent_b -> agent_a" in b_result["failure"]["message"]


async def test_recursion_is_allowed_when_the_policy_says_so(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"echo": [calls(agent_call("again", "echo", "once more")), "outer done", "inner done"]},
        agents=[agent("echo", callable_agents=["echo"])],
        policy=RuntimePolicy(allow_recursive_calls=True),
        limits=RuntimeLimits(max_depth=1),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="echo", input="go"))
        tree = await env.agents.list_run_tree(result.run_id)
    # The child plays turn 1 again (a call) and is refused by max_depth, then answers.
    assert result.outcome is RunOutcome.COMPLETED
    assert [r.depth for r in tree] == [0, 1]


async def test_nested_call_does_not_deadlock_with_one_activity_slot(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = team(
        agent("root", callable_agents=["worker"]),
        WORKER,
        root=[calls(agent_call("call_1", "worker", "work")), "done"],
        worker=["worked"],
    )
    async with agent_env(client, task_queue, config, tmp_path, max_concurrent_activities=1) as env:
        result = await asyncio.wait_for(
            env.agents.run(build_request(entry_agent="root", input="start")), 30
        )
    assert result.outcome is RunOutcome.COMPLETED


async def test_parallel_agent_calls_run_concurrently(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gates = [provider.gate("researcher", 1), provider.gate("writer", 1)]
    config = team(
        agent(
            "coordinator",
            callable_agents=["researcher", "writer"],
            model_overrides={"parallel_tool_calls": True},
        ),
        agent("researcher"),
        agent("writer"),
        coordinator=[
            calls(agent_call("r", "researcher", "research"), agent_call("w", "writer", "write")),
            "done",
        ],
        researcher=["facts"],
        writer=["prose"],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="coordinator", input="go"))
        # Both children are in their model call at the same time: they run concurrently.
        await wait_until(
            lambda: {r.agent_id for r in provider.requests} >= {"researcher", "writer"}
        )
        record = await handle.record()
        for gate in gates:
            gate.set()
        result = await handle.result()
    assert record.status is RunStatus.WAITING_FOR_CHILD
    assert result.text == "done"


async def test_tree_budget_is_never_exceeded_with_eight_parallel_children(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    @tool
    def step() -> str:
        """One step of work."""
        return "ok"

    provider = RecordingProvider()
    busy_worker = [calls({"name": "step"})] * 5 + ["worker done"]
    config = scripted_config(
        {
            "boss": [
                calls(*(agent_call(f"c{i}", "worker", f"job {i}") for i in range(8))),
                "boss done",
            ],
            "worker": busy_worker,
        },
        agents=[
            agent(
                "boss", callable_agents=["worker"], model_overrides={"parallel_tool_calls": True}
            ),
            agent("worker", tools=["step"]),
        ],
        tools=[step],
        limits=RuntimeLimits(max_model_calls=20, max_tool_calls=20, max_children_per_run=8),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        tree = await env.agents.list_run_tree(result.run_id)
    model_calls = sum(r.usage.model_calls for r in tree)
    tool_calls = sum(r.usage.tool_calls for r in tree)
    assert len(tree) == 9
    assert len(provider.requests) == model_calls <= 20
    assert tool_calls <= 20
    assert any(r.status is RunStatus.BUDGET_EXCEEDED for r in tree[1:])
    assert result.outcome is RunOutcome.COMPLETED  # the boss kept its share for its answer


async def test_root_cancellation_cancels_the_whole_tree(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("c", 1)  # the grandchild hangs in its model call
    config = team(
        agent("a", callable_agents=["b"]),
        agent("b", callable_agents=["c"]),
        agent("c"),
        a=[calls(agent_call("to_b", "b", "delegate"))],
        b=[calls(agent_call("to_c", "c", "delegate again"))],
        c=["never"],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="a", input="go"))
        await wait_until(lambda: any(r.agent_id == "c" for r in provider.requests))
        grandchild = f"{handle.run_id}/b.to_b/c.to_c"
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), 30)
        tree = await env.agents.list_run_tree(handle.run_id)
        with pytest.raises(RunNotActiveError):
            await env.agents.cancel(grandchild)
    assert result.outcome is RunOutcome.CANCELLED
    assert [(r.agent_id, r.status) for r in tree] == [
        ("a", RunStatus.CANCELLED),
        ("b", RunStatus.CANCELLED),
        ("c", RunStatus.CANCELLED),
    ]
    # Once cancelled, no run asks its model again after its children have ended.
    assert [r.agent_id for r in provider.requests] == ["a", "b", "c"]
    assert [r.usage.model_calls for r in tree] == [1, 1, 1]


async def test_a_cancelled_sequential_turn_starts_none_of_its_later_calls(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("b", 1)  # the first child hangs until cancelled
    config = team(
        agent("a", callable_agents=["b", "c"]),
        agent("b"),
        agent("c"),
        a=[calls(agent_call("to_b", "b", "first"), agent_call("to_c", "c", "second"))],
        b=["never"],
        c=["never either"],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="a", input="go"))
        await wait_until(lambda: any(r.agent_id == "b" for r in provider.requests))
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), 30)
        tree = await env.agents.list_run_tree(handle.run_id)
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.CANCELLED
    assert [r.agent_id for r in tree] == ["a", "b"]  # c was never started
    assert [r.agent_id for r in provider.requests] == ["a", "b"]
    not_run = next(e for e in entries if e.tool_call_id == "to_c")
    assert not_run.error_kind == "cancelled" and "nothing was executed" in not_run.content


PARALLEL_BOSS = agent(
    "boss", callable_agents=["worker"], model_overrides={"parallel_tool_calls": True}
)
TWO_CALLS = calls(agent_call("c1", "worker", "one"), agent_call("c2", "worker", "two"))


@tool
def note(text: str) -> str:
    """Note a text down."""
    return text


RUN_ENDS = ("run_completed", "run_failed", "run_cancelled")


def ends_per_call(env: Any, run_id: str) -> Counter[tuple[str, str]]:
    """(event type, call id) of the root's tool and agent-call events, counted."""
    return Counter(
        (record.event["type"], str(record.event.get("tool_call_id") or record.event["call_id"]))
        for record in env.store.read_events(run_id, limit=5000)
        if record.run_id == run_id and str(record.event.get("type")).startswith(("tool_", "agent_"))
    )


async def test_cancelling_while_children_run_answers_each_call_once_with_its_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The children's cancelled results swallow the run's cancellation: their `agent.call`
    answers are decided (`tool_completed`) before the run ends; the end must not answer the
    same calls again as calls it ended before (two `tool_completed` each, found by a user)."""
    provider = RecordingProvider()
    provider.gate("worker", 1)  # both children stay in their model calls until cancelled
    config = team(PARALLEL_BOSS, WORKER, boss=[TWO_CALLS, "never"], worker=["never"])
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))
        await wait_until(lambda: len(provider.calls("worker")) == 2)
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), 30)
        ends = ends_per_call(env, handle.run_id)
        answers = call_results(env, result.session_id)
    assert result.outcome is RunOutcome.CANCELLED
    for call_id in ("c1", "c2"):
        for kind in ("tool_started", "agent_call_started", "agent_call_completed"):
            assert ends[(kind, call_id)] == 1, (kind, call_id, ends)
        assert ends[("tool_completed", call_id)] == 1, (call_id, ends)
    # The session holds the children's own (cancelled) results, one per call.
    assert sorted((a["call_id"], a["outcome"]) for a in answers) == [
        ("c1", "cancelled"),
        ("c2", "cancelled"),
    ]


@pytest.mark.parametrize("attempt", range(3))
async def test_cancelling_while_children_start_leaves_none_behind(
    client: Client, task_queue: str, tmp_path: Path, attempt: int
) -> None:
    """A cancel landing while a child's start is with the server: the child may start all
    the same, so it is waited for and stopped as a running one. It used to run on (a model
    call, a tool) after its caller had ended and to announce its end a second time.

    Racy by nature (the cancel is sent the moment the first call is announced, which lands
    in that window most times here): every timing must keep the invariants checked."""
    config = scripted_config(
        {
            "boss": [TWO_CALLS, "done"],
            "worker": [calls({"name": "note", "id": "n", "arguments": {"text": "x"}}), "ok"],
        },
        agents=[PARALLEL_BOSS, agent("worker", tools=["note"])],
        tools=[note],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))

        def announced() -> bool:
            return any(
                record.event["type"] == "agent_call_started"
                for record in env.store.read_events(handle.run_id)
            )

        await wait_until(announced, interval=0.002)
        with contextlib.suppress(RunNotActiveError):  # it ended first: the invariants hold
            await handle.cancel()
        await asyncio.wait_for(handle.result(), 30)
        root = await client.get_workflow_handle(handle.run_id).describe()
        ends = ends_per_call(env, handle.run_id)
        runs = Counter(
            (record.run_id, record.event["type"])
            for record in env.store.read_events(handle.run_id, limit=5000)
        )
        children = [
            await _described(client, f"{handle.run_id}/worker.{call_id}")
            for call_id in ("c1", "c2")
        ]
        records = await env.agents.list_run_tree(handle.run_id)
    assert root.close_time is not None
    for child in filter(None, children):  # None: never started (cancelled in its check)
        assert child.close_time is not None and child.close_time <= root.close_time, child.id
    assert all(record.status.is_terminal for record in records)
    for call_id in ("c1", "c2"):
        assert ends[("tool_started", call_id)] == ends[("tool_completed", call_id)] == 1, ends
        started = ends[("agent_call_started", call_id)]
        assert ends[("agent_call_completed", call_id)] == started, (call_id, ends)
    # Every run that ended has its start, also a child cancelled before it was prepared.
    for record in records:
        assert runs[(record.run_id, "run_started")] == 1, (record.run_id, runs)
        assert sum(runs[(record.run_id, end)] for end in RUN_ENDS) == 1, (record.run_id, runs)


async def _described(client: Client, workflow_id: str) -> WorkflowExecutionDescription | None:
    try:
        return await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return None


async def test_cancelling_a_child_does_not_cancel_its_parent(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("worker", 1)
    config = team(
        COORDINATOR,
        WORKER,
        coordinator=[calls(agent_call("call_1", "worker", "slow work")), "went on without it"],
        worker=["never"],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="coordinator", input="go"))
        await wait_until(lambda: bool(provider.calls("worker")))
        await env.agents.cancel(f"{handle.run_id}/worker.call_1")
        result = await asyncio.wait_for(handle.result(), 30)
        [call_result] = call_results(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "went on without it"
    assert call_result["outcome"] == "cancelled"
    # The call's end says it gave no answer (AG-UI's TOOL_CALL_RESULT showed "ok").
    [ended] = [
        record.event
        for record in env.store.read_events(handle.run_id, limit=1000)
        if record.event["type"] == "tool_completed" and record.run_id == handle.run_id
    ]
    assert ended["error"] == "the called agent's run was cancelled"


async def test_parent_deadline_cancels_children_and_ends_timed_out(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("worker", 1)
    config = team(
        COORDINATOR,
        WORKER,
        coordinator=[calls(agent_call("call_1", "worker", "slow"))],
        worker=["never"],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(entry_agent="coordinator", input="go", limits={"root_timeout": 2})
        result = await asyncio.wait_for(env.agents.run(request), 30)
        tree = await env.agents.list_run_tree(result.run_id)
    assert result.outcome is RunOutcome.TIMED_OUT
    assert tree[1].status in (RunStatus.CANCELLED, RunStatus.TIMED_OUT)
    assert tree[1].finished_at is not None and result.usage.duration_millis < 15_000


async def test_result_contracts(client: Client, task_queue: str, tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    provider = RecordingProvider()
    provider.gate("root", 1)  # the root stays in its model call while trusted calls run
    config = scripted_config(
        {
            "root": ["never"],
            "json_worker": ['{"n": 1}'],
            "bad_worker": ['{"n": "one"}'],
            "text_worker": ["not json"],
        },
        agents=[
            agent("root", callable_agents=["json_worker", "bad_worker", "text_worker"]),
            agent("json_worker"),
            agent("bad_worker"),
            agent("text_worker"),
        ],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="root", input="wait"))
        await asyncio.wait_for(provider.started.wait(), 10)

        async def trusted(call_id: str, target: str, contract: ResultContract) -> AgentCallResult:
            # No output retries: a violation ends the child at once (retries:
            # tests/test_typed_results.py).
            request = AgentCallRequest(
                target=target, task="answer", result_contract=contract, output_retries=0
            )
            return await env.agents.call_agent(handle.run_id, call_id, request)

        auto = await trusted("auto", "json_worker", ResultContract(kind="auto"))
        valid = await trusted("valid", "json_worker", ResultContract(kind="json", schema=schema))
        invalid = await trusted("invalid", "bad_worker", ResultContract(kind="json", schema=schema))
        not_json = await trusted("not_json", "text_worker", ResultContract(kind="json"))
        text = await trusted("text", "json_worker", ResultContract(kind="text"))
        child = await env.agents.get_run(invalid.run_id or "")
        await handle.cancel()
        await handle.result()
    assert auto.output is not None and auto.output.type == "json" and auto.output.value == {"n": 1}
    assert valid.outcome is RunOutcome.COMPLETED
    assert text.output is not None and text.output.type == "text"
    for failed in (invalid, not_json):
        assert failed.outcome is RunOutcome.FAILED
        assert (
            failed.failure is not None and failed.failure.code is FailureCode.INVALID_AGENT_OUTPUT
        )
    assert invalid.failure is not None and "at n" in invalid.failure.message
    assert child.status is RunStatus.FAILED
    assert child.failure is not None and child.failure.code is FailureCode.INVALID_AGENT_OUTPUT


async def test_repeated_agent_call_id_executes_child_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = team(
        agent("root", callable_agents=["worker"]),
        WORKER,
        root=[
            calls(agent_call("same_call", "worker", "work")),
            calls(agent_call("same_call", "worker", "work")),
            "done",
        ],
        worker=["worked once"],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="root", input="start"))
        tree = await env.agents.list_run_tree(result.root_run_id)
        results = call_results(env, result.session_id)
    assert len(tree) == 2
    assert len(provider.requests) == 4
    assert results[0] == results[1]


async def test_trusted_call_idempotency_survives_a_cancelled_waiter(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("root", 1)
    worker_gate = provider.gate("worker", 1)
    config = team(
        agent("root", callable_agents=["worker"]), WORKER, root=["never"], worker=["worked"]
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="root", input="wait"))
        await asyncio.wait_for(provider.started.wait(), 10)
        request = AgentCallRequest(target="worker", task="work")
        first = asyncio.create_task(env.agents.call_agent(handle.run_id, "stable-call", request))
        await wait_until(lambda: bool(provider.calls("worker")))
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        worker_gate.set()
        result = await asyncio.wait_for(
            env.agents.call_agent(handle.run_id, "stable-call", request), 20
        )
        tree = await env.agents.list_run_tree(handle.run_id)
        await handle.cancel()
        await handle.result()
    assert result.output is not None and result.output.value == "worked"
    assert len(provider.requests) == 2
    assert len(tree) == 2


async def test_call_id_idempotency_across_a_worker_restart(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A new worker (cold cache) replays the root: the call-id map is rebuilt from history."""
    first_provider = RecordingProvider()
    first_provider.gate("worker", 1)  # the child hangs on the first worker
    config = team(
        agent("root", callable_agents=["worker"]),
        WORKER,
        root=[
            calls(agent_call("c1", "worker", "work")),
            calls(agent_call("c1", "worker", "work")),
            "done",
        ],
        worker=["worked"],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": first_provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="root", input="go"))
        await wait_until(lambda: bool(first_provider.calls("worker")))
        store = env.store
    second_provider = RecordingProvider()
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": second_provider}, store=store
    ) as env:
        result = await asyncio.wait_for(handle.result(), 60)
        tree = await env.agents.list_run_tree(handle.run_id)
    assert result.text == "done"
    assert len(tree) == 2
    assert [r.agent_id for r in second_provider.requests].count("worker") == 1  # the retry


async def test_events_carry_parent_and_child_lineage(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = team(
        agent("root", callable_agents=["worker"]),
        WORKER,
        root=[calls(agent_call("call_1", "worker", "work")), "done"],
        worker=["worked"],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="root", input="start"))
        events = [e async for e in env.agents.events(result.run_id)]
    assert any(e.run_id == result.run_id for e in events)
    assert any(
        e.parent_run_id == result.run_id and e.agent_id == "worker" and e.depth == 1 for e in events
    )
    kinds = [(e.agent_id, e.event["type"]) for e in events]
    assert ("root", "agent_call_started") in kinds and ("root", "agent_call_completed") in kinds
    sequences = [e.sequence for e in events]
    assert len(set(sequences)) == len(events) == sequences[-1]


TREE_PROCESS = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from otherone.client.agent_client import AgentClient
    from otherone.worker.app import connect

    async def main() -> None:
        agents = AgentClient(await connect(sys.argv[1]))
        records = await agents.list_run_tree(sys.argv[2])
        print(json.dumps([[r.agent_id, r.depth, r.status.value] for r in records]), flush=True)

    if __name__ == "__main__":
        asyncio.run(main())
        os._exit(0)
    """
)


async def test_list_run_tree_from_a_second_process(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = team(
        COORDINATOR,
        WORKER,
        coordinator=[calls(agent_call("call_1", "worker", "w")), "done"],
        worker=["ok"],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="coordinator", input="go"))
    script = tmp_path / "tree.py"
    script.write_text(TREE_PROCESS)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        client.service_client.config.target_host,
        result.run_id,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 60)
    assert json.loads(output) == [["coordinator", 0, "completed"], ["worker", 1, "completed"]]


async def test_a_child_gets_its_own_tools_not_its_callers(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    @tool
    def caller_only() -> str:
        """Only the caller may use this."""
        return "x"

    @tool
    def worker_only() -> str:
        """Only the worker may use this."""
        return "y"

    provider = RecordingProvider()
    config = scripted_config(
        {"boss": [calls(agent_call("c", "worker", "work")), "done"], "worker": ["ok"]},
        agents=[
            agent("boss", callable_agents=["worker"], tools=["caller_only"]),
            agent("worker", tools=["worker_only"]),
        ],
        tools=[caller_only, worker_only],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        await env.agents.run(build_request(entry_agent="boss", input="go"))
    boss_tools = {t["function"]["name"] for t in provider.calls("boss")[0].tools}
    worker_tools = {t["function"]["name"] for t in provider.calls("worker")[0].tools}
    assert boss_tools == {"caller_only", "agent.call"}
    assert worker_tools == {"worker_only"}


async def test_a_tree_fits_limits_sized_exactly_to_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """1 → 8 → 16: 25 runs and 24 agent calls, with max_total_runs=25 and max_agent_calls=24."""
    parallel = {"parallel_tool_calls": True}
    config = scripted_config(
        {
            "root": [
                calls(*(agent_call(f"m{i}", "middle", f"part {i}") for i in range(8))),
                "all parts done",
            ],
            "middle": [
                calls(agent_call("l0", "leaf", "a"), agent_call("l1", "leaf", "b")),
                "middle done",
            ],
            "leaf": ["leaf done"],
        },
        agents=[
            agent("root", callable_agents=["middle"], model_overrides=parallel),
            agent("middle", callable_agents=["leaf"], model_overrides=parallel),
            agent("leaf"),
        ],
        limits=RuntimeLimits(max_total_runs=25, max_agent_calls=24, max_children_per_run=8),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="root", input="go"))
        tree = await env.agents.list_run_tree(result.run_id)
    assert result.text == "all parts done"
    refusals = [
        r["failure"]["message"]
        for record in tree
        for r in call_results(env, record.session_id or "")
        if r.get("failure")
    ]
    assert refusals == []
    assert len(tree) == 25
    assert all(record.status is RunStatus.COMPLETED for record in tree)


async def test_large_results_of_parallel_children_reach_the_caller_by_reference(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """8 x 200 KB child outputs: inline they would make one ~1.7 MB activity input."""
    provider = RecordingProvider()
    config = scripted_config(
        {
            "boss": [
                calls(*(agent_call(f"c{i}", "worker", f"part {i}") for i in range(8))),
                "merged",
            ],
            "worker": ["x" * 200_000],
        },
        agents=[
            agent(
                "boss", callable_agents=["worker"], model_overrides={"parallel_tool_calls": True}
            ),
            WORKER,
        ],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        big_window = {"context_window": 10_000_000}  # no compaction: the model sees every result
        result = await env.agents.run(
            build_request(entry_agent="boss", input="go", session=big_window)
        )
    assert result.text == "merged"
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    biggest_input = max(
        len(event.activity_task_scheduled_event_attributes.input.SerializeToString())
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    )
    assert biggest_input < 64 * 1024
    tool_messages = [m for m in provider.calls("boss")[1].messages if m["role"] == "tool"]
    assert len(tool_messages) == 8 and all(len(m["content"]) > 200_000 for m in tool_messages)
