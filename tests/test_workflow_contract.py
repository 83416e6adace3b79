"""The published workflow contract (docs/workflow-contract.md): its JSON Schemas match the
models, and a run started by a plain Temporal client is a first-class run.

The document's `temporal` CLI and Python examples are executed by tests/test_readme.py (they
are marked runnable); these tests check what the examples cannot show by themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.workflow import _Definition as WorkflowDefinition

from otherone.activities.providers.base import ModelRequest, StreamEvent
from otherone.client.agent_client import AgentClient, build_request
from otherone.contract_schemas import SCHEMA_DIR, SCHEMAS, schema_text, stale
from otherone.contracts import SIGNAL_USER_MESSAGES, WORKFLOW_NAME
from otherone.errors import RunNotFoundError
from otherone.examples import EXAMPLE_CONFIG
from otherone.runs import AgentRunResult, RunOutcome, RunStatus
from otherone.toml_config import load_config
from otherone.workflows import AgentRunWorkflow
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider


def workflow_definition(cls: type) -> WorkflowDefinition:
    return WorkflowDefinition.must_from_class(cls)


REPO = Path(__file__).resolve().parents[1]


def test_the_checked_in_schemas_match_the_models() -> None:
    assert stale() == [], "run: python -m otherone.contract_schemas"
    for name, model in SCHEMAS.items():
        schema = json.loads((SCHEMA_DIR / name).read_text())
        assert schema["title"] == model.__name__
        assert json.loads(schema_text(model)) == schema


def test_the_check_command_fails_on_a_stale_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "otherone.contract_schemas", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "run-input.schema.json").write_text("{}\n")
    assert "run-input.schema.json" in stale(tmp_path)


def test_every_schema_is_linked_from_the_contract() -> None:
    document = (REPO / "docs" / "workflow-contract.md").read_text()
    for name in SCHEMAS:
        assert f"schemas/{name}" in document, name


# --------------------------------------------------------------------------- plain clients


def _raw_input(run_id: str, agent: str = "clerk", **extra: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "root_run_id": run_id,
        "request": {"entry_agent": agent, "input": "Add 2 and 3.", **extra},
    }


async def test_a_run_started_by_a_plain_client_describes_itself(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """No search attributes at the start: the run sets them, so it is listed by agent and
    status, a tenant's scoped client sees it, and another's does not."""
    run_id = f"run-plain-{uuid.uuid4().hex[:8]}"
    config = load_config(EXAMPLE_CONFIG)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            _raw_input(
                run_id,
                runtime_context={"partition_key": "acme"},
                session={"session_id": f"{run_id}-talk"},
            ),
            id=run_id,
            task_queue=task_queue,
        )
        await _waiting(env.agents, run_id)
        listed = f'WorkflowId = "{run_id}" AND OtheroneAgentId = "clerk"'
        query = f'{listed} AND OtheronePartition = "acme" AND OtheroneDepth = 0'
        query += f' AND OtheroneSessionId = "{run_id}-talk"'  # the session it names, too
        await wait_until(lambda: _count(client, query, 1), message="the run listed")
        scoped = AgentClient(client, task_queue=task_queue, partition_key="acme")
        await scoped.check_visible(run_id)
        with pytest.raises(RunNotFoundError):
            await AgentClient(client, task_queue=task_queue, partition_key="globex").check_visible(
                run_id
            )
        await env.agents.approve(run_id, "call_sum")
        result = await handle.result()
    assert result["outcome"] == "completed"


async def test_input_whose_run_id_is_not_the_workflow_id_is_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    run_id = f"run-ids-{uuid.uuid4().hex[:8]}"
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path):
        wrong = await client.execute_workflow(
            WORKFLOW_NAME, _raw_input("run-elsewhere"), id=run_id, task_queue=task_queue
        )
        root = {**_raw_input(f"{run_id}-2"), "root_run_id": "run-other-root"}
        not_own_root = await client.execute_workflow(
            WORKFLOW_NAME, root, id=f"{run_id}-2", task_queue=task_queue
        )
        # Listed by status like any failed run (a user found refused runs under no status).
        empty = await client.execute_workflow(
            WORKFLOW_NAME, {}, id=f"{run_id}-3", task_queue=task_queue
        )
        # A root (root_run_id = run_id) names no parent and is at depth 0 (a user's ran).
        deep = await client.execute_workflow(
            WORKFLOW_NAME,
            {**_raw_input(f"{run_id}-4"), "depth": 5},
            id=f"{run_id}-4",
            task_queue=task_queue,
        )
        adopted = await client.execute_workflow(
            WORKFLOW_NAME,
            {**_raw_input(f"{run_id}-5"), "parent_run_id": "someone"},
            id=f"{run_id}-5",
            task_queue=task_queue,
        )
        # `temporal workflow start` without --input: its workflow tasks failed for ever.
        none = await client.execute_workflow(WORKFLOW_NAME, id=f"{run_id}-6", task_queue=task_queue)
        # `temporal workflow start --input A --input B`: two arguments (it failed for ever too).
        two = await client.execute_workflow(
            WORKFLOW_NAME,
            args=[_raw_input(f"{run_id}-7"), {"extra": True}],
            id=f"{run_id}-7",
            task_queue=task_queue,
        )
        for refused_id in (run_id, f"{run_id}-2", f"{run_id}-3", f"{run_id}-4"):
            query = f'WorkflowId = "{refused_id}" AND OtheroneStatus = "failed"'
            await wait_until(lambda q=query: _count(client, q, 1), message=refused_id)
    for result, wrong_field in ((wrong, "run_id"), (not_own_root, "root_run_id")):
        assert result["outcome"] == "failed", result
        assert result["failure"]["code"] == "invalid_request"
        assert f"{wrong_field}: " in result["failure"]["message"]
    assert empty["failure"]["code"] == "invalid_request"
    assert "depth: a root run" in deep["failure"]["message"]
    assert "parent_run_id: a root run" in adopted["failure"]["message"]
    assert none["outcome"] == "failed" and "none was given" in none["failure"]["message"]
    assert two["failure"]["code"] == "invalid_request"
    assert "2 inputs were given" in two["failure"]["message"]


async def test_a_second_execution_of_an_ended_runs_id_is_refused_and_writes_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Temporal's default reuse policy lets a closed workflow id start again. A run id is
    used once (its record, events and transcript are the ended run's): the new execution is
    refused, writes nothing, and says so (a user found it ran the whole turn again, wrote a
    second transcript, then returned the old run's outcome)."""
    run_id = f"run-reused-{uuid.uuid4().hex[:8]}"
    config = scripted_config({"assistant": ["first answer", "second answer"]})
    raw = _raw_input(run_id, agent="assistant")
    async with agent_env(client, task_queue, config, tmp_path) as env:
        first = await client.execute_workflow(WORKFLOW_NAME, raw, id=run_id, task_queue=task_queue)
        stored = env.store.read_events(run_id, limit=1000)
        again = await client.execute_workflow(WORKFLOW_NAME, raw, id=run_id, task_queue=task_queue)
        record = env.store.get_run_record("local", run_id)
        entries = env.store.load_entries("local", first["session_id"])
        after = env.store.read_events(run_id, limit=1000)
        query = f'WorkflowId = "{run_id}" AND OtheroneStatus = "failed"'
        await wait_until(lambda: _count(client, query, 1), message="the refusal listed")
        # Readers report the run, not the refusal its id's latest execution is.
        shown = await env.agents.get_run(run_id)
        result = await env.agents.result(run_id)
        # And its key still names it (the later execution has no idempotency memo).
        keyed = build_request(entry_agent="assistant", input="x", idempotency_key=run_id)
        keyed_run = (await env.agents.start(keyed)).run_id
        await env.agents.result(keyed_run)
        raw_again = _raw_input(keyed_run, agent="assistant")
        await client.execute_workflow(WORKFLOW_NAME, raw_again, id=keyed_run, task_queue=task_queue)
        assert (await env.agents.start(keyed)).run_id == keyed_run  # not idempotency_conflict
    assert (shown.status.value, result.text) == ("completed", "first answer")
    assert first["outcome"] == "completed" and first["output"]["value"] == "first answer"
    assert again["outcome"] == "failed" and again["failure"]["code"] == "invalid_request"
    assert (
        "has already run and ended (completed, Temporal execution " in again["failure"]["message"]
    )
    assert record is not None and record.status.value == "completed"
    assert [entry.content for entry in entries] == ["Add 2 and 3.", "first answer"]
    assert after == stored


async def test_a_run_terminated_from_outside_is_shown_as_what_it_was(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """No result of ours: the record comes from the store and the run's search attributes,
    with the end Temporal reports (a user saw an empty agent, no session and the run as its
    own root)."""
    run_id = f"run-terminated-{uuid.uuid4().hex[:8]}"
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path) as env:
        await client.start_workflow(
            WORKFLOW_NAME, _raw_input(run_id), id=run_id, task_queue=task_queue
        )
        await _waiting(env.agents, run_id)
        await client.get_workflow_handle(run_id).terminate("by hand")
        record = await env.agents.get_run(run_id)
    assert record.status is RunStatus.FAILED and record.agent_id == "clerk"
    assert record.root_run_id == run_id and record.session_id
    assert record.failure is not None and "terminated" in record.failure.message


async def test_a_session_whose_run_was_terminated_is_free_again(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run terminated from outside never gives its session's lease back: the session was
    busy until the lease expired (a user found it refused for minutes). A holder Temporal
    reports ended holds nothing: the next run takes the session, whether started by
    `AgentClient` (which checks first) or by a plain client (the run's prepare checks)."""
    session = {"session_id": f"chat-{uuid.uuid4().hex[:8]}"}
    config = load_config(EXAMPLE_CONFIG)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        held = f"run-held-{uuid.uuid4().hex[:8]}"
        for attempt, start in enumerate(("agent_client", "plain_client")):
            await client.start_workflow(
                WORKFLOW_NAME,
                _raw_input(f"{held}-{attempt}", session=session),
                id=f"{held}-{attempt}",
                task_queue=task_queue,
            )
            await _waiting(env.agents, f"{held}-{attempt}")
            await client.get_workflow_handle(f"{held}-{attempt}").terminate("by hand")
            request = {"entry_agent": "assistant", "input": "weather?", "session": session}
            if start == "agent_client":
                result = await env.agents.run(build_request(**request))
                assert result.outcome is RunOutcome.COMPLETED, result.failure
            else:
                next_id = f"run-next-{uuid.uuid4().hex[:8]}"
                raw = {"run_id": next_id, "root_run_id": next_id, "request": request}
                done = await client.execute_workflow(
                    WORKFLOW_NAME, raw, id=next_id, task_queue=task_queue
                )
                assert done["outcome"] == "completed", done


async def test_a_malformed_signal_is_refused_visibly_and_the_run_goes_on(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_id = f"run-signal-{uuid.uuid4().hex[:8]}"
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path) as env:
        handle = await client.start_workflow(
            WORKFLOW_NAME, _raw_input(run_id), id=run_id, task_queue=task_queue
        )
        await _waiting(env.agents, run_id)
        with caplog.at_level(logging.WARNING):
            await handle.signal(SIGNAL_USER_MESSAGES, {"messages": "not a list"})
            await handle.signal(SIGNAL_USER_MESSAGES, {"messages": ["fine"]})
            await env.agents.approve(run_id, "call_sum")
            result = await handle.result()
        events = [record.event for record in env.store.read_events(run_id)]
    assert result["outcome"] == "completed"
    refused = [event for event in events if event["type"] == "user_messages_refused"]
    assert len(refused) == 1 and "messages" in refused[0]["reason"], refused
    assert f"run {run_id}: a user_messages signal was refused" in caplog.text


def test_the_handlers_describe_themselves() -> None:
    definition = workflow_definition(AgentRunWorkflow)
    described = {
        **{name: handler.description for name, handler in definition.signals.items()},
        **{name: handler.description for name, handler in definition.queries.items()},
        **{name: handler.description for name, handler in definition.updates.items()},
    }
    for name in (SIGNAL_USER_MESSAGES, "record", "approvals", "call_agent", "decide_approval"):
        assert described.get(name), name


async def _waiting(agents: AgentClient, run_id: str) -> None:
    async def asked() -> bool:
        return any(r.call_id == "call_sum" for r in await agents.pending_approvals(run_id))

    await wait_until(asked, within=30, message="the clerk's approval request")


async def _count(client: Client, query: str, expected: int) -> bool:
    return (await client.count_workflows(query)).count == expected


@dataclass
class StubbornProvider:
    """A model call that finishes although its activity was cancelled (a provider that ignores
    cancellation, or a call that ends just as the cancel arrives)."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    inner: RecordingProvider = field(default_factory=RecordingProvider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.started.set()
        while not self.release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await self.release.wait()
        async for event in self.inner.stream(request):
            yield event


async def test_a_turn_that_outlives_the_cancel_ends_the_run_cancelled(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The clerk's model call completes after the run was cancelled: its tool call (which
    would wait for a person) never runs, and the run ends cancelled instead of waiting."""
    provider = StubbornProvider()
    config = load_config(EXAMPLE_CONFIG)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="clerk", input="Add 2 and 3."))
        await asyncio.wait_for(provider.started.wait(), 30)
        result = await _cancel_then_answer(client, handle, provider)
    assert result.outcome is RunOutcome.CANCELLED


@pytest.mark.parametrize("queued", [False, True], ids=["alone", "with-a-queued-message"])
async def test_a_final_answer_that_outlives_the_cancel_ends_the_run_cancelled(
    client: Client, task_queue: str, tmp_path: Path, queued: bool
) -> None:
    """The model call completes with a final answer after the run was cancelled: the run ends
    cancelled (as a turn with tool calls does) and calls no model again, not even for a message
    that arrived meanwhile; the answer that arrived stays in the session."""
    provider = StubbornProvider()
    config = scripted_config({"talker": ["Too late.", "Even later."]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="talker", input="Hello?"))
        await asyncio.wait_for(provider.started.wait(), 30)
        if queued:
            await handle.send_message("And another thing.")
        result = await _cancel_then_answer(client, handle, provider)
        events = [record.event["type"] for record in env.store.read_events(handle.run_id)]
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.CANCELLED, result
    assert "run_cancelled" in events and "run_completed" not in events, events
    assert len(provider.inner.requests) == 1, [r.turn for r in provider.inner.requests]
    assert [entry.content for entry in entries if entry.role == "assistant"] == ["Too late."]


async def _cancel_then_answer(client: Client, handle: Any, provider: Any) -> AgentRunResult:
    """Cancel the run while its model call is held, then let the call answer: the run's end."""
    await handle.cancel()
    await wait_until(
        lambda: _cancel_reached_the_model_call(client, handle.run_id),
        message="the model call's cancellation requested",
    )
    provider.release.set()
    result: AgentRunResult = await asyncio.wait_for(handle.result(), 30)
    return result


async def _cancel_reached_the_model_call(client: Client, run_id: str) -> bool:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return any(
        event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
        for event in history.events
    )


async def test_queued_messages_are_bounded_in_bytes_too(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Queued messages travel in the next model call's input: past 1 MiB they are refused
    visibly, so that input stays under Temporal's 2 MB payload limit."""
    run_id = f"run-bytes-{uuid.uuid4().hex[:8]}"
    big = "x" * 700_000
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path) as env:
        handle = await client.start_workflow(
            WORKFLOW_NAME, _raw_input(run_id), id=run_id, task_queue=task_queue
        )
        await _waiting(env.agents, run_id)
        await env.agents.send_message(run_id, big)
        await env.agents.send_message(run_id, big)
        await env.agents.approve(run_id, "call_sum")
        result = await handle.result()
        events = [record.event for record in env.store.read_events(run_id)]
    assert result["outcome"] == "completed"
    [refused] = [event for event in events if event["type"] == "user_messages_refused"]
    assert refused["count"] == 1 and refused["limit_bytes"] == 1024 * 1024, refused


async def test_a_root_run_page_tells_what_it_is_without_opening_payloads(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = load_config(EXAMPLE_CONFIG)
    async with agent_env(client, task_queue, config, tmp_path):
        agents = AgentClient(client, task_queue=task_queue, config=config)
        request = build_request(entry_agent="assistant", input="Weather?", idempotency_key="k-42")
        handle = await agents.start(request)
        await handle.result()
        description = await client.get_workflow_handle(handle.run_id).describe()
    assert await description.static_summary() == "assistant: Weather?"
    details = await description.static_details() or ""
    for shown in ("**agent** `assistant`", "**model** `demo`", "get_weather", "`k-42`", "`local`"):
        assert shown in details, details


async def test_a_temporal_schedule_starts_runs_from_one_input_without_ids(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A schedule starts each run under an id of its own (`<id>-<time>`) from one fixed input,
    which cannot name it: a root's input may leave `run_id` and `root_run_id` out, and takes
    the workflow id (every firing failed `invalid_request` before)."""
    from temporalio.client import Schedule, ScheduleActionStartWorkflow, ScheduleSpec

    schedule_id = f"schedule-{uuid.uuid4().hex[:8]}"
    raw = {"request": {"entry_agent": "assistant", "input": "Hi."}}
    config = scripted_config({"assistant": ["scheduled answer"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        action = ScheduleActionStartWorkflow(
            WORKFLOW_NAME, raw, id=f"{schedule_id}-run", task_queue=task_queue
        )
        schedule = await client.create_schedule(
            schedule_id, Schedule(action=action, spec=ScheduleSpec()), trigger_immediately=True
        )
        try:
            query = f'WorkflowId STARTS_WITH "{schedule_id}-run"'
            await wait_until(lambda: _count(client, query, 1), message="the scheduled run")
            [execution] = [e async for e in client.list_workflows(query)]
            result = await client.get_workflow_handle(execution.id).result()
            record = await env.agents.get_run(execution.id)
        finally:
            await schedule.delete()
    assert result["outcome"] == "completed", result
    assert result["run_id"] == execution.id != f"{schedule_id}-run"
    assert record.root_run_id == execution.id and record.output is not None
