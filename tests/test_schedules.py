"""Schedules (`otherone.client.schedules`, issue 47) on the dev server: Temporal Schedules
whose firings are root runs of ours, managed per partition."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.client.schedules import ScheduleRequest, Schedules
from otherone.errors import InvalidRequestError, ScheduleExistsError, ScheduleNotFoundError
from otherone.runs import RunOutcome
from tests.api_env import api_env
from tests.harness import agent_env, scripted_config, wait_until
from tests.test_api import assert_problem, run_body
from tests.test_api import config as api_config

pytestmark = pytest.mark.timeout(120)


def _name() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def _request(partition: str = "local", **fields: object) -> object:
    return build_request(
        entry_agent="agent",
        input="Report.",
        runtime_context={"partition_key": partition},
        **fields,
    )


async def _runs_of(client: Client, schedule_id: str) -> list[str]:
    """The runs a schedule started (by their ids: ``<schedule id>-<time>``), completed."""
    query = f'WorkflowId STARTS_WITH "{schedule_id}-" AND ExecutionStatus = "Completed"'
    return [execution.id async for execution in client.list_workflows(query)]


async def test_a_cron_schedule_fires_runs_until_paused_and_can_be_triggered_and_deleted(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"agent": ["Done."]})
    schedules = Schedules(client, task_queue=task_queue, config=config)
    name = _name()
    async with agent_env(client, task_queue, config, tmp_path) as env:
        # Seven fields: seconds first (every 2 s), a year last.
        created = await schedules.create(
            ScheduleRequest(name=name, request=_request(), cron=("*/2 * * * * * *",))
        )
        assert created.entry_agent == "agent" and created.next_runs
        schedule_id = schedules.schedule_id(name)

        async def fired(times: int) -> bool:
            return len(await _runs_of(client, schedule_id)) >= times

        await wait_until(lambda: fired(3), within=60, message="three firings")
        run_id = (await _runs_of(client, schedule_id))[0]
        result = await env.agents.result(run_id)
        assert result.outcome is RunOutcome.COMPLETED and result.text == "Done."
        paused = await schedules.pause(name, note="maintenance")
        assert paused.paused and paused.note == "maintenance"
        shown = await schedules.get(name)
        assert shown.recent_runs and shown.recent_runs[-1].run_id.startswith(schedule_id)
        before = len(await _runs_of(client, schedule_id))
        await schedules.trigger(name)  # fires even while paused
        await wait_until(lambda: fired(before + 1), within=30, message="the triggered run")
        assert not (await schedules.unpause(name)).paused
        await wait_until(lambda: _listed(schedules, name), within=30, message="the schedule listed")
        await schedules.delete(name)
    with pytest.raises(ScheduleNotFoundError):
        await schedules.get(name)
    with pytest.raises(ScheduleNotFoundError):
        await schedules.delete(name)


async def _listed(schedules: Schedules, name: str) -> bool:
    return name in [view.name for view in await schedules.list()]


async def test_an_interval_schedule_continues_one_session(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Each firing is a turn of the same conversation: the session holds every firing's
    exchange, one after the other."""
    config = scripted_config({"agent": ["Reported."]})
    schedules = Schedules(client, task_queue=task_queue, config=config)
    name, session = _name(), f"daily-{uuid.uuid4().hex[:6]}"
    async with agent_env(client, task_queue, config, tmp_path) as env:
        request = _request(session={"session_id": session})
        await schedules.create(
            ScheduleRequest(name=name, request=request, every=timedelta(seconds=2))
        )
        schedule_id = schedules.schedule_id(name)
        await wait_until(
            lambda: _at_least(client, schedule_id, 2), within=60, message="two firings"
        )
        await schedules.delete(name)
        entries = env.store.load_entries("local", session)
    turns = [(entry.role, entry.content) for entry in entries]
    assert turns[:4] == [("user", "Report."), ("assistant", "Reported.")] * 2


async def _at_least(client: Client, schedule_id: str, count: int) -> bool:
    return len(await _runs_of(client, schedule_id)) >= count


async def test_schedules_are_kept_apart_by_partition(client: Client, task_queue: str) -> None:
    """A tenant neither sees nor reaches another's schedule, though both use the name."""
    name = _name()
    acme = Schedules(client, task_queue=task_queue, partition_key="acme")
    other = Schedules(client, task_queue=task_queue, partition_key="other")
    await acme.create(
        ScheduleRequest(name=name, request=_request("acme"), every=timedelta(hours=1), paused=True)
    )
    try:
        await other.create(
            ScheduleRequest(
                name=name, request=_request("other"), every=timedelta(hours=1), paused=True
            )
        )
        await other.delete(name)
        with pytest.raises(ScheduleExistsError):
            await acme.create(
                ScheduleRequest(name=name, request=_request("acme"), every=timedelta(hours=2))
            )
        for attempt in (other.get(name), other.pause(name), other.trigger(name)):
            with pytest.raises(ScheduleNotFoundError):
                await attempt
        with pytest.raises(InvalidRequestError) as wrong:
            await other.create(
                ScheduleRequest(name=_name(), request=_request("acme"), every=timedelta(hours=1))
            )
        assert wrong.value.field == "request.runtime_context.partition_key"
    finally:
        await acme.delete(name)


async def test_bad_schedules_are_refused_naming_the_field(client: Client, task_queue: str) -> None:
    schedules = Schedules(client, task_queue=task_queue)
    with pytest.raises(InvalidRequestError) as bad_cron:
        await schedules.create(
            ScheduleRequest(name=_name(), request=_request(), cron=("61 * * * *",))
        )
    assert bad_cron.value.field == "cron" and "Minute" in str(bad_cron.value)
    cases = [
        ({"cron": ("* * * * *",), "every": timedelta(seconds=5)}, "cron or every"),
        ({}, "cron or every"),
        ({"every": timedelta(milliseconds=200)}, "every"),
        ({"every": timedelta(seconds=5), "catchup_window": timedelta(seconds=1)}, "catchup"),
        ({"every": timedelta(seconds=5), "name": "Bad Name"}, "name"),
        ({"every": timedelta(seconds=5), "overlap": "sometimes"}, "overlap"),
    ]
    for fields, words in cases:
        values = {"name": _name(), "request": _request(), **fields}
        with pytest.raises(ValidationError, match=words):
            ScheduleRequest.model_validate(values)
    with pytest.raises(ValidationError, match="idempotency_key"):
        ScheduleRequest(
            name=_name(), request=_request(idempotency_key="k"), every=timedelta(seconds=5)
        )


async def test_the_http_api_manages_a_tokens_partitions_schedules(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    alice, bob = "alice-token-0123456789", "bob-token-0123456789ab"
    tokens = {alice: "tenant-a", bob: "tenant-b"}
    as_alice = {"Authorization": f"Bearer {alice}"}
    as_bob = {"Authorization": f"Bearer {bob}"}
    name = _name()
    async with api_env(client, task_queue, api_config(), tmp_path, tokens=tokens) as api:
        body = {"name": name, "request": run_body(), "every": 2}
        created = await api.http.post("/v1/schedules", json=body, headers=as_alice)
        assert created.status_code == 201, created.text
        assert created.json()["partition_key"] == "tenant-a"
        again = await api.http.post("/v1/schedules", json=body, headers=as_alice)
        assert_problem(again, 409, "schedule_exists", "name")
        schedule_id = f"{name}.tenant-a"
        await wait_until(lambda: _at_least(client, schedule_id, 1), within=30, message="fired")
        [run_id, *_] = await _runs_of(client, schedule_id)
        record = (await api.http.get(f"/v1/runs/{run_id}", headers=as_alice)).json()
        assert record["partition_key"] == "tenant-a"  # the schedule's runs are the tenant's
        paused = await api.http.post(
            f"/v1/schedules/{name}/pause", json={"note": "quiet"}, headers=as_alice
        )
        assert paused.json()["paused"] is True and paused.json()["note"] == "quiet"
        for method, path in (
            ("GET", f"/v1/schedules/{name}"),
            ("POST", f"/v1/schedules/{name}/trigger"),
            ("POST", f"/v1/schedules/{name}/unpause"),
            ("DELETE", f"/v1/schedules/{name}"),
        ):
            answer = await api.http.request(method, path, headers=as_bob)
            assert_problem(answer, 404, "schedule_not_found")
        assert (await api.http.get("/v1/schedules", headers=as_bob)).json() == []
        wrong = await api.http.get("/v1/schedules?partition=tenant-b", headers=as_alice)
        assert_problem(wrong, 422, "invalid_request", "partition")
        bad = await api.http.post(
            "/v1/schedules",
            json={**body, "name": _name(), "cron": ["61 * * * *"]},
            headers=as_alice,
        )
        assert_problem(bad, 422, "invalid_request")
        unknown = await api.http.post(
            "/v1/schedules",
            json={**body, "name": _name(), "request": run_body(agent="nobody")},
            headers=as_alice,
        )
        assert_problem(unknown, 422, "invalid_request")  # the workers define no such agent
        deleted = await api.http.delete(f"/v1/schedules/{name}", headers=as_alice)
        assert deleted.status_code == 204
        gone = await api.http.get(f"/v1/schedules/{name}", headers=as_alice)
        assert_problem(gone, 404, "schedule_not_found")
