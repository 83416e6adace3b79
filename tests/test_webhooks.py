"""Completion webhooks (issue 47) on the dev server with a real store and a real HTTP receiver
on 127.0.0.1: signed, retried, given up, refused, from a request, an agent or a schedule."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import build_request
from otherone.client.schedules import ScheduleRequest, Schedules
from otherone.contracts import WebhookDelivered, delivery_workflow_id
from otherone.definitions import AgentDefinition, RuntimePolicy
from otherone.errors import ConfigurationError, InvalidRequestError
from otherone.runs import RunOutcome
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.webhooks import (
    DELIVERY_ID_HEADER,
    SIGNATURE_HEADER,
    signature_header,
    verify_signature,
)
from tests.api_env import api_env
from tests.harness import agent_env, scripted_config, wait_until
from tests.processes import address_of, cli_env, otherone
from tests.providers import RecordingProvider
from tests.sse import read_stream
from tests.test_api import assert_problem, run_body
from tests.webhook_receiver import Receiver, receiving

pytestmark = pytest.mark.timeout(120)

CALL = {"agent": "helper", "task": "help"}
#: Quick retries: three attempts, 1 s then 2 s apart.
FAST = RuntimePolicy(webhook_attempts=3, webhook_first_retry=timedelta(seconds=1))


def _events(store: Store, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.event for e in store.read_events(run_id, limit=1000) if e.event["type"] == kind]


async def _delivery(client: Client, run_id: str) -> WebhookDelivered:
    handle = client.get_workflow_handle(delivery_workflow_id(run_id), result_type=WebhookDelivered)
    return await handle.result()


def _secret(store: Store, partition: str = "local") -> str:
    return store.webhook_secrets.get(partition).secret


async def test_a_failing_receiver_is_retried_then_gets_the_signed_record(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"agent": ["Done."]}, policy=FAST)
    hold = threading.Event()
    with receiving(Receiver(statuses=(500, 200), hold=hold)) as receiver:
        async with agent_env(client, task_queue, config, tmp_path) as env:
            url = f"{receiver.url}/hooks/run?token=s3cr3t-query"
            handle = await env.agents.start(
                build_request(entry_agent="agent", input="Go.", webhook=url)
            )
            # The receiver holds the first POST: the run's result is there all the same.
            result = await env.agents.result(handle.run_id)
            assert result.outcome is RunOutcome.COMPLETED and result.text == "Done."
            await wait_until(lambda: len(receiver.received) >= 1, message="the first POST")
            hold.set()
            delivered = await _delivery(client, handle.run_id)
            assert delivered == WebhookDelivered(delivered=True, status_code=200, attempts=2)
            record = await env.agents.get_run(handle.run_id)
            secret = _secret(env.store)
            failed = _events(env.store, handle.run_id, "webhook_failed")
            done = _events(env.store, handle.run_id, "webhook_delivered")

    first, second = receiver.received
    assert first.path == second.path == "/hooks/run?token=s3cr3t-query"
    # At least once: both attempts carry the same delivery id; each its own signature.
    assert first.headers[DELIVERY_ID_HEADER] == second.headers[DELIVERY_ID_HEADER]
    assert first.headers[DELIVERY_ID_HEADER] == delivery_workflow_id(handle.run_id)
    for got in receiver.received:
        assert verify_signature(got.body, got.headers[SIGNATURE_HEADER], secret)
        assert not verify_signature(got.body + b" ", got.headers[SIGNATURE_HEADER], secret)
        assert not verify_signature(got.body, got.headers[SIGNATURE_HEADER], "whsec_other")
    body = json.loads(second.body)
    # The record `GET /v1/runs/{id}` answers (the live client's adds only what Temporal knows).
    assert body["run_id"] == handle.run_id and body["status"] == "completed"
    assert body["output"] == record.model_dump(mode="json")["output"]
    assert body["usage"]["model_calls"] == 1 and body["agent_id"] == "agent"
    # Events: the failed attempt (retrying) and the delivery, without the query's token.
    assert [(e["attempt"], e["status_code"], e["retrying"]) for e in failed] == [(1, 500, True)]
    assert [(e["attempt"], e["status_code"]) for e in done] == [(2, 200)]
    for event in failed + done:
        assert "s3cr3t" not in json.dumps(event)
        assert event["url"] == f"{receiver.url}/hooks/run?…"


async def test_a_receiver_that_keeps_failing_is_given_up_and_the_run_is_untouched(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"agent": ["Done."]}, policy=FAST)
    with receiving(Receiver(statuses=(503,), answer_text="down for maintenance")) as receiver:
        async with agent_env(client, task_queue, config, tmp_path) as env:
            request = build_request(entry_agent="agent", input="Go.", webhook=receiver.url)
            started = time.monotonic()
            result = await env.agents.run(request)
            assert result.outcome is RunOutcome.COMPLETED
            assert time.monotonic() - started < 20  # nothing waited for the receiver's retries
            delivered = await _delivery(client, result.run_id)
            assert delivered == WebhookDelivered(delivered=False, attempts=3)
            failed = _events(env.store, result.run_id, "webhook_failed")
            record = await env.agents.get_run(result.run_id)
            stored = env.store.get_run_record("local", result.run_id)
    assert len(receiver.received) == 3
    assert [(e["attempt"], e["status_code"], e["retrying"]) for e in failed] == [
        (1, 503, True),
        (2, 503, True),
        (3, 503, False),
    ]
    assert "down for maintenance" in failed[-1]["error"]
    assert record.status.value == "completed" and stored is not None
    assert stored.status.value == "completed" and stored.failure is None


async def test_a_4xx_is_not_retried(client: Client, task_queue: str, tmp_path: Path) -> None:
    config = scripted_config({"agent": ["Done."]}, policy=FAST)
    with receiving(Receiver(statuses=(410,))) as receiver:
        async with agent_env(client, task_queue, config, tmp_path) as env:
            request = build_request(entry_agent="agent", input="Go.", webhook=receiver.url)
            result = await env.agents.run(request)
            delivered = await _delivery(client, result.run_id)
            failed = _events(env.store, result.run_id, "webhook_failed")
    assert delivered.delivered is False
    assert len(receiver.received) == 1
    assert [(e["attempt"], e["status_code"], e["retrying"]) for e in failed] == [(1, 410, False)]


async def test_408_and_429_are_retried(client: Client, task_queue: str, tmp_path: Path) -> None:
    config = scripted_config({"agent": ["Done."]}, policy=FAST)
    with receiving(Receiver(statuses=(429, 408, 204))) as receiver:
        async with agent_env(client, task_queue, config, tmp_path) as env:
            request = build_request(entry_agent="agent", input="Go.", webhook=receiver.url)
            result = await env.agents.run(request)
            delivered = await _delivery(client, result.run_id)
    assert delivered == WebhookDelivered(delivered=True, status_code=204, attempts=3)
    assert len(receiver.received) == 3


async def test_a_failed_run_delivers_too(client: Client, task_queue: str, tmp_path: Path) -> None:
    config = scripted_config({"agent": ["Done."]}, policy=FAST)
    with receiving(Receiver()) as receiver:
        async with agent_env(client, task_queue, config, tmp_path) as env:
            # A model the agent does not allow: the run fails as it is prepared.
            request = build_request(
                entry_agent="agent", input="Go.", webhook=receiver.url, model="elsewhere"
            )
            result = await env.agents.run(request)
            assert result.outcome is RunOutcome.FAILED
            await _delivery(client, result.run_id)
    (got,) = receiver.received
    body = json.loads(got.body)
    assert body["status"] == "failed" and body["failure"]["code"] == "invalid_request"


async def test_a_cancelled_run_delivers_its_cancelled_record(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("agent", 1)
    config = scripted_config({"agent": ["never"]}, policy=FAST)
    with receiving(Receiver()) as receiver:
        async with agent_env(
            client, task_queue, config, tmp_path, providers={"scripted": provider}
        ) as env:
            request = build_request(entry_agent="agent", input="wait", webhook=receiver.url)
            handle = await env.agents.start(request)
            await asyncio.wait_for(provider.started.wait(), 10)
            await handle.cancel()
            result = await handle.result()
            assert result.outcome is RunOutcome.CANCELLED
            await _delivery(client, handle.run_id)
    (got,) = receiver.received
    assert json.loads(got.body)["status"] == "cancelled"


async def test_an_agent_default_webhook_is_sent_by_roots_only(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with receiving(Receiver()) as receiver:
        agents = [
            AgentDefinition.model_validate(
                {
                    "id": "boss",
                    "description": "delegates",
                    "callable_agents": ["helper"],
                    "webhook": f"{receiver.url}/boss",
                }
            ),
            AgentDefinition(id="helper", description="helps", webhook=f"{receiver.url}/helper"),
        ]
        script = {
            "boss": [
                {"tool_calls": [{"id": "c1", "name": "agent.call", "arguments": CALL}]},
                "Boss done.",
            ],
            "helper": ["Helped."],
        }
        config = scripted_config(script, agents=agents, policy=FAST)
        async with agent_env(client, task_queue, config, tmp_path) as env:
            result = await env.agents.run(build_request(entry_agent="boss", input="Go."))
            assert result.outcome is RunOutcome.COMPLETED, result.failure
            await _delivery(client, result.run_id)
            stored = env.store.list_run_records("local", result.run_id)
            (child,) = [run for run in stored if run.run_id != result.run_id]
            assert child.agent_id == "helper" and child.status.value == "completed"
            with pytest.raises(RPCError):  # the child started no delivery
                await client.get_workflow_handle(delivery_workflow_id(child.run_id)).describe()
    (got,) = receiver.received
    assert got.path == "/boss" and json.loads(got.body)["run_id"] == result.run_id


async def test_a_schedule_firing_delivers_its_webhook(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"agent": ["Scheduled."]}, policy=FAST)
    schedules = Schedules(client, task_queue=task_queue, config=config)
    name = f"w-{uuid.uuid4().hex[:8]}"
    with receiving(Receiver()) as receiver:
        async with agent_env(client, task_queue, config, tmp_path) as env:
            request = build_request(entry_agent="agent", input="Report.", webhook=receiver.url)
            await schedules.create(
                ScheduleRequest(name=name, request=request, every=timedelta(days=1), paused=True)
            )
            try:
                await schedules.trigger(name)
                await wait_until(lambda: len(receiver.received) >= 1, within=60, message="POST")
            finally:
                await schedules.delete(name)
            secret = _secret(env.store)
    (got,) = receiver.received
    assert verify_signature(got.body, got.headers[SIGNATURE_HEADER], secret)
    body = json.loads(got.body)
    assert body["run_id"].startswith(schedules.schedule_id(name))
    assert body["output"]["value"] == "Scheduled."


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com/hook", "http:// or https://"),
        ("https://user:pass@example.com/hook", "credentials"),
        ("https://token@example.com/hook", "credentials"),
        ("https://example.com/" + "a" * 2100, "at most 2048"),
        ("https:///nohost", "host"),
        ("https://example.com/a b", "whitespace"),
        ("https://example.com:notaport/", "not a URL"),
    ],
)
def test_bad_webhook_urls_are_refused_naming_the_field(url: str, says: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        build_request(entry_agent="agent", input="Go.", webhook=url)
    assert refused.value.field == "webhook" and says in str(refused.value)
    with pytest.raises(ValidationError, match="webhook"):
        AgentDefinition(id="a", description="a", webhook=url)


def test_each_partition_has_its_own_secret_and_a_rotation_keeps_the_last(
    tmp_path: Path,
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        secrets = store.webhook_secrets
        first, other = secrets.get("tenant-a"), secrets.get("tenant-b")
        assert first.secret.startswith("whsec_") and first.secret != other.secret
        assert secrets.get("tenant-a") == first  # made once
        rotated = secrets.rotate("tenant-a")
        assert rotated.secret != first.secret and rotated.previous_secret == first.secret
        assert rotated.rotated_at is not None and secrets.get("tenant-b") == other
    finally:
        store.close()
    body = b'{"run_id":"r"}'
    header = signature_header(rotated.secret, int(time.time()), body)
    assert verify_signature(body, header, [rotated.secret, first.secret])
    assert not verify_signature(body, header, first.secret)


def test_a_signature_out_of_its_time_window_is_refused() -> None:
    body, secret = b"{}", "whsec_test"
    now = time.time()
    old = signature_header(secret, int(now) - 301, body)
    assert not verify_signature(body, old, secret, now=now)
    assert verify_signature(body, old, secret, now=now, tolerance_seconds=600)
    assert not verify_signature(body, "t=abc,v1=00", secret)
    assert not verify_signature(body, "", secret)


async def test_the_api_shows_each_token_its_own_partitions_secret_and_refuses_bad_urls(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"agent": ["Done."]}, policy=FAST)
    tokens = {"token-a": "tenant-a", "token-b": "tenant-b"}
    async with api_env(client, task_queue, config, tmp_path, tokens=tokens) as api:
        a = {"Authorization": "Bearer token-a"}
        b = {"Authorization": "Bearer token-b"}
        first = (await api.http.get("/v1/webhook-secret", headers=a)).json()
        other = (await api.http.get("/v1/webhook-secret", headers=b)).json()
        assert first["partition_key"] == "tenant-a" and other["partition_key"] == "tenant-b"
        assert first["secret"] != other["secret"]
        assert first["secret"] == api.env.store.webhook_secrets.get("tenant-a").secret
        across = await api.http.get("/v1/webhook-secret?partition=tenant-b", headers=a)
        assert_problem(across, 422, "invalid_request", "partition")
        rotated = await api.http.post("/v1/webhook-secret/rotate", headers=a)
        assert rotated.status_code == 200, rotated.text
        assert rotated.json()["previous_secret"] == first["secret"]
        assert rotated.json()["secret"] != first["secret"]
        body = run_body("agent", webhook="https://user:pw@example.com/hook")
        refused = await api.http.post("/v1/runs", json=body, headers=a)
        assert_problem(refused, 422, "invalid_request", "webhook")
        assert "pw@" not in refused.text
        with receiving(Receiver()) as receiver:
            started = await api.http.post(
                "/v1/runs", json=run_body("agent", webhook=receiver.url), headers=a
            )
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            ended = await api.http.get(f"/v1/runs/{run_id}/result?wait=60", headers=a)
            assert ended.json()["outcome"] == "completed", ended.text
            await _delivery(client, run_id)
        got = receiver.received[0]
        assert json.loads(got.body)["partition_key"] == "tenant-a"
        # Signed with tenant-a's secret as rotated: not its previous one, not tenant-b's.
        signed = got.headers[SIGNATURE_HEADER]
        assert verify_signature(got.body, signed, rotated.json()["secret"])
        assert not verify_signature(got.body, signed, first["secret"])
        assert not verify_signature(got.body, signed, other["secret"])
        status, frames = await read_stream(api.http, f"/v1/runs/{run_id}/events", headers=a)
        assert status == 200 and frames[-1].event == "run_completed"  # the live stream's end
        # The delivery's events follow the run's end: a stream resumed after it shows them.
        after = frames[-1].id
        status, later = await read_stream(
            api.http, f"/v1/runs/{run_id}/events?after={after}", headers=a
        )
        assert status == 200 and [frame.event for frame in later] == ["webhook_delivered"]


async def test_the_cli_shows_and_rotates_the_secret_and_refuses_a_bad_url(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    env = cli_env(address_of(temporal_env), "unused-queue", tmp_path, OTHERONE_PARTITION="acme")
    shown = await otherone("webhook-secret", env=env)
    assert shown.code == 0, shown.stderr
    secret = shown.stdout.strip()
    assert secret.startswith("whsec_")
    again = await otherone("webhook-secret", "--json", env=env)
    assert json.loads(again.stdout)["secret"] == secret
    rotated = await otherone("webhook-secret", "--rotate", "--json", env=env)
    assert rotated.code == 0, rotated.stderr
    fresh = json.loads(rotated.stdout)
    assert fresh["previous_secret"] == secret and fresh["secret"] != secret
    assert fresh["partition_key"] == "acme"
    for command in (
        ("run", "agent", "hello", "--webhook", "ftp://example.com/x"),
        (
            "schedule", "create", "nightly", "--agent", "agent", "--input", "hi",
            "--every", "3600", "--webhook", "https://u:p@example.com/x",
        ),
    ):  # fmt: skip
        refused = await otherone(*command, env=env)
        assert refused.code == 2, (refused.stdout, refused.stderr)
        assert "webhook" in refused.stderr and "Traceback" not in refused.stderr


def test_agent_files_and_toml_name_a_default_webhook(tmp_path: Path) -> None:
    agent_dir = tmp_path / ".otherone" / "agents" / "notifier"
    agent_dir.mkdir(parents=True)
    (agent_dir / "AGENT.md").write_text(
        "---\nschema_version: 1\ndescription: Notifies\n"
        "webhook: https://hooks.example.com/notifier\n---\nYou notify.\n"
    )
    (tmp_path / "otherone.toml").write_text(
        '[runtime]\ndefault_model = "demo"\n\n[models.demo]\nprovider = "scripted"\n'
        'model = "demo-1"\n\n[policy]\nwebhook_attempts = 4\nwebhook_first_retry = 5\n\n'
        '[agents.reporter]\ndescription = "Reports"\n'
        'webhook = "http://127.0.0.1:9000/reporter"\n'
    )
    config = load_config(tmp_path / "otherone.toml")
    assert config.agents["notifier"].webhook == "https://hooks.example.com/notifier"
    assert config.agents["reporter"].webhook == "http://127.0.0.1:9000/reporter"
    snapshot = config.snapshot()
    assert snapshot.policy.webhook_attempts == 4
    assert snapshot.policy.webhook_first_retry == timedelta(seconds=5)
    (tmp_path / "otherone.toml").write_text(
        '[runtime]\ndefault_model = "demo"\n\n[models.demo]\nprovider = "scripted"\n'
        'model = "demo-1"\n\n[agents.reporter]\ndescription = "Reports"\n'
        'webhook = "https://me:secret@example.com/x"\n'
    )
    with pytest.raises(ConfigurationError) as refused:
        load_config(tmp_path / "otherone.toml")
    assert "webhook" in str(refused.value) and "credentials" in str(refused.value)
    assert "secret@" not in str(refused.value)


def test_run_and_schedule_create_pass_the_webhook_on() -> None:
    from otherone.client.cli.parser import build_parser
    from otherone.client.cli.run import _request_from
    from otherone.client.cli.schedules import _request as schedule_request

    url = "https://hooks.example.com/x?token=1"
    args = build_parser().parse_args(["run", "assistant", "hi", "--webhook", url])
    assert _request_from(args, None).webhook == url
    assert _request_from(build_parser().parse_args(["run", "a", "hi"]), None).webhook is None
    create = ["schedule", "create", "n", "--agent", "a", "--input", "hi", "--every", "60"]
    args = build_parser().parse_args([*create, "--webhook", url])
    assert schedule_request(args, "acme").request.webhook == url
