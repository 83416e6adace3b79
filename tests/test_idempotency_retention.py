"""Idempotency beyond Temporal's retention: once Temporal no longer keeps a keyed root (the
namespace's retention; here its execution is deleted), a start of its key is answered from the
store (the original run, or a conflict) and nothing new is started; its result and record are
the store's (issue 46)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from otherone.client.agent_client import AgentClient, build_request
from otherone.errors import IdempotencyConflictError, RunNotFoundError
from otherone.runs import DEFAULT_PARTITION, RunOutcome, RunStatus
from otherone.store import Store
from otherone.store.records import KeyedRun
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider


async def forget(client: Client, run_id: str) -> None:
    """Delete the run's workflow execution, as retention would, and wait until it is gone."""
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=run_id)
        )
    )

    async def gone() -> bool:
        try:
            await client.get_workflow_handle(run_id).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return True
            raise
        return False

    # The server deletes a closed execution once its close tasks are acknowledged, which it
    # records every 30 s by default: ~35 s on the dev server.
    await wait_until(gone, within=120, interval=0.5, message=f"Temporal to forget {run_id}")


async def assert_not_in_temporal(client: Client, run_id: str) -> None:
    with pytest.raises(RPCError) as raised:
        await client.get_workflow_handle(run_id).describe()
    assert raised.value.status == RPCStatusCode.NOT_FOUND


async def test_a_key_temporal_forgot_is_answered_from_the_store(
    client: Client, task_queue: str, tmp_path: Path, store: Store
) -> None:
    provider = RecordingProvider()
    config = scripted_config({"agent": ["once", "twice"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}, store=store
    ) as env:
        request = build_request(entry_agent="agent", input="hello", idempotency_key="kept-1")
        first = await env.agents.run(request)
        assert first.outcome == RunOutcome.COMPLETED
        await forget(client, first.run_id)

        again = await env.agents.start(request)
        assert again.run_id == first.run_id
        result = await again.result()
        assert (result.run_id, result.outcome, result.text) == (
            first.run_id,
            RunOutcome.COMPLETED,
            "once",
        )
        assert result.session_id == first.session_id
        assert result.usage == first.usage
        record = await env.agents.get_run(first.run_id)
        assert (record.status, record.output) == (RunStatus.COMPLETED, first.output)
        await env.agents.check_visible(first.run_id)
        assert await env.agents.list_run_tree(first.run_id) == [record]

        changed = build_request(entry_agent="agent", input="other", idempotency_key="kept-1")
        with pytest.raises(IdempotencyConflictError):
            await env.agents.start(changed)
        # A client of another process (no cache of its own) says the same.
        other = AgentClient(client, task_queue=task_queue, store=store)
        assert (await other.start(request)).run_id == first.run_id
        with pytest.raises(IdempotencyConflictError):
            await other.start(changed)
    await assert_not_in_temporal(client, first.run_id)
    assert len(provider.calls()) == 1


async def test_a_scoped_client_reads_its_forgotten_run_only(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"agent": ["once"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        request = build_request(
            entry_agent="agent",
            input="hello",
            idempotency_key="scoped",
            runtime_context={"partition_key": "t1"},
        )
        first = await env.agents.run(request)
        await forget(client, first.run_id)
        own = AgentClient(client, task_queue=task_queue, store=env.store, partition_key="t1")
        assert (await own.result(first.run_id)).text == "once"
        events = [event.event["type"] async for event in own.events(first.run_id)]
        assert (events[0], events[-1]) == ("run_started", "run_completed"), events
        assert (await own.start(request)).run_id == first.run_id
        stranger = AgentClient(client, task_queue=task_queue, store=env.store, partition_key="t2")
        with pytest.raises(RunNotFoundError):
            await stranger.result(first.run_id)
        with pytest.raises(RunNotFoundError):
            await stranger.get_run(first.run_id)
    await assert_not_in_temporal(client, first.run_id)


async def test_a_forgotten_run_without_a_kept_fingerprint_is_never_started_again(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run started before fingerprints were kept has only its record: while Temporal keeps
    the run its memo decides (and the fingerprint is kept then); after, the key is refused."""
    provider = RecordingProvider()
    config = scripted_config({"agent": ["once", "twice"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        old = build_request(entry_agent="agent", input="hello", idempotency_key="old")
        first = await env.agents.run(old)
        with env.store.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM otherone_idempotency_keys")
        assert (await env.agents.start(old)).run_id == first.run_id  # memo: kept again
        kept = env.store.keyed_run(DEFAULT_PARTITION, first.run_id)
        assert kept is not None
        assert kept.fingerprint == old.fingerprint()
        with env.store.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM otherone_idempotency_keys")
        await forget(client, first.run_id)
        with pytest.raises(IdempotencyConflictError):
            await env.agents.start(old)
        assert (await env.agents.result(first.run_id)).text == "once"
    await assert_not_in_temporal(client, first.run_id)
    assert len(provider.calls()) == 1


async def test_the_http_api_answers_a_forgotten_key_and_run_from_the_store(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    from tests.api_env import api_env

    config = scripted_config({"agent": ["once", "twice"]})
    async with api_env(client, task_queue, config, tmp_path) as api:
        body = {"entry_agent": "agent", "input": "hello"}
        headers = {"Idempotency-Key": "http-kept"}
        started = await api.http.post("/v1/runs", json=body, headers=headers)
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        first = await api.http.get(f"/v1/runs/{run_id}/result?wait=60")
        assert first.status_code == 200 and first.json()["outcome"] == "completed", first.text
        await forget(client, run_id)

        again = await api.http.post("/v1/runs", json=body, headers=headers)
        assert again.status_code == 201 and again.json()["run_id"] == run_id, again.text
        answer = await api.http.get(f"/v1/runs/{run_id}/result?wait=60")
        assert answer.status_code == 200, answer.text
        assert answer.json()["output"] == first.json()["output"]
        record = await api.http.get(f"/v1/runs/{run_id}")
        assert record.status_code == 200 and record.json()["status"] == "completed", record.text
        tree = await api.http.get(f"/v1/runs/{run_id}/tree")
        assert tree.status_code == 200 and tree.json() == [record.json()], tree.text
        changed = await api.http.post("/v1/runs", json={**body, "input": "other"}, headers=headers)
        assert changed.status_code == 409, changed.text
        assert changed.json()["code"] == "idempotency_conflict"
        unknown = await api.http.get("/v1/runs/never-started/result")
        assert unknown.status_code == 404, unknown.text
    await assert_not_in_temporal(client, run_id)


async def test_a_store_not_yet_migrated_leaves_keyed_starts_to_temporal(
    client: Client, task_queue: str, tmp_path: Path, store: Store
) -> None:
    """A client opens the store without migrating it (the workers' start does): before
    migration 0009 there is nowhere to keep fingerprints, and keyed starts work as before."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE otherone_idempotency_keys")
    config = scripted_config({"agent": ["once", "twice"]})
    async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
        request = build_request(entry_agent="agent", input="hello", idempotency_key="unmigrated")
        first = await env.agents.run(request)
        again = await env.agents.run(request)
        assert (again.run_id, again.text) == (first.run_id, "once")
        with pytest.raises(IdempotencyConflictError):
            await env.agents.start(
                build_request(entry_agent="agent", input="other", idempotency_key="unmigrated")
            )


async def test_a_tree_temporal_does_not_know_is_the_stores(
    client: Client, task_queue: str, store: Store
) -> None:
    """Records of a tree Temporal does not know (never saw, here): the records, a run whose
    end was never stored (terminated from outside) reported failed."""
    from otherone.runs import AgentOutput, RunRecord

    root = RunRecord(
        run_id="stored-root",
        root_run_id="stored-root",
        agent_id="agent",
        session_id="s",
        status=RunStatus.COMPLETED,
        output=AgentOutput(type="text", value="done"),
    )
    child = RunRecord(
        run_id="stored-root/helper.c1",
        root_run_id="stored-root",
        parent_run_id="stored-root",
        agent_id="helper",
        depth=1,
        status=RunStatus.RUNNING,
    )
    store.upsert_run_record(root)
    store.upsert_run_record(child)
    agents = AgentClient(client, task_queue=task_queue, store=store)
    tree = await agents.list_run_tree("stored-root")
    assert [record.run_id for record in tree] == ["stored-root", "stored-root/helper.c1"]
    assert tree[0] == root
    assert tree[1].status is RunStatus.FAILED and tree[1].failure is not None
    assert (await agents.result("stored-root")).text == "done"
    failed = await agents.result("stored-root/helper.c1")
    assert failed.outcome is RunOutcome.FAILED
    without_store = AgentClient(client, task_queue=task_queue)
    with pytest.raises(RunNotFoundError):
        await without_store.result("stored-root")


async def test_a_key_whose_run_an_earlier_version_started_is_never_started_again(
    client: Client, task_queue: str, tmp_path: Path, store: Store
) -> None:
    """Keyed roots started before readable ids run under ``run-`` + 40 hex digits, and before
    fingerprints were kept: the store has their record only. Once Temporal forgot such a run,
    a start of its key used to find nothing under either id and start a second run under the
    new one. Now the store's record of the old id answers: the same request joins it when its
    fingerprint was kept (a start that joined it while Temporal kept it keeps it), and a run
    whose request can no longer be compared is a conflict; nothing new is started."""
    from otherone.client.agent_client import legacy_root_run_id, root_run_id
    from tests.test_readable_ids import _started_by_the_previous_version

    provider = RecordingProvider()
    config = scripted_config({"agent": ["once", "twice", "thrice", "again"]})
    joined = {"entry_agent": "agent", "input": "hello", "idempotency_key": f"old {task_queue}"}
    alone = {**joined, "idempotency_key": f"old alone {task_queue}"}
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}, store=store
    ) as env:
        old_ids = []
        for fields in (joined, alone):
            legacy = await _started_by_the_previous_version(client, task_queue, fields)
            await client.get_workflow_handle(legacy).result()
            old_ids.append(legacy)
        request = build_request(**joined)
        assert (await env.agents.start(request)).run_id == old_ids[0]  # Temporal's memo
        kept = store.keyed_run(DEFAULT_PARTITION, old_ids[0])
        assert kept is not None and kept.fingerprint == request.fingerprint()
        assert store.keyed_run(DEFAULT_PARTITION, old_ids[1]) == KeyedRun(None)  # record only
        await asyncio.gather(*(forget(client, run_id) for run_id in old_ids))

        again = await env.agents.start(request)
        assert again.run_id == old_ids[0] == legacy_root_run_id(request)
        assert (await again.result()).text == "once"
        with pytest.raises(IdempotencyConflictError):
            await env.agents.start(build_request(**{**joined, "input": "other"}))
        with pytest.raises(IdempotencyConflictError) as unverifiable:
            await env.agents.start(build_request(**alone))
        assert old_ids[1] in str(unverifiable.value)
    for fields in (joined, alone):
        await assert_not_in_temporal(client, root_run_id(build_request(**fields)))
    assert len(provider.calls()) == 2  # the two runs the earlier version started, no other
