"""`otherone serve`: the HTTP API over a real dev server, worker and SQLite store.

Every answer is checked as a client sees it over a real socket (uvicorn on a free port):
idempotent starts and conflicts, records, results, trees, messages, cancellation, sessions,
event streams (order, resumption, AG-UI, heartbeats), tokens bound to partitions, problem
details for bad input, and the checked-in OpenAPI document.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy.exc
from ag_ui.core import Event
from pydantic import TypeAdapter
from temporalio.client import Client

from otherone.api import ApiToken, openapi_schema
from otherone.api.dependencies import ApiContext
from otherone.api.server import ApiServer, bind_host, check_can_listen, parse_tokens
from otherone.client import store_answers
from otherone.errors import ConfigurationError
from otherone.runs import DEFAULT_PARTITION
from otherone.store import Store
from otherone.tools import tool
from otherone.worker.settings import Settings
from tests.api_env import ApiEnv, api_env
from tests.harness import scripted_config, wait_until
from tests.sse import read_stream

OPENAPI_FILE = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"
PROBLEM = "application/problem+json"

SCRIPT: dict[str, list[Any]] = {
    "helper": [
        {"tool_calls": [{"name": "agent.call", "arguments": {"agent": "echo", "task": "go"}}]},
        {"chunks": ["All ", "done ", "here."]},
    ],
    "echo": [{"chunks": ["echo ", "says ", "hi"]}],
    "slow": [{"delay_seconds": 3.0, "text": "first"}, {"chunks": ["second ", "answer"]}],
}


def config() -> Any:
    from otherone.definitions import AccessPolicy, AgentDefinition

    agents = [
        AgentDefinition(
            id="helper", description="calls echo", callable_agents=AccessPolicy.allow("echo")
        ),
        AgentDefinition(id="echo", description="echoes"),
        AgentDefinition(id="slow", description="slow to answer"),
    ]
    return scripted_config(SCRIPT, agents=agents)


def run_body(agent: str = "helper", text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"entry_agent": agent, "input": text, **extra}


async def start(api: ApiEnv, body: dict[str, Any], key: str | None = None) -> str:
    headers = {"Idempotency-Key": key} if key else {}
    response = await api.http.post("/v1/runs", json=body, headers=headers)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    return run_id


async def result(api: ApiEnv, run_id: str, **headers: str) -> dict[str, Any]:
    response = await api.http.get(f"/v1/runs/{run_id}/result?wait=60", headers=headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def model_started(api: ApiEnv, run_id: str) -> None:
    await wait_until(
        lambda: any(
            event.event["type"] == "model_started" for event in api.env.store.read_events(run_id)
        ),
        message="the model call",
    )


def assert_problem(response: Any, status: int, code: str, field: str | None = None) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    problem = response.json()
    assert problem["code"] == code and problem["status"] == status, problem
    assert problem["type"] == f"urn:otherone:problem:{code}"
    assert "Traceback" not in response.text
    if field is not None:
        assert problem.get("field") == field, problem


async def test_start_is_idempotent_by_header_and_refuses_a_changed_body(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, config(), tmp_path) as api:
        first = await api.http.post("/v1/runs", json=run_body(), headers={"Idempotency-Key": "k1"})
        again = await api.http.post("/v1/runs", json=run_body(), headers={"Idempotency-Key": "k1"})
        assert first.status_code == again.status_code == 201, first.text
        run_id = first.json()["run_id"]
        assert again.json()["run_id"] == run_id
        assert first.json()["ui_url"].endswith(f"/namespaces/default/workflows/{run_id}")
        changed = await api.http.post(
            "/v1/runs", json=run_body(text="other"), headers={"Idempotency-Key": "k1"}
        )
        assert_problem(changed, 409, "idempotency_conflict", "Idempotency-Key")
        assert (await result(api, run_id))["outcome"] == "completed"
        after_end = await api.http.post(
            "/v1/runs", json=run_body(), headers={"Idempotency-Key": "k1"}
        )
        assert after_end.status_code == 201 and after_end.json()["run_id"] == run_id
        no_key = [await start(api, run_body()) for _ in range(2)]
        assert len(set(no_key)) == 2  # without a key every start is a new run


async def test_record_result_tree_and_sessions(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, config(), tmp_path) as api:
        run_id = await start(api, run_body(session={"session_id": "s-1"}), key="tree")
        answer = await result(api, run_id)
        assert answer["outcome"] == "completed"
        assert answer["output"]["value"] == "All done here."
        record = (await api.http.get(f"/v1/runs/{run_id}")).json()
        assert record["status"] == "completed" and record["agent_id"] == "helper"
        tree = (await api.http.get(f"/v1/runs/{run_id}/tree")).json()
        assert [run["agent_id"] for run in tree] == ["helper", "echo"]
        child = tree[1]["run_id"]
        assert "/" in child  # a child's id holds a '/': the routes take it whole
        child_record = (await api.http.get(f"/v1/runs/{child}")).json()
        assert child_record["parent_run_id"] == run_id
        assert [run["run_id"] for run in (await api.http.get(f"/v1/runs/{child}/tree")).json()] == [
            run_id,
            child,
        ]
        sessions = (await api.http.get("/v1/sessions")).json()
        assert [session["session_id"] for session in sessions] == ["s-1"]
        internal = (await api.http.get("/v1/sessions?internal=true")).json()
        assert len(internal) == 2
        # A page at a time: `after` = the last session id of the page before.
        pages, after = [], ""
        while page := (await api.http.get(f"/v1/sessions?internal=true&limit=1{after}")).json():
            pages.append([session["session_id"] for session in page])
            after = f"&after={page[-1]['session_id']}"
        assert pages == [[session["session_id"]] for session in internal]
        too_many = await api.http.get("/v1/sessions?limit=10001")
        assert_problem(too_many, 422, "invalid_request")
        agents = (await api.http.get("/v1/agents")).json()
        assert {agent["id"] for agent in agents} == {"helper", "echo", "slow"}


async def test_messages_cancel_and_a_result_that_is_not_ready(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, config(), tmp_path) as api:
        run_id = await start(api, run_body("slow"))
        pending = await api.http.get(f"/v1/runs/{run_id}/result?wait=0.2")
        assert pending.status_code == 202 and pending.json() == {
            "run_id": run_id,
            "status": "running",
        }
        await model_started(api, run_id)  # a message during the model call: one more turn
        sent = await api.http.post(f"/v1/runs/{run_id}/messages", json={"messages": ["more"]})
        assert sent.status_code == 202, sent.text
        answer = await result(api, run_id)
        assert answer["outcome"] == "completed" and answer["output"]["value"] == "second answer"
        events = api.env.store.read_events(run_id)
        assert any(event.event["type"] == "user_message_queued" for event in events)
        ended = await api.http.post(f"/v1/runs/{run_id}/messages", json={"messages": ["late"]})
        assert_problem(ended, 409, "run_not_active")

        cancelled = await start(api, run_body("slow"))
        await model_started(api, cancelled)
        accepted = await api.http.post(f"/v1/runs/{cancelled}/cancel")
        assert accepted.status_code == 202, accepted.text
        assert (await result(api, cancelled))["outcome"] == "cancelled"
        assert_problem(await api.http.post(f"/v1/runs/{cancelled}/cancel"), 409, "run_not_active")


async def test_event_stream_is_ordered_and_a_resumed_client_misses_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, config(), tmp_path) as api:
        run_id = await start(api, run_body())
        status, frames = await read_stream(api.http, f"/v1/runs/{run_id}/events")
        assert status == 200
        stored = api.env.store.read_events(run_id)
        assert [frame.id for frame in frames] == [event.sequence for event in stored]
        assert [frame.id for frame in frames] == list(range(1, len(stored) + 1))
        assert [frame.event for frame in frames] == [event.event["type"] for event in stored]
        assert frames[-1].event == "run_completed" and frames[-1].json()["run_id"] == run_id
        assert {frame.json()["agent_id"] for frame in frames} == {"helper", "echo"}

        # A client that saw up to the middle resumes with Last-Event-ID: exactly the rest.
        middle = frames[len(frames) // 2].id
        assert middle is not None
        url = f"/v1/runs/{run_id}/events"
        _, rest = await read_stream(api.http, url, headers={"Last-Event-ID": str(middle)})
        assert [frame.id for frame in rest] == [frame.id for frame in frames if frame.id > middle]
        # Resumed after the end of an ended tree: 204, so EventSource stops reconnecting.
        last = str(frames[-1].id)
        status, _ = await read_stream(api.http, url, headers={"Last-Event-ID": last})
        assert status == 204
        # Any run of the tree names the tree.
        child = next(frame.json()["run_id"] for frame in frames if frame.json()["depth"] == 1)
        _, via_child = await read_stream(api.http, f"/v1/runs/{child}/events")
        assert [frame.id for frame in via_child] == [frame.id for frame in frames]


async def test_a_live_stream_disconnected_mid_run_resumes_without_loss(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = {"talker": [{"chunks": [f"w{i} " for i in range(12)], "chunk_delay_seconds": 0.08}]}
    async with api_env(client, task_queue, scripted_config(script), tmp_path) as api:
        run_id = await start(api, run_body("talker"))
        url = f"/v1/runs/{run_id}/events"
        _, head = await read_stream(api.http, url, limit=3)  # then the client drops
        seen = head[-1].id
        assert seen is not None
        _, tail = await read_stream(api.http, url, headers={"Last-Event-ID": str(seen)})
        ids = [frame.id for frame in head + tail]
        assert ids == list(range(1, len(ids) + 1)) and tail[-1].event == "run_completed"
        text = "".join(
            f.json()["event"]["content"] for f in head + tail if f.event == "model_delta"
        )
        assert text == "".join(f"w{i} " for i in range(12))


async def test_ag_ui_format(client: Client, task_queue: str, tmp_path: Path) -> None:
    async with api_env(client, task_queue, config(), tmp_path) as api:
        run_id = await start(api, run_body(session={"session_id": "conversation-1"}))
        _, frames = await read_stream(api.http, f"/v1/runs/{run_id}/events?format=ag-ui")
        adapter: TypeAdapter[Any] = TypeAdapter(Event)
        events = [adapter.validate_json(frame.data) for frame in frames if frame.data]
        types = [event.type.value for event in events]
        assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED", types
        # AG-UI's thread is the conversation: the run's session, the same for every run of it.
        assert (events[0].run_id, events[0].thread_id) == (run_id, "conversation-1")
        assert events[-1].thread_id == "conversation-1"
        [call] = [event for event in events if event.type.value == "TOOL_CALL_START"]
        [child] = [event for event in events if event.type.value == "SUBAGENT_STARTED"]
        assert child.parent_tool_call_id == call.tool_call_id
        assert {"TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"} <= set(types)
        assert "SUBAGENT_STARTED" in types and "SUBAGENT_FINISHED" in types
        root_text = "".join(
            event.delta
            for event in events
            if event.type.value == "TEXT_MESSAGE_CONTENT" and event.subagent_run_id is None
        )
        child_text = "".join(
            event.delta
            for event in events
            if event.type.value == "TEXT_MESSAGE_CONTENT" and event.subagent_run_id is not None
        )
        assert root_text == "All done here." and child_text == "echo says hi"
        # Ids are the envelopes' sequences: an AG-UI client resumes like any other.
        ids = [frame.id for frame in frames if frame.id is not None]
        assert ids == sorted(ids) and ids[-1] == len(api.env.store.read_events(run_id))


async def test_an_ag_ui_stream_of_a_terminated_run_ends_with_run_error(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """AG-UI clients wait for RUN_FINISHED or RUN_ERROR: a root terminated from outside (no
    end of its own) gets a RUN_ERROR, coded ``terminated``."""
    async with api_env(client, task_queue, config(), tmp_path) as api:
        run_id = await start(api, run_body("slow"))
        url = f"/v1/runs/{run_id}/events?format=ag-ui"
        _, head = await read_stream(api.http, url, limit=1)
        assert json.loads(head[0].data)["type"] == "RUN_STARTED"
        await client.get_workflow_handle(run_id).terminate("from the operator")
        _, frames = await asyncio.wait_for(read_stream(api.http, url), 60)
    last = json.loads(frames[-1].data)
    assert (last["type"], last["code"]) == ("RUN_ERROR", "terminated"), frames[-3:]


def test_ag_ui_ids_are_unique_in_a_tree_and_retries_are_calls_of_their_own() -> None:
    """Providers number calls per turn, so a parent and its child share call ids; a tool's
    retried attempt has its own start and result; a superseded model attempt is named."""
    from datetime import UTC, datetime

    from otherone.api.agui import to_ag_ui
    from otherone.contracts import EventRecord

    def record(run_id: str, parent: str | None, **event: Any) -> EventRecord:
        return EventRecord(
            event_id="e",
            sequence=1,
            timestamp=datetime.now(UTC),
            root_run_id="root",
            run_id=run_id,
            parent_run_id=parent,
            agent_id="agent",
            depth=0 if parent is None else 1,
            event=event,
        )

    tool = {"tool_call_id": "call_0", "tool_name": "lookup", "arguments": "{}"}
    stream = [
        record("root", None, type="tool_started", **tool),
        record("root/child", "root", type="run_started", agent_call_id="call_0"),
        record("root/child", "root", type="tool_started", attempt=1, **tool),
        record("root/child", "root", type="tool_completed", attempt=1, error="flaky", **tool),
        record("root/child", "root", type="tool_started", attempt=2, **tool),
        record("root/child", "root", type="tool_completed", attempt=2, **tool),
        record("root", None, type="tool_completed", **tool),
        record("root", None, type="model_started", turn=2, attempt=2, supersedes_attempt=1),
        record("root", None, type="thinking_delta", turn=2, attempt=2, content="Hmm."),
    ]
    events = [event for item in stream for event in to_ag_ui(item, "thread")]
    starts = [e.tool_call_id for e in events if e.type.value == "TOOL_CALL_START"]
    results = [e.tool_call_id for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert starts == ["call_0", "root/child#call_0", "root/child#call_0#attempt2"]
    assert sorted(results) == sorted(starts)  # one result each
    [child] = [e for e in events if e.type.value == "SUBAGENT_STARTED"]
    assert child.parent_tool_call_id == "call_0"
    superseded, started, reasoning = events[-3:]
    assert reasoning.type.value == "REASONING_MESSAGE_CHUNK"
    assert (reasoning.message_id, reasoning.delta) == ("root#turn2.2.reasoning", "Hmm.")
    assert superseded.type.value == "CUSTOM" and superseded.name == "otherone.superseded"
    assert superseded.value == {"message_id": "root#turn2.1"}
    assert started.message_id == "root#turn2.2"


async def test_idle_streams_get_heartbeats(client: Client, task_queue: str, tmp_path: Path) -> None:
    async with api_env(client, task_queue, config(), tmp_path, heartbeat_seconds=0.2) as api:
        run_id = await start(api, run_body("slow"))
        _, frames = await read_stream(
            api.http, f"/v1/runs/{run_id}/events", comments=True, limit=10
        )
        assert sum(frame.comment for frame in frames) >= 3, frames
        await api.http.post(f"/v1/runs/{run_id}/cancel")


async def test_tokens_are_bound_to_partitions(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    alice, bob = "alice-token-0123456789", "bob-token-0123456789ab"
    tokens = {alice: "tenant-a", bob: "tenant-b"}
    async with api_env(client, task_queue, config(), tmp_path, tokens=tokens) as api:
        missing = await api.http.get("/v1/sessions")
        assert_problem(missing, 401, "unauthorized")
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = await api.http.get("/v1/sessions", headers={"Authorization": "Bearer nope"})
        assert_problem(wrong, 401, "unauthorized")
        assert (await api.http.get("/v1/info")).json()["auth_required"] is True

        as_alice = {"Authorization": f"Bearer {alice}"}
        as_bob = {"Authorization": f"Bearer {bob}"}
        response = await api.http.post(
            "/v1/runs", json=run_body(session={"session_id": "a1"}), headers=as_alice
        )
        assert response.status_code == 201, response.text
        run_id = response.json()["run_id"]
        assert (await result(api, run_id, **as_alice))["outcome"] == "completed"
        record = (await api.http.get(f"/v1/runs/{run_id}", headers=as_alice)).json()
        assert record["partition_key"] == "tenant-a"
        for path in ("", "/result", "/tree", "/events"):
            assert_problem(
                await api.http.get(f"/v1/runs/{run_id}{path}", headers=as_bob), 404, "run_not_found"
            )
        for path, body in (("/messages", {"messages": ["x"]}), ("/cancel", None)):
            answer = await api.http.post(f"/v1/runs/{run_id}{path}", json=body, headers=as_bob)
            assert_problem(answer, 404, "run_not_found")
        alice_sessions = (await api.http.get("/v1/sessions", headers=as_alice)).json()
        assert [session["session_id"] for session in alice_sessions] == ["a1"]
        assert (await api.http.get("/v1/sessions", headers=as_bob)).json() == []
        assert_problem(
            await api.http.get("/v1/sessions?partition=tenant-a", headers=as_bob),
            422,
            "invalid_request",
            "partition",
        )
        other = run_body(runtime_context={"partition_key": "tenant-a"})
        assert_problem(
            await api.http.post("/v1/runs", json=other, headers=as_bob),
            422,
            "invalid_request",
            "runtime_context.partition_key",
        )
        me = (await api.http.get("/v1/whoami", headers=as_bob)).json()
        assert me["partition_key"] == "tenant-b"


async def test_bad_input_is_a_problem_naming_the_field(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, config(), tmp_path) as api:
        cases: list[tuple[str, str, Any, dict[str, str], str]] = [
            ("POST", "/v1/runs", {"input": "hi"}, {}, "entry_agent"),
            ("POST", "/v1/runs", {"entry_agent": "helper", "input": []}, {}, "input"),
            ("POST", "/v1/runs", run_body(bogus=1), {}, "bogus"),
            ("POST", "/v1/runs", run_body(session={"session_id": " "}), {}, "session.session_id"),
            (
                "POST",
                "/v1/runs",
                run_body(idempotency_key="a"),
                {"Idempotency-Key": "b"},
                "idempotency_key",
            ),
            ("GET", "/v1/runs/run-x/result?wait=-1", None, {}, "wait"),
            # UTF-8 bytes read as Latin-1 would be another key (a user's got a mojibake run id).
            (
                "POST",
                "/v1/runs",
                run_body(),
                {"Idempotency-Key": "h\u00e9llo".encode()},
                "Idempotency-Key",
            ),
            ("GET", "/v1/runs/run-x/events?format=xml", None, {}, "format"),
            ("GET", "/v1/runs/bad%20id", None, {}, "run_id"),
            ("POST", "/v1/runs/run-x/messages", {"messages": []}, {}, "messages"),
            ("GET", "/v1/sessions?partition=%20", None, {}, "partition"),
        ]
        for method, path, body, headers, field in cases:
            response = await api.http.request(method, path, json=body, headers=headers)
            assert_problem(response, 422, "invalid_request", field)
        not_json = await api.http.post(
            "/v1/runs", content=b"{", headers={"Content-Type": "application/json"}
        )
        assert not_json.status_code == 422 and not_json.headers["content-type"] == PROBLEM
        run_id = await start(api, run_body())
        bad_cursor = await api.http.get(
            f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": "soon"}
        )
        assert_problem(bad_cursor, 422, "invalid_request", "Last-Event-ID")
        assert_problem(await api.http.get("/v1/runs/run-nope"), 404, "run_not_found")
        nan = await api.http.get(f"/v1/runs/{run_id}/result?wait=nan")
        assert_problem(nan, 422, "invalid_request", "wait")
        assert "finite number" in nan.json()["detail"]  # (it said "at most 300")
        empty = await api.http.post(f"/v1/runs/{run_id}/messages", json={"messages": [" "]})
        assert_problem(empty, 422, "invalid_request", "messages.0")
        assert_problem(await api.http.get("/v1/nothing"), 404, "not_found")
        huge = run_body(text="x" * (5 * 1024 * 1024))
        assert_problem(await api.http.post("/v1/runs", json=huge), 413, "payload_too_large")
        assert_problem(await api.http.delete("/v1/sessions"), 405, "method_not_allowed")


async def test_bodies_must_be_strict_json_and_cursors_fit_a_database_integer(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """What a demanding client sends wrong: each answer is a 422 naming the field (before:
    a 500 for a cursor over 2**63-1, a character offset as `field`, 400s with code `error`,
    NaN taken as a number, requests the workers' configuration refuses started anyway,
    misspelt fields ignored, small chunked bodies refused as too large)."""
    json_type = {"Content-Type": "application/json"}
    async with api_env(client, task_queue, config(), tmp_path) as api:
        run_id = await start(api, run_body(agent="echo"))
        huge = str(2**63)
        cases: list[tuple[str, str, bytes, dict[str, str], str]] = [
            ("GET", f"/v1/runs/{run_id}/events?after={huge}", b"", {}, "after"),
            ("GET", f"/v1/runs/{run_id}/events", b"", {"Last-Event-ID": huge}, "Last-Event-ID"),
            ("POST", "/v1/runs", b'{"entry_agent": ', json_type, "body"),
            ("POST", "/v1/runs", b"", json_type, "body"),
            ("POST", "/v1/runs", b"entry_agent=echo", {"Content-Type": "text/plain"}, "body"),
            ("POST", "/v1/runs", b"[" * 100_000, json_type, "body"),
            ("POST", "/v1/runs", b"\xff\xfe{}", json_type, "body"),
            (
                "POST",
                "/v1/runs",
                b'{"entry_agent": "echo", "input": "x", "metadata": {"n": NaN}}',
                json_type,
                "body",
            ),
            (
                "POST",
                f"/v1/runs/{run_id}/messages",
                b'{"messages": ["hi"], "role": "x"}',
                json_type,
                "role",
            ),
        ]
        for method, path, body, headers, field in cases:
            response = await api.http.request(method, path, content=body, headers=headers)
            assert_problem(response, 422, "invalid_request", field)
        not_utf8 = await api.http.post("/v1/runs", content=b"\xff\xfe{}", headers=json_type)
        assert_problem(not_utf8, 422, "invalid_request", "body")
        assert "UTF-8" in not_utf8.json()["detail"]
        # The workers' configuration refuses what they could not run: nothing starts.
        for body_, field_ in (
            (run_body(agent="nobody"), "entry_agent"),
            (run_body(agent="echo", limits={"max_depth": 50}), "limits.max_depth"),
        ):
            response = await api.http.post("/v1/runs", json=body_)
            assert_problem(response, 422, "invalid_request", field_)

        async def chunked(size: int) -> Any:
            body = json.dumps(run_body(agent="echo", metadata={"pad": "x" * size})).encode()

            async def chunks() -> Any:
                for at in range(0, len(body), 65536):
                    yield body[at : at + 65536]

            return await api.http.post("/v1/runs", content=chunks(), headers=json_type)

        assert (await chunked(10)).status_code == 201
        assert_problem(await chunked(5 * 1024 * 1024), 413, "payload_too_large")


def test_the_info_endpoint_declares_no_problem_answers() -> None:
    """`GET /v1/info` needs no token and names no run: it declared a 401 and a 404 it never
    gives (a generated client would handle them)."""
    responses = openapi_schema()["paths"]["/v1/info"]["get"]["responses"]
    assert set(responses) == {"200"}


def test_openapi_document_is_checked_in() -> None:
    """docs/openapi.json is the app's schema: regenerate it with
    ``python -m otherone.api --openapi > docs/openapi.json`` when the API changes."""
    schema = openapi_schema()
    checked_in = json.loads(OPENAPI_FILE.read_text(encoding="utf-8"))
    assert checked_in == schema, "docs/openapi.json is stale: regenerate it (see the docstring)"
    printed = subprocess.run(
        [sys.executable, "-m", "otherone.api", "--openapi"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(printed.stdout) == schema
    assert {"/v1/runs", "/v1/runs/{run_id}/events", "/v1/sessions"} <= set(schema["paths"])


async def test_openapi_document_and_page_are_served(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    schema = openapi_schema()
    async with api_env(client, task_queue, config(), tmp_path) as api:
        assert (await api.http.get("/openapi.json")).json() == schema
        page = await api.http.get("/")
        assert page.status_code == 200 and "/assets/app.js" in page.text
        assert "http" not in page.text.replace("http-equiv", "")  # nothing from elsewhere
        script = await api.http.get("/assets/app.js")
        assert script.status_code == 200 and "text/javascript" in script.headers["content-type"]


async def test_cors_only_for_configured_origins(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    app = "https://app.example.com"
    async with api_env(client, task_queue, config(), tmp_path, cors_origins=(app,)) as api:
        for origin, allowed in ((app, True), ("https://evil.example.com", False)):
            preflight = await api.http.options(
                "/v1/runs",
                headers={
                    "Origin": origin,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization,idempotency-key",
                },
            )
            assert (preflight.headers.get("access-control-allow-origin") == origin) is allowed
    settings = Settings(serve_cors_origins=f"{app}, http://localhost:3000", _env_file=None)  # type: ignore[call-arg]
    assert settings.serve_cors_origins == (app, "http://localhost:3000")


def test_tokens_setting_and_bind_address() -> None:
    assert parse_tokens(
        "abcdefghijklmnop:tenant-a, qrstuvwxyz012345:org:b, 0123456789abcdef:org:c=ops@x.org=1"
    ) == {
        "abcdefghijklmnop": ApiToken("tenant-a"),
        "qrstuvwxyz012345": ApiToken("org:b"),
        "0123456789abcdef": ApiToken("org:c", "ops@x.org=1"),
    }
    assert parse_tokens("abcdefghijklmnop:tenant-a")["abcdefghijklmnop"].decider == "api:tenant-a"
    for bad in (
        "justatoken",
        "short:tenant",
        "abcdefghijklmnop: bad partition",
        "abcdefghijklmnop:tenant-a=",
        f"abcdefghijklmnop:tenant-a={'x' * 257}",
    ):
        with pytest.raises(ConfigurationError, match="OTHERONE_SERVE_TOKENS"):
            parse_tokens(bad)
    # Set to nothing is a mistake, not "no authentication"; a token granting two partitions
    # would have let the last one win.
    for bad, problem in (
        (",,,", "holds no token"),
        (" ", "holds no token"),
        (
            "abcdefghijklmnop:tenant-a,abcdefghijklmnop:tenant-b",
            "entry 2: the token is given twice",
        ),
    ):
        with pytest.raises(ConfigurationError, match=problem):
            parse_tokens(bad)
    assert parse_tokens("") == {} and parse_tokens(None) == {}
    open_settings = Settings(serve_host="0.0.0.0", _env_file=None)  # type: ignore[call-arg]
    host, note = bind_host(open_settings, {})
    assert host == "127.0.0.1" and note is not None and "127.0.0.1 only" in note
    assert bind_host(open_settings, {"abcdefghijklmnop": "a"}) == ("0.0.0.0", None)


def test_a_port_in_use_is_refused_before_serving() -> None:
    """`otherone serve` on a port another program listens on: one clear error naming the
    setting (it used to connect to Temporal, then print uvicorn's traceback and exit 3)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match=r"OTHERONE_SERVE_PORT.*in use"):
            check_can_listen("127.0.0.1", port)
    check_can_listen("127.0.0.1", port)  # free again


async def test_a_stream_follows_a_run_that_starts_later_than_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Streams opened on a fresh run (no events yet) are woken by the poller."""
    async with api_env(client, task_queue, config(), tmp_path) as api:
        run_ids = [await start(api, run_body()) for _ in range(3)]
        streams = [read_stream(api.http, f"/v1/runs/{run_id}/events") for run_id in run_ids]
        results = await asyncio.wait_for(asyncio.gather(*streams), timeout=60)
        for run_id, (_, frames) in zip(run_ids, results, strict=True):
            assert frames[-1].event == "run_completed"
            assert len(frames) == len(api.env.store.read_events(run_id))


@tool(approval="always")
def send_note(to: str, text: str) -> str:
    """Send a note to someone.

    Args:
        to: Who gets it.
        text: What it says.
    """
    return f"sent to {to}"


def approvals_config(approvers: tuple[str, ...] = (), calls: tuple[str, ...] = ("note",)) -> Any:
    from otherone.definitions import AccessPolicy, AgentDefinition, ApprovalRule

    turn = {
        "tool_calls": [
            {"id": call_id, "name": "send_note", "arguments": {"to": "bo", "text": "hi"}}
            for call_id in calls
        ]
    }
    return scripted_config(
        {"mailer": [turn, {"text": "Done."}]},
        agents=[
            AgentDefinition(
                id="mailer",
                description="sends notes",
                tools=AccessPolicy.allow("send_note"),
                approval={"send_note": ApprovalRule(approvers=approvers)} if approvers else {},
            )
        ],
        tools=[send_note],
    )


async def open_approvals(api: ApiEnv, run_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    async def listed() -> bool:
        nonlocal found
        found = (await api.http.get(f"/v1/runs/{run_id}/approvals")).json()
        return bool(found)

    await wait_until(listed, within=30, message="the approval request")
    return found


async def test_approvals_are_listed_and_decided(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    # Two calls, so that the run still waits (for "later") once "note" is decided: a decision
    # that reaches a run which has ended meanwhile gets another answer than approval_conflict.
    config = approvals_config(calls=("note", "later"))
    async with api_env(client, task_queue, config, tmp_path) as api:
        approved = await start(api, run_body("mailer", "note bo"))
        requests = {r["call_id"]: r for r in await open_approvals(api, approved)}
        assert sorted(requests) == ["later", "note"]
        request = requests["note"]
        assert request["tool_name"] == "send_note"
        assert request["run_id"] == approved and request["decision"] is None
        listed = (await api.http.get("/v1/approvals")).json()
        assert sorted(r["call_id"] for r in listed) == ["later", "note"]
        path = f"/v1/runs/{approved}/approvals/note"
        no_reason = await api.http.post(path, json={"decision": "deny"})
        assert_problem(no_reason, 422, "invalid_request", "reason")
        bad_arguments = await api.http.post(
            path, json={"decision": "approve", "arguments": {"to": 3, "text": "hi"}}
        )
        assert_problem(bad_arguments, 422, "invalid_request", "arguments")
        assert_problem(
            await api.http.post(
                f"/v1/runs/{approved}/approvals/nope", json={"decision": "approve"}
            ),
            404,
            "approval_not_found",
        )
        decided = await api.http.post(path, json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        assert decided.json()["decision"]["decision"] == "approved"
        again = await api.http.post(path, json={"decision": "approve"})
        assert again.status_code == 200  # the same decision again is accepted
        other = await api.http.post(path, json={"decision": "deny", "reason": "no"})
        assert_problem(other, 409, "approval_conflict")
        later = await api.http.post(
            f"/v1/runs/{approved}/approvals/later", json={"decision": "approve"}
        )
        assert later.status_code == 200, later.text
        assert (await result(api, approved))["output"]["value"] == "Done."

        denied = await start(api, run_body("mailer", "note bo again"))
        await open_approvals(api, denied)
        refused = await api.http.post(
            f"/v1/runs/{denied}/approvals/note", json={"decision": "deny", "reason": "not now"}
        )
        assert refused.status_code == 200, refused.text
        later = await api.http.post(
            f"/v1/runs/{denied}/approvals/later", json={"decision": "approve"}
        )
        assert later.status_code == 200, later.text
        assert (await result(api, denied))["outcome"] == "completed"
        decided_events = [
            event.event
            for event in api.env.store.read_events(denied)
            if event.event["type"] == "approval_decided"
        ]
        assert decided_events and decided_events[0]["decision"] == "denied"
        await assert_denied_in_streams(api, denied, "note")


async def assert_denied_in_streams(api: ApiEnv, run_id: str, call_id: str) -> None:
    """A denied call is a `tool_denied` frame of the SSE stream, with no `tool_started`; in
    AG-UI a call (START, ARGS, END) whose RESULT is the denial, so every call has its result."""
    _, frames = await read_stream(api.http, f"/v1/runs/{run_id}/events")
    mine = [frame.event for frame in frames if frame.json()["event"].get("tool_call_id") == call_id]
    assert mine == ["tool_denied"]
    _, frames = await read_stream(api.http, f"/v1/runs/{run_id}/events?format=ag-ui")
    adapter: TypeAdapter[Any] = TypeAdapter(Event)
    events = [adapter.validate_json(frame.data) for frame in frames if frame.data]
    calls = [event for event in events if getattr(event, "tool_call_id", None) == call_id]
    kinds = [event.type.value for event in calls]
    assert kinds == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    assert calls[-1].content.startswith("denied: a person denied this call")
    starts = [e.tool_call_id for e in events if e.type.value == "TOOL_CALL_START"]
    results = [e.tool_call_id for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert sorted(starts) == sorted(results)


async def test_approvals_are_decided_as_the_tokens_identity(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A request naming approvers is decidable through the API by a token whose identity is one
    of them (403 approval_not_allowed for another token, even of the same partition)."""
    alice, plain = "alice-token-0123456789", "plain-token-0123456789"
    tokens = {alice: ApiToken("tenant-a", identity="alice"), plain: "tenant-a"}
    as_alice = {"Authorization": f"Bearer {alice}"}
    as_plain = {"Authorization": f"Bearer {plain}"}
    # Two calls, so that the run still waits (for "later") once "note" is decided.
    config = approvals_config(approvers=("alice",), calls=("note", "later"))
    async with api_env(client, task_queue, config, tmp_path, tokens=tokens) as api:
        api.http.headers.update(as_plain)
        whoami = (await api.http.get("/v1/whoami")).json()
        assert (whoami["partition_key"], whoami["identity"]) == ("tenant-a", "api:tenant-a")
        run_id = await start(api, run_body("mailer", "note bo"))
        requests = await open_approvals(api, run_id)
        assert [r["approvers"] for r in requests] == [["alice"], ["alice"]]
        path = f"/v1/runs/{run_id}/approvals/note"
        refused = await api.http.post(path, json={"decision": "approve"})
        assert_problem(refused, 403, "approval_not_allowed")
        assert "'api:tenant-a' may not decide" in refused.json()["detail"]
        decided = await api.http.post(path, json={"decision": "approve"}, headers=as_alice)
        assert decided.status_code == 200, decided.text
        assert decided.json()["decision"]["decided_by"] == "alice"
        # The same decision sent again by someone not allowed is refused, not answered with
        # alice's result; sent again by alice, it is the same decision (200).
        again = await api.http.post(path, json={"decision": "approve"})
        assert_problem(again, 403, "approval_not_allowed")
        repeated = await api.http.post(path, json={"decision": "approve"}, headers=as_alice)
        assert repeated.status_code == 200, repeated.text
        later = f"/v1/runs/{run_id}/approvals/later"
        decided = await api.http.post(later, json={"decision": "approve"}, headers=as_alice)
        assert decided.status_code == 200, decided.text
        assert (await result(api, run_id))["output"]["value"] == "Done."


async def test_workers_says_whether_a_worker_polls_the_task_queue(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run no worker takes shows no progress: `GET /v1/workers` tells it apart from a run
    waiting for a person (the page asks it when a run has been quiet)."""
    config = scripted_config({"agent": ["hi"]})
    async with api_env(client, task_queue, config, tmp_path) as api:
        served = (await api.http.get("/v1/workers")).json()
        token = "t" * 16
        context = ApiContext(
            temporal=client, store=api.env.store, task_queue=task_queue, tokens={token: "p"}
        )
        async with (
            ApiServer(context, log_level="warning") as server,
            httpx.AsyncClient(base_url=server.url, timeout=30) as http,
        ):
            scoped = (
                await http.get("/v1/workers", headers={"Authorization": f"Bearer {token}"})
            ).json()
        context = ApiContext(temporal=client, store=api.env.store, task_queue=f"{task_queue}-x")
        async with (
            ApiServer(context, log_level="warning") as server,
            httpx.AsyncClient(base_url=server.url, timeout=30) as http,
        ):
            unserved = (await http.get("/v1/workers")).json()
    assert served["task_queue"] == task_queue
    assert served["live_workflow_pollers"] >= 1 and served["live_activity_pollers"] >= 1
    assert "@" in served["pollers"][0]["identity"]  # pid@host, for the operator
    # A tenant (tokens) sees how many, not the operator's hosts and processes.
    assert [p["identity"] for p in scoped["pollers"]][:2] == ["worker 1", "worker 2"]
    assert unserved == {
        "task_queue": f"{task_queue}-x",
        "live_workflow_pollers": 0,
        "live_activity_pollers": 0,
        "pollers": [],
    }


class StoreThatGoesDown(Store):
    """The API's store on the workers' database, whose reads meet a database that is down (the
    driver's error, as SQLAlchemy raises it) while ``down`` is set."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise sqlalchemy.exc.OperationalError(
                "SELECT ...", {}, sqlite3.OperationalError("unable to open database file")
            )

    def read_events(self, root_run_id: str, **options: Any) -> list[Any]:
        self._check()
        return super().read_events(root_run_id, **options)

    def session_infos(self, partition_key: str, **options: Any) -> list[Any]:
        self._check()
        return super().session_infos(partition_key, **options)


async def test_a_store_outage_is_503_and_open_streams_wait_it_out(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Found by a user: endpoints reading the store answered 500 with a traceback, and open
    event streams were cut off mid-response. Now 503 `unavailable`, and a stream stays open
    (heartbeats) and goes on, gap-free, when the store is back."""
    answer = {"chunks": [f"w{i} " for i in range(8)], "chunk_delay_seconds": 0.5}
    config = scripted_config({"agent": [answer]})
    async with api_env(client, task_queue, config, tmp_path) as api:
        down = StoreThatGoesDown(api.env.store.engine)
        context = ApiContext(
            temporal=client, store=down, task_queue=task_queue, heartbeat_seconds=0.5
        )
        async with (
            ApiServer(context, log_level="warning") as server,
            httpx.AsyncClient(base_url=server.url, timeout=30) as http,
        ):
            started = await http.post("/v1/runs", json={"entry_agent": "agent", "input": "go"})
            run_id = started.json()["run_id"]
            url = f"/v1/runs/{run_id}/events"
            streaming = asyncio.ensure_future(read_stream(http, url, comments=True))
            await wait_until(
                lambda: any(
                    r.event["type"] == "model_delta" for r in api.env.store.read_events(run_id)
                )
            )
            down.down = True
            sessions = await http.get("/v1/sessions")
            await asyncio.sleep(2)  # the outage: the stream's reads fail meanwhile
            down.down = False
            status, frames = await asyncio.wait_for(streaming, 60)
    assert sessions.status_code == 503 and sessions.json()["code"] == "unavailable"
    assert status == 200
    events = [frame for frame in frames if not frame.comment]
    sequences = [int(frame.id or 0) for frame in events]
    assert sequences == list(range(1, len(sequences) + 1))  # gap-free, none twice
    assert json.loads(events[-1].data)["event"]["type"] == "run_completed"
    assert any(frame.comment for frame in frames)  # heartbeats kept it open meanwhile


class StoreThatHangs(Store):
    """A database that stops answering without closing its connections (a frozen server, a
    stalled disk): a read blocks until ``released``."""

    released = threading.Event()

    def session_infos(self, partition_key: str, **options: Any) -> list[Any]:
        self.released.wait(60)
        return super().session_infos(partition_key, **options)


async def test_a_store_that_stops_answering_is_503_in_bounded_time(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a chaos test: with the database frozen a request waited as long as it was
    (170 s and counting); TCP keeps such a connection open, so no driver timeout fires."""
    monkeypatch.setattr(store_answers, "STORE_ANSWER_SECONDS", 0.5)
    async with api_env(client, task_queue, config(), tmp_path) as api:
        hanging = StoreThatHangs(api.env.store.engine)
        context = ApiContext(temporal=client, store=hanging, task_queue=task_queue)
        try:
            async with (
                ApiServer(context, log_level="warning") as server,
                httpx.AsyncClient(base_url=server.url, timeout=30) as http,
            ):
                answer = await asyncio.wait_for(http.get("/v1/sessions"), 10)
        finally:
            hanging.released.set()
    assert_problem(answer, 503, "unavailable")
    assert "did not answer within 0.5s" in answer.json()["detail"]


async def test_a_page_of_another_site_cannot_steer_a_server_without_tokens(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Without tokens anything that reaches the loopback listener is trusted, so a web page
    could: by DNS rebinding (its own host name resolving to 127.0.0.1; the Host header says
    so: 421) or by a cross-site POST it need not read (cancel takes no body, so no preflight:
    a page's `fetch(..., {mode: "no-cors"})` cancelled a run; its Origin says so: 403). Programs
    send neither, and the page at / is never framed."""
    async with api_env(client, task_queue, config(), tmp_path) as api:
        run_id = await start(api, run_body("slow"))
        rebound = await api.http.get("/v1/approvals", headers={"Host": "attacker.example:80"})
        assert_problem(rebound, 421, "misdirected_request")
        for host in ("localhost:1", "127.0.0.2:9", "[::1]:8080"):
            assert (await api.http.get("/v1/info", headers={"Host": host})).status_code == 200
        evil = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
        refused = await api.http.post(f"/v1/runs/{run_id}/cancel", headers=evil)
        assert_problem(refused, 403, "cross_site_request")
        assert (await api.http.get(f"/v1/runs/{run_id}")).json()["status"] == "running"
        own = {"Origin": api.url}  # the page at / itself
        assert (await api.http.post(f"/v1/runs/{run_id}/cancel", headers=own)).status_code == 202
        page = await api.http.get("/")
        assert page.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    async with api_env(
        client, task_queue, config(), tmp_path / "tokens", tokens={"a" * 16: "tenant"}
    ) as api:
        # With tokens a host name is fine (a proxy's, a machine's): the token decides.
        named = await api.http.get("/v1/info", headers={"Host": "agents.example.com"})
        assert named.status_code == 200


async def test_inputs_too_large_together_are_refused_naming_the_field(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Messages each within the limit but over it together reached Temporal, whose payload
    limit refused them: a 503 "unavailable" (which clients retry) instead of a 422."""
    big = "x" * 600_000
    async with api_env(client, task_queue, config(), tmp_path) as api:
        messages = [{"role": "user", "content": big}] * 3
        refused = await api.http.post("/v1/runs", json=run_body("slow", messages))  # type: ignore[arg-type]
        assert_problem(refused, 422, "invalid_request", "input")
        assert "altogether" in refused.json()["detail"]
        run_id = await start(api, run_body("slow"))
        steered = await api.http.post(f"/v1/runs/{run_id}/messages", json={"messages": [big] * 3})
        assert_problem(steered, 422, "invalid_request", "messages")


async def _post_ag_ui(api: ApiEnv, agent: str, body: dict[str, Any]) -> tuple[int, list[Any]]:
    """POST a RunAgentInput as AG-UI's HttpAgent does; the status and the events it streams."""
    adapter: TypeAdapter[Any] = TypeAdapter(Event)
    events: list[Any] = []
    headers = {"Accept": "text/event-stream"}
    async with api.http.stream("POST", f"/v1/ag-ui/{agent}", json=body, headers=headers) as got:
        if got.status_code != 200:
            await got.aread()
            return got.status_code, [got.json()]
        async for line in got.aiter_lines():
            if line.startswith("data: "):
                events.append(adapter.validate_json(line.removeprefix("data: ")))
    return 200, events


def _agent_input(thread: str, run: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The body `@ag-ui/client`'s HttpAgent sends (camelCase, every field)."""
    return {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


async def test_an_ag_ui_client_runs_an_agent_with_its_own_request(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`POST /v1/ag-ui/{agent}` takes AG-UI's RunAgentInput and answers with the run's AG-UI
    events: the thread is the session (the server keeps the conversation, so a later request's
    history is not taken again), the run id makes the start idempotent."""
    script = {"talker": ["an answer"]}  # each run's first turn
    async with api_env(client, task_queue, scripted_config(script), tmp_path) as api:
        hello = {"id": "m1", "role": "user", "content": "hello"}
        status, events = await _post_ag_ui(api, "talker", _agent_input("thread-1", "r1", [hello]))
        assert status == 200, events
        types = [event.type.value for event in events]
        assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED", types
        assert events[0].thread_id == "thread-1"
        text = "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert text == "an answer"
        run_id = events[0].run_id
        assert run_id.startswith("talker-")  # as readable as the CLI's run ids

        # The same AG-UI run again (a client's retry): the same run, not a second one.
        _, again = await _post_ag_ui(api, "talker", _agent_input("thread-1", "r1", [hello]))
        assert again[0].run_id == run_id

        # The next turn: the client sends the whole thread; only its new message is taken.
        thread = [
            hello,
            {"id": "m2", "role": "assistant", "content": "an answer"},
            {"id": "m3", "role": "user", "content": [{"type": "text", "text": "and now?"}]},
        ]
        _, second = await _post_ag_ui(api, "talker", _agent_input("thread-1", "r2", thread))
        assert second[0].run_id != run_id and second[0].thread_id == "thread-1"
        assert second[-1].type.value == "RUN_FINISHED"
        entries = api.env.store.load_entries(DEFAULT_PARTITION, "thread-1")
        assert [(e.role, e.content) for e in entries] == [
            ("user", "hello"),
            ("assistant", "an answer"),
            ("user", "and now?"),
            ("assistant", "an answer"),
        ]

        # Bad requests are refused before anything starts, naming the field.
        for body, field in (
            ({"threadId": "t"}, "runId"),
            (
                _agent_input("t", "r", [{"id": "a", "role": "assistant", "content": "x"}]),
                "messages",
            ),
        ):
            status, [problem] = await _post_ag_ui(api, "talker", body)
            assert (status, problem["field"]) == (422, field), problem
        status, [problem] = await _post_ag_ui(api, "ghost", _agent_input("t", "r", [hello]))
        assert status == 422 and problem["field"] == "entry_agent", problem
