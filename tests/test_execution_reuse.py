"""A run id started again after a termination (issue 46, "the record tells the truth").

Temporal's id reuse policies let a terminated workflow id start again: a second execution of
the same id. Before, it took over the terminated run's record (its start time, its end), its
session lease (leases are held by run id) and its event stream (its `run_started` was the
first's, deduplicated by key), and wrote its turn into the same transcript under the same run
id. A run id is used once: the record names the Temporal execution it is of, and a later
execution of the id is refused before it writes anything (docs/operations.md, "One execution
per run id").
"""

from __future__ import annotations

import io
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from otherone.client.agent_client import build_request
from otherone.client.records_view import print_record
from otherone.contracts import WORKFLOW_NAME, RunRef
from otherone.errors import FailureCode
from otherone.runs import RunOutcome, RunRecord, RunStatus
from otherone.store import Store
from otherone.store.errors import RunIdUsed
from otherone.store.lifecycle import SessionLease
from otherone.worker.reconciler import reconcile_once, temporal_end
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider

# store level ---------------------------------------------------------------------------------


def _start(store: Store, run_id: str, execution_id: str | None, session: str) -> None:
    record = RunRecord(
        run_id=run_id,
        root_run_id=run_id,
        agent_id="a",
        session_id=session,
        status=RunStatus.RUNNING,
        started_at=datetime.now(UTC),
        execution_id=execution_id,
    )
    lease = SessionLease("local", session, run_id, datetime.now(UTC) + timedelta(minutes=5))
    ref = RunRef(
        run_id=run_id,
        root_run_id=run_id,
        agent_id="a",
        partition_key="local",
        session_id=session,
        snapshot_version="v",
    )
    store.start_run(lease, record, ref, [{"type": "run_started", "execution": execution_id}])


def test_another_execution_of_a_running_records_id_is_refused_and_writes_nothing(
    store: Store,
) -> None:
    run_id, session = f"run-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    _start(store, run_id, "first-execution", session)
    _start(store, run_id, "first-execution", session)  # prepare run again: the same execution
    before = store.get_run_record("local", run_id)

    with pytest.raises(RunIdUsed) as refused:
        _start(store, run_id, "second-execution", session)

    assert refused.value.execution_id == "first-execution"
    assert "has already run and ended (Temporal execution first-execution, " in str(refused.value)
    assert store.get_run_record("local", run_id) == before
    assert before is not None and before.execution_id == "first-execution"
    bodies = [event.event for event in store.read_events(run_id)]
    assert [body.get("execution") for body in bodies] == ["first-execution"] * 2
    assert store.session_holder("local", session) == run_id


def test_an_end_that_names_no_execution_keeps_the_stored_one(store: Store) -> None:
    """The workflow's end record and a previous release's records name none: the record's
    execution stays, and a record that names none is not refused (as before)."""
    run_id, session = f"run-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    _start(store, run_id, "first-execution", session)
    started = store.get_run_record("local", run_id)
    assert started is not None
    ended = started.model_copy(update={"status": RunStatus.COMPLETED, "execution_id": None})
    store.upsert_run_record(ended)
    stored = store.get_run_record("local", run_id)
    assert stored is not None and stored.status is RunStatus.COMPLETED
    assert stored.execution_id == "first-execution"

    legacy, other = f"run-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    _start(store, legacy, None, other)
    _start(store, legacy, "an-execution", other)  # a record naming none: not refused
    assert store.get_run_record("local", legacy) is not None


# with Temporal ----------------------------------------------------------------------------


def _raw(run_id: str, session: str) -> dict[str, Any]:
    request = {"entry_agent": "worker", "input": "go", "session": {"session_id": session}}
    return {"run_id": run_id, "root_run_id": run_id, "request": request}


def _event_types(store: Store, run_id: str) -> list[str]:
    return [str(event.event.get("type")) for event in store.read_events(run_id)]


def _entries(store: Store, session: str) -> list[tuple[str, str, str | None]]:
    return [(e.role, e.content, e.run_id) for e in store.load_entries("local", session)]


@pytest.mark.parametrize("restart", ["after_terminate", "terminate_existing"])
async def test_a_run_id_started_again_after_a_termination_is_refused_and_kept_apart(
    client: Client, task_queue: str, tmp_path: Path, store: Store, restart: str
) -> None:
    """Terminated from outside, then started again (by `temporal workflow start` after the
    termination, or by a start whose conflict policy terminates the running one): the later
    execution is refused, writing nothing; the record, events and transcript stay the first
    execution's; the reconciler closes the record with the first execution's end, not the
    refusal; `show` names the execution it shows."""
    provider = RecordingProvider()
    provider.gate("worker", 1)  # the first execution waits in its model call
    run_id = f"run-again-{uuid.uuid4().hex[:8]}"
    session = f"chat-{uuid.uuid4().hex[:8]}"
    config = scripted_config({"worker": ["first answer", "second answer"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}, store=store
    ) as env:
        first = await client.start_workflow(
            WORKFLOW_NAME, _raw(run_id, session), id=run_id, task_queue=task_queue
        )
        await wait_until(
            lambda: "model_started" in _event_types(store, run_id), message="the first model call"
        )
        started = store.get_run_record("local", run_id)
        events = store.read_events(run_id)
        entries = _entries(store, session)
        if restart == "after_terminate":
            await first.terminate(reason="by hand")
            again = await client.start_workflow(
                WORKFLOW_NAME,
                _raw(run_id, session),
                id=run_id,
                task_queue=task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )
        else:
            again = await client.start_workflow(
                WORKFLOW_NAME,
                _raw(run_id, session),
                id=run_id,
                task_queue=task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
            )
        refusal = await again.result()

        assert refusal["outcome"] == "failed", refusal
        assert refusal["failure"]["code"] == "invalid_request"
        message = refusal["failure"]["message"]
        assert "has already run and ended" in message and first.first_execution_run_id
        assert f"Temporal execution {first.first_execution_run_id}" in message
        # Nothing of the refused execution is in the store.
        assert store.get_run_record("local", run_id) == started
        assert started is not None and started.status is RunStatus.RUNNING
        assert started.execution_id == first.first_execution_run_id
        assert store.read_events(run_id) == events
        assert _entries(store, session) == entries == [("user", "go", run_id)]
        assert len(provider.requests) == 1  # the refused execution called no model

        # The record gets the first execution's end: its termination, not the refusal.
        done = await reconcile_once(client, store, grace=timedelta(0))
        assert done.closed == {"failed": 1}, done
        closed = store.get_run_record("local", run_id)
        assert closed is not None and closed.status is RunStatus.FAILED
        assert closed.failure is not None and closed.failure.code is FailureCode.INTERNAL_ERROR
        assert closed.failure.message.startswith("terminated in Temporal"), closed.failure
        assert closed.execution_id == first.first_execution_run_id
        assert store.session_holder("local", session) is None

        shown = await env.agents.get_run(run_id)
        assert shown.status is RunStatus.FAILED and shown.agent_id == "worker"
        assert shown.execution_id == first.first_execution_run_id
        out = io.StringIO()
        print_record(Console(file=out, width=200), shown)
        assert re.search(rf"^execution +{first.first_execution_run_id} *$", out.getvalue(), re.M)

        # The session goes on with a new run (a new id).
        provider.hold.clear()
        result = await env.agents.run(_request(session))
        assert result.outcome is RunOutcome.COMPLETED, result.failure


def _request(session: str) -> Any:
    return build_request(entry_agent="worker", input="again", session={"session_id": session})


async def test_a_reset_run_is_the_same_execution_and_goes_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A reset makes a new Temporal run of the same execution chain (the first run id stays):
    reset to its first workflow task, the run prepares again and completes (not refused)."""
    provider = RecordingProvider()
    gate = provider.gate("worker", 1)
    run_id = f"run-reset-{uuid.uuid4().hex[:8]}"
    session = f"chat-{uuid.uuid4().hex[:8]}"
    config = scripted_config({"worker": ["first answer", "second answer"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await client.start_workflow(
            WORKFLOW_NAME, _raw(run_id, session), id=run_id, task_queue=task_queue
        )
        await wait_until(lambda: bool(provider.requests), message="the model call")
        first_task = await _first_workflow_task_completed(handle)
        reset = await client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=run_id),
                reason="by hand",
                workflow_task_finish_event_id=first_task,
                request_id=uuid.uuid4().hex,
            )
        )
        gate.set()
        latest = client.get_workflow_handle(run_id, run_id=reset.run_id)
        result = await latest.result()
        record = env.store.get_run_record("local", run_id)
        prepared_again = await _prepared(latest)
    assert prepared_again  # the reset run prepared again (its first task was run again)
    assert result["outcome"] == "completed", result
    assert record is not None and record.status is RunStatus.COMPLETED
    assert record.execution_id == handle.first_execution_run_id


async def _first_workflow_task_completed(handle: Any) -> int:
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return int(event.event_id)
    raise AssertionError("no workflow task completed")


async def _prepared(handle: Any) -> bool:
    """Whether ``handle``'s run, reset to its first workflow task, prepared again: prepare_run
    is a local activity, and its marker comes after the reset (the workflow task failed by
    it) instead of being copied from the run it was reset from."""
    reset_at: int | None = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED and reset_at is None:
            reset_at = event.event_id
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            return reset_at is not None
    return False


async def test_a_record_whose_own_execution_temporal_forgot_is_closed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A record of an execution Temporal no longer keeps (retention), while a later
    execution of its id is known: closed as not found, not with the later one's end."""
    config = scripted_config({"worker": ["an answer"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        later = await env.agents.run(build_request(entry_agent="worker", input="go"))
        record = RunRecord(
            run_id=later.run_id,
            root_run_id=later.run_id,
            agent_id="worker",
            status=RunStatus.RUNNING,
            started_at=datetime.now(UTC),
            execution_id=str(uuid.uuid4()),  # an execution Temporal does not know
        )
        ended = await temporal_end(client, record)
    assert ended is not None and ended.status is RunStatus.FAILED
    assert ended.failure is not None and "not found in Temporal" in ended.failure.message
