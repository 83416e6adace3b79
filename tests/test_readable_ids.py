"""Readable workflow ids (issue 16): roots show their key, children their agent and call id.

The root's id stays a pure function of (partition, key), so the idempotency rules hold as
before; a key whose run an earlier version started (under ``run-`` + 40 hex digits) joins that
run. Children's ids changed behind the `readable-child-ids` patch, and children carry Web UI
details like roots.
"""

from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError

from otherone.client.agent_client import (
    AgentClient,
    build_request,
    legacy_root_run_id,
    root_run_id,
)
from otherone.client.console import EventPrinter
from otherone.client.watch import WatchState
from otherone.client.watch_state import REFUSED
from otherone.contracts import (
    MEMO_FINGERPRINT,
    MEMO_IDEMPOTENCY_KEY,
    WORKFLOW_NAME,
    RunInput,
    child_run_id,
)
from otherone.errors import IdempotencyConflictError
from otherone.runs import AgentRunResult, RunOutcome
from otherone.search_attributes import SESSION_ID
from tests.harness import agent_env, scripted_config
from tests.providers import RecordingProvider
from tests.test_agent_calls import COORDINATOR, WORKER, agent_call, calls, team
from tests.test_watch import Events

pytestmark = pytest.mark.timeout(120)

READABLE = re.compile(r"[A-Za-z0-9_.-]+")


def keyed(key: str, agent: str = "assistant", partition: str = "local", text: str = "hi") -> str:
    return root_run_id(
        build_request(
            entry_agent=agent,
            input=text,
            idempotency_key=key,
            runtime_context={"partition_key": partition},
        )
    )


def sha(partition: str, key: str) -> str:
    return hashlib.sha256(f"{partition}\x00{key}".encode()).hexdigest()


# --------------------------------------------------------------------------- the formulas


def test_a_keyed_root_id_is_the_readable_key_and_a_short_hash_of_partition_and_key() -> None:
    assert keyed("invoice-42") == f"invoice-42-{sha('local', 'invoice-42')[:16]}"
    # Characters a shell, a URL or a child's id ("/") would trip on become one "-".
    assert keyed("Order #42 / tenant: ACME") == (
        f"Order-42-tenant-ACME-{sha('local', 'Order #42 / tenant: ACME')[:16]}"
    )
    # Only (partition, key) decide: the agent and the input are the request, not the id.
    assert keyed("k", agent="writer", text="other") == keyed("k")
    assert keyed("k", partition="tenant-b") != keyed("k")
    # Keys that read alike stay apart by their hash.
    assert keyed("a b") != keyed("a/b") and keyed("a b").startswith("a-b-")
    # Nothing readable: "key-"; a long key is cut (the hash still covers all of it).
    assert keyed("日本語") == f"key-{sha('local', '日本語')[:16]}"
    long = keyed("x" * 200)
    assert long == f"{'x' * 48}-{sha('local', 'x' * 200)[:16]}"
    for key in ("invoice-42", "Order #42 / tenant: ACME", "日本語", "..--", "x" * 200, "a\x00b"):
        assert READABLE.fullmatch(keyed(key)), key


def test_a_root_without_a_key_is_named_after_its_agent() -> None:
    request = build_request(entry_agent="researcher", input="hi")
    first, second = root_run_id(request), root_run_id(request)
    assert re.fullmatch(r"researcher-[0-9a-f]{20}", first) and first != second
    assert legacy_root_run_id(request) is None


def test_the_legacy_root_id_is_the_formula_before_readable_ids() -> None:
    request = build_request(entry_agent="assistant", input="hi", idempotency_key="invoice-42")
    assert legacy_root_run_id(request) == f"run-{sha('local', 'invoice-42')[:40]}"
    assert legacy_root_run_id(request) != root_run_id(request)


def test_a_child_id_names_the_target_and_the_call_and_is_unique_per_caller() -> None:
    root = "invoice-42-0123456789abcdef"
    assert child_run_id(root, root, "call_1", "worker") == f"{root}/worker.call_1"
    nested = child_run_id(root, f"{root}/worker.call_1", "c2", "helper")
    assert nested == f"{root}/worker.call_1/helper.c2"
    # "." is in neither agent ids nor kept call ids: ("a-b", "c") and ("a", "b-c") differ.
    assert child_run_id(root, root, "c", "a-b") != child_run_id(root, root, "b-c", "a")
    # A call id with other characters is hashed (per caller), the agent stays readable.
    odd = child_run_id(root, root, "call 1/2", "worker")
    assert re.fullmatch(rf"{root}/worker\.h[0-9a-f]{{24}}", odd)
    assert odd != child_run_id(root, f"{root}/worker.call_1", "call 1/2", "worker")
    # Too deep a tree: under the root, still with the agent.
    deep = "/".join([root, *["worker.call_" + "x" * 50] * 4])
    short = child_run_id(root, deep, "call_9", "writer")
    assert short.startswith(f"{root}/writer.h") and len(short) <= 255
    # Without a target: the formula runs on the old path (and old events) still use.
    assert child_run_id(root, root, "call_1") == f"{root}/call_1"


# --------------------------------------------------------------------------- viewers


def _refused_and_started_events(root: str) -> Events:
    """A caller whose events name each child (``child_run_id``); the refusal does not."""
    ok, refused = f"{root}/writer.call_w", f"{root}/secret.call_s"
    events = Events(root)
    events.add(root, "boss", type="run_started")
    for call_id, target, child in (("call_w", "writer", ok), ("call_s", "secret", refused)):
        events.add(
            root,
            "boss",
            type="agent_call_started",
            call_id=call_id,
            target=target,
            child_run_id=child,
        )
    events.add(
        root,
        "boss",
        type="agent_call_completed",
        call_id="call_s",
        target="secret",
        outcome="failed",
        code="budget_exceeded",
    )
    events.add(ok, "writer", type="run_started")
    events.add(ok, "writer", type="run_completed", duration_millis=1500)
    return events


def test_watch_follows_the_child_ids_events_announce() -> None:
    root = "invoice-42-0123456789abcdef"
    state = WatchState(root)
    for record in _refused_and_started_events(root).records:
        state.apply(record)
    assert set(state.runs) == {root, f"{root}/writer.call_w", f"{root}/secret.call_s"}
    assert state.runs[f"{root}/writer.call_w"].status == "completed"
    refused = state.runs[f"{root}/secret.call_s"]
    assert refused.status == REFUSED and refused.failure == "budget_exceeded"


def test_the_live_printer_pairs_announced_children_with_their_ends() -> None:
    root = "invoice-42-0123456789abcdef"
    err = io.StringIO()
    printer = EventPrinter(root, io.StringIO(), Console(file=err, color_system=None, width=200))
    for record in _refused_and_started_events(root).records:
        printer.handle(record)
    lines = err.getvalue().splitlines()
    assert "↳ secret failed (call_s, 0.10 s): budget_exceeded" in lines, lines
    assert "↳ writer completed (call_w, 1.50 s)" in lines, lines


# --------------------------------------------------------------------------- real server


async def _started_by_the_previous_version(
    client: Client, task_queue: str, request_fields: dict[str, object]
) -> str:
    """What `AgentClient.start` did before readable ids: the same start under ``run-<sha>``."""
    request = build_request(**request_fields)
    legacy = legacy_root_run_id(request)
    assert legacy is not None
    await client.start_workflow(
        WORKFLOW_NAME,
        RunInput(run_id=legacy, root_run_id=legacy, request=request),
        id=legacy,
        task_queue=task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        memo={
            MEMO_FINGERPRINT: request.fingerprint(),
            MEMO_IDEMPOTENCY_KEY: request.idempotency_key,
        },
    )
    return legacy


async def _exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return True


async def test_a_key_whose_run_the_previous_version_started_joins_that_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config({"agent": ["once"]})
    fields: dict[str, object] = {
        "entry_agent": "agent",
        "input": "hello",
        "idempotency_key": f"legacy {task_queue}",
    }
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        legacy = await _started_by_the_previous_version(client, task_queue, fields)
        first = await client.get_workflow_handle(legacy, result_type=AgentRunResult).result()
        again = await env.agents.run(build_request(**fields))  # after it ended
        with pytest.raises(IdempotencyConflictError) as conflict:
            await env.agents.start(build_request(**{**fields, "input": "something else"}))
    assert first.text == again.text == "once" and again.run_id == legacy
    assert len(provider.calls()) == 1  # one run, not a second one under the new id
    assert not await _exists(client, root_run_id(build_request(**fields)))
    assert legacy in str(conflict.value)


async def test_a_key_running_under_the_old_id_is_joined_while_it_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["once"]})
    fields: dict[str, object] = {
        "entry_agent": "agent",
        "input": "hello",
        "idempotency_key": f"legacy-running {task_queue}",
    }
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        legacy = await _started_by_the_previous_version(client, task_queue, fields)
        joined = await env.agents.start(build_request(**fields))
        gate.set()
        result = await joined.result()
        # With the transition over, a client without the lookup uses the new id alone.
        fresh = AgentClient(client, task_queue=task_queue, legacy_run_ids=False)
        new = await fresh.start(build_request(**fields))
    assert joined.run_id == legacy and result.text == "once"
    assert new.run_id == root_run_id(build_request(**fields)) != legacy


async def test_the_same_key_for_another_agent_is_a_conflict(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The agent is not in a keyed id, so Temporal still sees the reused key."""
    config = scripted_config({"agent": ["first"], "other": ["never"]})
    key = f"Invoice #42 {task_queue}"
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(
            build_request(entry_agent="agent", input="x", idempotency_key=key)
        )
        with pytest.raises(IdempotencyConflictError):
            await env.agents.start(
                build_request(entry_agent="other", input="x", idempotency_key=key)
            )
        description = await env.agents.describe_run(result.run_id)
    assert result.run_id.startswith("Invoice-42-") and result.text == "first"
    assert await description.static_summary() == "agent: x"


async def test_a_new_session_is_named_by_the_start_not_by_an_upsert(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A request naming no session gets a new one from the client: the start carries its
    `OtheroneSessionId` (listable at once), the Web UI details show it, and the run's history
    has no search-attribute upsert for it."""
    config = scripted_config({"agent": ["once"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        first = await env.agents.run(build_request(entry_agent="agent", input="x"))
        handle = client.get_workflow_handle(first.run_id)
        description = await handle.describe()
        history = await handle.fetch_history()
        again = await env.agents.run(
            build_request(entry_agent="agent", input="y", session={"session_id": first.session_id})
        )
    session = description.typed_search_attributes.get(SESSION_ID)
    assert first.outcome is RunOutcome.COMPLETED and first.session_id == session
    assert session is not None and re.fullmatch(r"session-[0-9a-f-]{36}", session)
    assert f"**session** `{session}`" in (await description.static_details() or "")
    started = history.events[0].workflow_execution_started_event_attributes
    assert SESSION_ID.name in started.search_attributes.indexed_fields
    upserts = [
        event.upsert_workflow_search_attributes_event_attributes.search_attributes
        for event in history.events
        if event.HasField("upsert_workflow_search_attributes_event_attributes")
    ]
    upserted = [name for upsert in upserts for name in upsert.indexed_fields]
    assert SESSION_ID.name not in upserted
    # A real session: the next run that names it continues its transcript.
    assert again.session_id == session and again.outcome is RunOutcome.COMPLETED
    assert [entry.content for entry in env.store.load_entries("local", session)] == [
        "x",
        "once",
        "y",
        "once",
    ]


async def test_a_child_has_a_readable_id_and_web_ui_details(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = team(
        COORDINATOR,
        WORKER,
        coordinator=[calls(agent_call("call_1", "worker", "do work")), "final answer"],
        worker=["worker result"],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        request = build_request(
            entry_agent="coordinator", input="start", idempotency_key=f"team {task_queue}"
        )
        result = await env.agents.run(request)
        child = f"{result.run_id}/worker.call_1"
        description = await client.get_workflow_handle(child).describe()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "final answer"
    assert description.parent_id == result.run_id
    details = await description.static_details()
    assert details is not None
    lines = details.split("  \n")
    assert lines[0] == "**agent** `worker` (version 1)"
    assert lines[1].startswith("**model** `") and "scripted/" in lines[1]
    assert lines[2] == "**tools** none"
    assert lines[3].startswith("**limits** max_iterations ") and "depth 1 of " in lines[3]
    assert lines[4] == (f"**called by** `coordinator` (run `{result.run_id}`, call `call_1`)")
    assert f"**root run** `{result.run_id}`" in lines
    assert await description.static_summary() == "worker ← coordinator: do work"


def test_the_contract_docs_formula_and_example_ids_are_ours() -> None:
    """docs/workflow-contract.md shows the formula for plain clients: it must stay ours."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "workflow-contract.md").read_text()
    start = doc.index("def run_id_for(")
    namespace: dict[str, object] = {"hashlib": hashlib, "re": re}
    exec(doc[start : doc.index("\n\n\n", start)], namespace)
    run_id_for = namespace["run_id_for"]
    assert callable(run_id_for)
    for key in ("invoice-42", "Order #42 / ACME", "日本語", "x" * 200, "-.a-"):
        for partition in ("local", "tenant-b"):
            assert run_id_for(key, partition) == keyed(key, partition=partition), key
    assert keyed("invoice-42") == "invoice-42-fdd007dd5854fe22"
    assert "invoice-42-fdd007dd5854fe22" in doc
