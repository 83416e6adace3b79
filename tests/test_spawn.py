"""Background agent calls on a real dev server: `agent.spawn`, `agent.await`, `agent.status`,
`agent.cancel`; the end policies; continue-as-new with open handles; a killed worker."""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, RuntimeLimits, RuntimePolicy
from otherone.runs import RunOutcome, RunStatus
from otherone.search_attributes import STATUS
from otherone.store import Store
from otherone.workflows import spawn_limits
from tests import spawn_worker
from tests.harness import AgentEnv, agent_env, scripted_config, wait_until
from tests.processes import worker_module
from tests.providers import RecordingProvider

pytestmark = pytest.mark.timeout(180)

#: A child that takes a while (its model call heartbeats, so a cancellation stops it at once).
SLOW = {"text": "slow result", "delay_seconds": 5}
#: A child that would outlive any test unless it is cancelled.
ENDLESS = {"text": "never", "delay_seconds": 600}


def spawn(call_id: str, target: str = "worker", task: str = "work") -> dict[str, Any]:
    return {"name": "agent.spawn", "id": call_id, "arguments": {"agent": target, "task": task}}


def control(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": f"agent.{name}", "id": call_id, "arguments": arguments}


def calls(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(tool_calls)}


def agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


def boss(**fields: Any) -> AgentDefinition:
    return agent("boss", callable_agents=["worker"], spawn=True, **fields)


def tool_results(env: AgentEnv, session_id: str) -> dict[str, Any]:
    """The boss's spawn tool results by tool call id (JSON)."""
    return {
        entry.tool_call_id: json.loads(entry.content)
        for entry in env.store.load_entries("local", session_id)
        if entry.role == "tool" and (entry.tool_name or "").startswith("agent.")
    }


async def test_spawn_three_then_await_all_while_the_caller_keeps_working(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {
            "boss": [
                calls(spawn("s1", task="one"), spawn("s2", task="two"), spawn("s3", task="three")),
                calls(control("st", "status", handle="s3")),  # the children are still working
                calls(control("aw", "await")),
                "all done",
            ],
            "worker": [SLOW],
        },
        agents=[boss(), agent("worker")],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        tree = await env.agents.list_run_tree(result.run_id)
        results = tool_results(env, result.session_id)
        events = [e.event for e in env.store.read_events(result.run_id, limit=10_000)]

    assert result.outcome is RunOutcome.COMPLETED and result.text == "all done"
    assert result.usage.agent_calls == 3
    children = {f"{result.run_id}/worker.s{index}" for index in (1, 2, 3)}
    assert {r.run_id for r in tree[1:]} == children
    assert all(r.status is RunStatus.COMPLETED and r.agent_call_id for r in tree[1:])
    first = {"handle": "s1", "agent": "worker", "run_id": f"{result.run_id}/worker.s1"}
    assert results["s1"] == first
    assert results["st"]["status"] == "running"
    awaited = results["aw"]
    assert awaited["running"] == [] and len(awaited["results"]) == 3
    assert {r["call_id"] for r in awaited["results"]} == {"s1", "s2", "s3"}
    assert all(r["outcome"] == "completed" for r in awaited["results"])
    assert all(r["output"]["value"] == "slow result" for r in awaited["results"])
    assert awaited["results"][0]["schema_version"] == 1  # structured like agent.call results
    spawned = [e for e in events if e["type"] == "agent_call_started"]
    assert len(spawned) == 3 and all(e.get("spawned") for e in spawned)
    ended = [e for e in events if e["type"] == "agent_call_completed"]
    assert {e["call_id"] for e in ended} == {"s1", "s2", "s3"}
    for call_id in ("s1", "s2", "s3", "st", "aw"):  # every tool call's events pair up
        kinds = [e["type"] for e in events if e.get("tool_call_id") == call_id]
        assert kinds == ["tool_started", "tool_completed"], (call_id, kinds)
    # The tools were offered with agent.call, and the model saw each result as untrusted data.
    offered = [tool["function"]["name"] for tool in provider.calls("boss")[0].tools]
    assert offered == ["agent.call", "agent.spawn", "agent.await", "agent.status", "agent.cancel"]
    last = provider.calls("boss")[-1].messages[-1]
    assert last["role"] == "tool" and last["content"].startswith("Result of an agent call.")


async def test_await_with_a_timeout_then_await_again(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "boss": [
                calls(spawn("s1")),
                calls(control("a1", "await", handles=["s1"], timeout_seconds=1)),
                calls(control("a2", "await", handles=["s1"])),
                calls(control("a3", "status", handle="s1")),
                "done",
            ],
            "worker": [SLOW],
        },
        agents=[boss(), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        results = tool_results(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED
    child = f"{result.run_id}/worker.s1"
    assert results["a1"] == {
        "results": [],
        "running": [{"handle": "s1", "agent": "worker", "run_id": child}],
    }
    [finished] = results["a2"]["results"]
    assert results["a2"]["running"] == [] and finished["outcome"] == "completed"
    assert results["a3"]["status"] == "completed" and results["a3"]["result"] == finished


@pytest.mark.parametrize("on_exit", ["cancel", "wait"])
async def test_a_caller_that_ends_with_running_spawned_children(
    client: Client, task_queue: str, tmp_path: Path, on_exit: str
) -> None:
    child_turn = ENDLESS if on_exit == "cancel" else SLOW
    config = scripted_config(
        {"boss": [calls(spawn("s1")), "done before the child"], "worker": [child_turn]},
        agents=[boss(spawned_on_exit=on_exit), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        # The caller's end came after its child's: no run of the tree is left running.
        [_, child] = await env.agents.list_run_tree(result.run_id)
        description = await client.get_workflow_handle(child.run_id).describe()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done before the child"
    assert description.close_time is not None
    if on_exit == "cancel":
        assert child.status is RunStatus.CANCELLED
    else:
        assert child.status is RunStatus.COMPLETED
        assert child.output is not None and child.output.value == "slow result"


async def test_cancelling_the_caller_cancels_its_spawned_children(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"boss": [calls(spawn("s1"), spawn("s2")), ENDLESS], "worker": [ENDLESS]},
        agents=[boss(spawned_on_exit="wait"), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))

        async def children_running() -> bool:
            tree = await env.agents.list_run_tree(handle.run_id)
            return sum(r.status is RunStatus.RUNNING for r in tree[1:]) == 2

        await wait_until(children_running, within=60, message="two spawned children running")
        await handle.cancel()
        result = await handle.result()
        tree = await env.agents.list_run_tree(handle.run_id)
    assert result.outcome is RunOutcome.CANCELLED
    assert [r.status for r in tree[1:]] == [RunStatus.CANCELLED, RunStatus.CANCELLED]


async def test_agent_cancel_stops_one_spawned_child(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "boss": [
                calls(spawn("s1")),
                calls(control("c", "cancel", handle="s1")),
                calls(control("a", "await")),  # nothing left to report
                "done",
            ],
            "worker": [ENDLESS],
        },
        agents=[boss(), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        results = tool_results(env, result.session_id)
        [_, child] = await env.agents.list_run_tree(result.run_id)
    assert results["c"]["status"] == "cancelled"
    assert results["c"]["result"]["outcome"] == "cancelled"
    assert results["a"] == {"results": [], "running": []}
    assert child.status is RunStatus.CANCELLED and result.outcome is RunOutcome.COMPLETED


async def test_spawn_checks_limits_and_call_ids_like_agent_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "boss": [
                calls(spawn("s1"), spawn("s2"), spawn("s3"), spawn("self", "boss")),
                calls(spawn("s1"), control("bad", "await", handles=["nope"])),
                calls(control("a", "await", handles=["s1", "s2"])),
                "done",
            ],
            "worker": ["ok"],
        },
        agents=[
            agent("boss", callable_agents=["worker", "boss"], spawn=True),
            agent("worker"),
        ],
        limits=RuntimeLimits(max_children_per_run=2),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        results = tool_results(env, result.session_id)
        tree = await env.agents.list_run_tree(result.run_id)
        rows = env.store.load_entries("local", result.session_id)
        events = [e.event for e in env.store.read_events(result.run_id, limit=10_000)]
    assert result.outcome is RunOutcome.COMPLETED
    # s1 again in a later turn: the same handle, no second child.
    assert [r.agent_call_id for r in tree[1:]] == ["s1", "s2"]
    assert results["s1"] == {"handle": "s1", "agent": "worker", "run_id": tree[1].run_id}
    assert results["s3"]["failure"]["code"] == "budget_exceeded"  # max_children_per_run
    assert results["self"]["failure"]["code"] == "agent_call_cycle"
    assert "unknown handle 'nope'" in results["bad"]["error"]
    bad = next(row for row in rows if row.tool_call_id == "bad")
    assert bad.error_kind == "invalid_arguments"
    bad_events = [e["type"] for e in events if e.get("tool_call_id") == "bad"]
    assert bad_events == ["tool_started", "tool_completed"]
    assert [r["call_id"] for r in results["a"]["results"]] == ["s1", "s2"]


async def test_spawn_tools_are_offered_only_by_policy(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {"boss": [calls(spawn("s1")), "done"], "loner": ["hi"]},
        agents=[boss(), agent("worker"), agent("loner", spawn=True)],
        policy=RuntimePolicy(allow_spawn=False),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        await env.agents.run(build_request(entry_agent="loner", input="x"))
        results = tool_results(env, result.session_id)
        tree = await env.agents.list_run_tree(result.run_id)
    assert [t["function"]["name"] for t in provider.calls("boss")[0].tools] == ["agent.call"]
    assert provider.calls("loner")[0].tools == []  # nobody reachable: nothing to spawn
    assert "not available" in results["s1"]["error"] and len(tree) == 1


async def test_continue_as_new_carries_open_handles(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "boss": [
                calls(spawn("s1"), spawn("s2")),
                calls(control("a1", "await", handles=["s1"], timeout_seconds=0)),
                calls(control("a2", "await")),  # in the next history
                "done",
            ],
            "worker": [SLOW],
        },
        agents=[boss(), agent("worker")],
        policy=RuntimePolicy(continue_as_new_after_turns=2),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        results = tool_results(env, result.session_id)
        tree = await env.agents.list_run_tree(result.run_id)
        description = await client.get_workflow_handle(result.run_id).describe()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    assert description.run_id != description.raw_description.workflow_execution_info.first_run_id
    assert [r["handle"] for r in results["a1"]["running"]] == ["s1"]
    assert sorted(r["call_id"] for r in results["a2"]["results"]) == ["s1", "s2"]
    assert all(r["outcome"] == "completed" for r in results["a2"]["results"])
    assert [r.status for r in tree[1:]] == [RunStatus.COMPLETED, RunStatus.COMPLETED]


@pytest.mark.parametrize("killed_in", ["await", "later-turn"])
async def test_sigkill_between_spawn_and_await_runs_each_child_once(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    killed_in: str,
) -> None:
    """The worker dies while the caller waits in agent.await, or while it is on a later turn
    of its own (streaming, before any await): each child is started once, announced once, and
    the caller's model is called once per turn (the turn it was killed in: one more attempt)."""
    monkeypatch.setenv(spawn_worker.VARIANT, killed_in)  # read by the worker processes
    address = temporal_env.client.service_client.config.target_host
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store.open(store_url)
    agents = AgentClient(client, task_queue=task_queue, store=store)
    turns = 4 if killed_in == "later-turn" else 3

    def streaming(run_id: str, child: str) -> bool:
        return any(
            e.run_id == child and e.event["type"] == "model_delta"
            for e in store.read_events(run_id, limit=10_000)
        )

    def caller_streams_turn_2(run_id: str) -> bool:
        return any(
            e.run_id == run_id and e.event["type"] == "model_delta" and e.event.get("turn") == 2
            for e in store.read_events(run_id, limit=10_000)
        )

    async def caller_awaits(run_id: str) -> bool:
        description = await client.get_workflow_handle(run_id).describe()
        return description.typed_search_attributes.get(STATUS) == "waiting_for_child"

    try:
        async with worker_module(
            "tests.spawn_worker", address, task_queue, store_url, tmp_path
        ) as first:
            handle = await agents.start(build_request(entry_agent="spawner", input="go"))
            children = [f"{handle.run_id}/slowchild.s1", f"{handle.run_id}/slowchild.s2"]
            await wait_until(
                lambda: all(streaming(handle.run_id, child) for child in children),
                within=60,
                message="both spawned children streaming",
            )
            if killed_in == "await":
                await wait_until(
                    lambda: caller_awaits(handle.run_id), within=60, message="in agent.await"
                )
            else:
                await wait_until(
                    lambda: caller_streams_turn_2(handle.run_id),
                    within=60,
                    message="the caller streaming its second turn",
                )
            first.send_signal(signal.SIGKILL)
            await first.exit_code()
        async with worker_module("tests.spawn_worker", address, task_queue, store_url, tmp_path):
            result = await handle.result()
            tree = await agents.list_run_tree(handle.run_id)
        entries = store.load_entries("local", result.session_id)
        events = store.read_events(handle.run_id, limit=10_000)
    finally:
        store.close()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "spawner done"
    assert [r.run_id for r in tree[1:]] == children
    assert all(r.status is RunStatus.COMPLETED for r in tree[1:])
    assert [e.tool_call_id for e in entries].count("aw") == 1  # one agent.await, answered
    # Each child's result reaches the caller's model exactly once: in the await's answer, or
    # earlier in an `agent.status` answer when the child had finished by then (after the
    # kill, the retried turns and the children race).
    answers = [json.loads(e.content) for e in entries if e.role == "tool"]
    delivered = [r for body in answers for r in body.get("results", [])]
    delivered += [body["result"] for body in answers if "result" in body]
    assert sorted(r["call_id"] for r in delivered) == ["s1", "s2"], answers
    assert all(r["outcome"] == "completed" for r in delivered)
    started = [e.event for e in events if e.event["type"] == "agent_call_started"]
    assert sorted(e["call_id"] for e in started) == ["s1", "s2"]
    assert result.usage.model_calls == turns
    attempts = [
        (e.event["turn"], e.event["attempt"])
        for e in events
        if e.run_id == handle.run_id and e.event["type"] == "model_started"
    ]
    expected = [(turn, 1) for turn in range(1, turns + 1)]
    if killed_in == "later-turn":
        expected.insert(2, (2, 2))  # the turn the worker died in, called again
    assert attempts == expected


async def test_a_spawned_childs_deadline_is_its_callers(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"boss": [calls(spawn("s1")), "done"], "worker": [ENDLESS]},
        agents=[boss(spawned_on_exit="wait"), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        request = build_request(entry_agent="boss", input="go", limits={"root_timeout": 3})
        result = await env.agents.run(request)  # waits for its child, which runs out of time
        [_, child] = await env.agents.list_run_tree(result.run_id)
    assert result.outcome is RunOutcome.COMPLETED
    assert child.status is RunStatus.TIMED_OUT
    assert child.finished_at is not None and child.started_at is not None
    assert (child.finished_at - child.started_at).total_seconds() < 10


async def test_agent_call_approval_rules_apply_to_spawn(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"boss": [calls(spawn("s1")), "done"], "worker": ["ok"]},
        agents=[boss(approval={"agent.call:worker": "always"}), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))

        async def waiting() -> bool:
            return bool(await env.agents.pending_approvals(handle.run_id))

        await wait_until(waiting, within=30, message="the spawn waiting for approval")
        await env.agents.deny(handle.run_id, "s1", "not now")
        result = await handle.result()
        tree = await env.agents.list_run_tree(handle.run_id)
        results = tool_results(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED and len(tree) == 1
    assert results["s1"]["status"] == "denied"


async def test_cancelling_a_caller_that_waits_for_its_spawned_children_stops_them(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"boss": [calls(spawn("s1")), "my answer"], "worker": [ENDLESS]},
        agents=[boss(spawned_on_exit="wait"), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))

        async def waiting_for_child() -> bool:
            description = await client.get_workflow_handle(handle.run_id).describe()
            status = description.typed_search_attributes.get(STATUS)
            return status == RunStatus.WAITING_FOR_CHILD.value

        await wait_until(waiting_for_child, within=60, message="the answer, then the wait")
        await handle.cancel()
        result = await handle.result()
        [_, child] = await env.agents.list_run_tree(handle.run_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "my answer"
    assert child.status is RunStatus.CANCELLED


async def test_a_carried_spawned_child_is_cancelled_when_the_next_history_ends(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "boss": [calls(spawn("s1")), calls(control("st", "status", handle="s1")), "done"],
            "worker": [ENDLESS],
        },
        agents=[boss(), agent("worker")],
        policy=RuntimePolicy(continue_as_new_after_turns=2),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        [_, child] = await env.agents.list_run_tree(result.run_id)
        description = await client.get_workflow_handle(result.run_id).describe()
    assert description.run_id != description.raw_description.workflow_execution_info.first_run_id
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    assert child.status is RunStatus.CANCELLED  # cancelled by workflow id, from the new history


async def test_results_too_large_together_are_held_back_for_the_next_await(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The limit keeps one await's answer under Temporal's payload limit; small here.
    monkeypatch.setattr(spawn_limits, "AWAIT_RESULT_BYTES", 900)
    config = scripted_config(
        {
            "boss": [
                calls(spawn("s1"), spawn("s2"), spawn("s3")),
                calls(control("a1", "await")),
                calls(control("a2", "await")),
                "done",
            ],
            "worker": ["x" * 400],
        },
        agents=[boss(), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        results = tool_results(env, result.session_id)
    first, second = results["a1"], results["a2"]
    assert [r["call_id"] for r in first["results"]] == ["s1"]
    assert first["held_back"] == ["s2", "s3"] and first["running"] == []
    assert [r["call_id"] for r in second["results"]] == ["s2"]
    assert second["held_back"] == ["s3"]


async def boss_waits_in_a_later_history(client: Client, run_id: str) -> bool:
    description = await client.get_workflow_handle(run_id).describe()
    first = description.raw_description.workflow_execution_info.first_run_id
    status = description.typed_search_attributes.get(STATUS)
    return description.run_id != first and status == RunStatus.WAITING_FOR_CHILD.value


async def test_await_reports_a_carried_child_terminated_from_outside(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After continue-as-new no child handle reports the child's end, and a terminated child
    sends no signal: the await asks Temporal (at once, then every CARRIED_POLL)."""
    monkeypatch.setattr(spawn_limits, "CARRIED_POLL", timedelta(seconds=2))
    config = scripted_config(
        {
            "boss": [
                calls(spawn("s1")),
                calls(control("st", "status", handle="s1")),
                calls(control("a1", "await")),  # in the next history, with no timeout
                "done",
            ],
            "worker": [ENDLESS],
        },
        agents=[boss(), agent("worker")],
        policy=RuntimePolicy(continue_as_new_after_turns=2),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))
        await wait_until(
            lambda: boss_waits_in_a_later_history(client, handle.run_id),
            within=60,
            message="the boss awaits its carried child",
        )
        await client.get_workflow_handle(f"{handle.run_id}/worker.s1").terminate("by hand")
        result = await asyncio.wait_for(handle.result(), timeout=60)
        results = tool_results(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    [reported] = results["a1"]["results"]
    assert reported["call_id"] == "s1" and reported["outcome"] == "failed"
    assert reported["failure"]["code"] == "internal_error"
    assert "ended outside the runtime: terminated" in reported["failure"]["message"]
    assert results["a1"]["running"] == []


def carried_child_config(*later: Any) -> RuntimeConfig:
    """The boss spawns `s1` (an endless worker), asks its status, then plays ``later`` in its
    next history (it continues as new after 2 turns): `s1` is a carried child there."""
    return scripted_config(
        {
            "boss": [calls(spawn("s1")), calls(control("st", "status", handle="s1")), *later],
            "worker": [ENDLESS],
        },
        agents=[boss(), agent("worker")],
        policy=RuntimePolicy(continue_as_new_after_turns=2),
    )


async def boss_in_its_next_history(provider: RecordingProvider) -> None:
    await wait_until(
        lambda: any(r.turn == 3 for r in provider.calls("boss")),
        within=60,
        message="the boss's third turn, in its next history",
    )


async def test_status_reports_a_carried_child_terminated_from_outside(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`agent.status` of a child started in an earlier history asks Temporal: a terminated
    child sent no signal, yet the status says it ended (not "running")."""
    provider = RecordingProvider()
    release = provider.gate("boss", 3)
    config = carried_child_config(
        calls(control("st2", "status", handle="s1")),  # in the next history
        "done",
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))
        await boss_in_its_next_history(provider)
        await client.get_workflow_handle(f"{handle.run_id}/worker.s1").terminate("by hand")
        release.set()
        result = await asyncio.wait_for(handle.result(), timeout=60)
        results = tool_results(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    assert results["st"]["status"] == "running"
    assert results["st2"]["status"] == "failed", results["st2"]
    assert "ended outside the runtime: terminated" in results["st2"]["result"]["failure"]["message"]


async def test_a_run_ends_at_once_when_its_carried_child_was_terminated(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end-of-run cancel of a terminated child "succeeds" (Temporal delivers a cancel
    request to a closed workflow): the run asks Temporal instead of waiting out the grace."""
    monkeypatch.setattr(spawn_limits, "SPAWN_CANCEL_GRACE", timedelta(minutes=10))
    provider = RecordingProvider()
    release = provider.gate("boss", 3)
    config = carried_child_config("done")
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))
        await boss_in_its_next_history(provider)
        child = client.get_workflow_handle(f"{handle.run_id}/worker.s1")
        await child.terminate("by hand")
        release.set()
        result = await asyncio.wait_for(handle.result(), timeout=60)  # not the 10 min grace
        [_, record] = await env.agents.list_run_tree(handle.run_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    assert (await child.describe()).status == WorkflowExecutionStatus.TERMINATED
    assert record.run_id == child.id


async def test_await_gives_the_model_a_large_output_as_agent_call_does(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """An output above `inline_payload_bytes` travels through history as an artifact
    reference; the model reads the text the child stored, as for `agent.call`."""
    text = "tide tables" * 300  # 3,300 bytes, above the 1 KiB inline limit
    provider = RecordingProvider()
    config = scripted_config(
        {
            "boss": [
                calls(spawn("s1"), spawn("s2")),
                calls(control("a1", "await", handles=["s1", "s2"])),
                calls(control("st", "status", handle="s2")),  # ended: its result again
                "done",
            ],
            "worker": [text],
        },
        agents=[boss(), agent("worker")],
        policy=RuntimePolicy(inline_payload_bytes=1024),
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        results = tool_results(env, result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    awaited = results["a1"]["results"]
    assert [r["call_id"] for r in awaited] == ["s1", "s2"]
    # The value, as an agent.call result has it (with the artifact it is also stored as).
    assert all(r["outcome"] == "completed" and r["output"]["value"] == text for r in awaited)
    status = results["st"]
    assert status["status"] == "completed" and status["result"]["output"]["value"] == text
    # ... and so does the model, in its next turns.
    seen = [str(m.get("content")) for m in provider.calls("boss")[-1].messages]
    assert sum(content.count(text) for content in seen) == 3


async def test_a_child_terminated_while_awaited_and_a_cancelled_await_end_once_each(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Every start has one end (found by a user): a spawned child terminated from outside ran
    no finish, so its caller stores its `agent_call_completed`; and an `agent.await` the run
    is cancelled in has one `tool_started` and one `tool_completed` (it had two starts)."""
    config = scripted_config(
        {
            "boss": [
                calls(spawn("s1"), spawn("s2")),
                calls(control("w1", "await", handles=["s1"])),
                calls(control("w2", "await")),
                "never",
            ],
            "worker": [ENDLESS],
        },
        agents=[boss(), agent("worker")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))

        def stored(kind: str, call_id: str) -> bool:
            return any(
                r.event["type"] == kind
                and r.event.get("tool_call_id", r.event.get("call_id")) == call_id
                for r in env.store.read_events(handle.run_id)
            )

        async def awaiting() -> bool:
            record = await env.agents.get_run(handle.run_id)
            return record.status is RunStatus.WAITING_FOR_CHILD

        await wait_until(awaiting, within=60, message="w1 awaits")
        await client.get_workflow_handle(f"{handle.run_id}/worker.s1").terminate("by hand")
        # w1's end is stored by the next model call, which asks for w2.
        await wait_until(lambda: stored("tool_completed", "w1"), within=60, message="w1 ended")
        await wait_until(awaiting, within=60, message="w2 awaits")
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), timeout=60)
        events = [
            r.event for r in env.store.read_events(handle.run_id) if r.run_id == result.run_id
        ]
    assert result.outcome is RunOutcome.CANCELLED
    ends = Counter(
        (e["type"], e.get("tool_call_id") or e.get("call_id"))
        for e in events
        if e["type"] in ("tool_started", "tool_completed", "agent_call_completed")
    )
    assert ends[("agent_call_completed", "s1")] == ends[("agent_call_completed", "s2")] == 1
    for call_id in ("w1", "w2"):
        assert ends[("tool_started", call_id)] == ends[("tool_completed", call_id)] == 1, ends
    (s1_end,) = [e for e in events if e["type"] == "agent_call_completed" and e["call_id"] == "s1"]
    assert s1_end["outcome"] == "failed" and s1_end["code"] == "internal_error"
