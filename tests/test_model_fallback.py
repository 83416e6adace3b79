"""Model fallbacks and per-request model choice (issue 43).

A profile's ``fallbacks`` answer a turn its call could not (an outage, 5xx/429 after the
profile's attempts, a timeout, a refused connection), with the same context and tools; errors
another provider would repeat (400, 401) do not fall back; a later turn tries the run's model
again. The model is a real HTTP server on 127.0.0.1 speaking OpenAI's streaming wire format
(tests/fixtures/providers/wire_server.py): two profiles, two servers. Each profile makes at most
two attempts (``max_attempts``), so the tests are quick.

A request (`AgentRunRequest.model`, ``otherone run --model``, the HTTP API) and an agent call
may choose the model among those the agent allows (its own and its ``models``); anything else
is refused with an error naming the field.
"""

from __future__ import annotations

import json
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.errors import ConfigurationError, FailureCode, InvalidRequestError
from otherone.runs import AgentCallRequest, RunOutcome
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.worker.app import build_worker
from otherone.worker.telemetry import OtheroneActivityInterceptor
from otherone.workflows.model_fallbacks import falls_back
from tests.api_env import api_env
from tests.fixtures.providers.wire_server import Reply, Seen, WireServer, openai_stream
from tests.harness import agent_env

pytestmark = pytest.mark.timeout(120)

GOOD = Reply(body=openai_stream(["backup ", "answer"]))
STORM = Reply.error(503, {"error": {"message": "overloaded"}}, **{"retry-after-ms": "1"})


def closed_port() -> int:
    """A port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _profile(profile_id: str, base_url: str, **fields: Any) -> ModelProfile:
    return ModelProfile.model_validate(
        {
            "id": profile_id,
            "provider": "local",
            "model": f"{profile_id}-model",
            "base_url": f"{base_url}/v1",
            "max_attempts": 2,
            **fields,
        }
    )


def two_profiles(primary_url: str, backup_url: str, **primary: Any) -> RuntimeConfig:
    """``primary`` (falls back to ``backup``) and ``backup``; the agent ``solo`` runs on
    ``primary`` and may be asked to run on ``backup``."""
    models = [
        _profile("primary", primary_url, fallbacks=["backup"], **primary),
        _profile("backup", backup_url),
    ]
    agent = AgentDefinition(
        id="solo", description="answers", model="primary", models=("primary", "backup")
    )
    return RuntimeConfig(agents=[agent], models=models, default_model="primary")


async def _run(env: Any, **fields: Any) -> tuple[Any, list[dict[str, Any]]]:
    result = await env.agents.run(build_request(entry_agent="solo", input="hi", **fields))
    events = [record.event async for record in env.agents.events(result.run_id)]
    return result, events


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == kind]


# --------------------------------------------------------------------------- falling back


@pytest.mark.parametrize(
    "fault",
    ["503 storm", "timeout", "connection refused"],
)
async def test_a_fault_retries_did_not_fix_falls_back_and_the_backup_answers_the_turn(
    client: Client, task_queue: str, tmp_path: Path, fault: str
) -> None:
    primary_reply = {
        "503 storm": STORM,
        # Half a stream, then silence: the read timeout (other.timeout) cuts it.
        "timeout": Reply(body=openai_stream(["never ", "ends"])[:40], stall=True),
    }.get(fault)
    async with (
        WireServer(lambda seen: primary_reply or GOOD) as primary,
        WireServer(lambda seen: GOOD) as backup,
    ):
        primary_url = primary.url
        if fault == "connection refused":
            primary_url = f"http://127.0.0.1:{closed_port()}"
        config = two_profiles(primary_url, backup.url, other={"timeout": 1.0})
        async with agent_env(client, task_queue, config, tmp_path) as env:
            result, events = await _run(env)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "backup answer"
    if fault != "connection refused":
        assert len(primary.requests) == 2  # the profile's two attempts, no more
    assert len(backup.requests) == 1
    # The same context and tools: the backup got the turn's messages as the primary would.
    sent = backup.requests[0].body
    assert sent["model"] == "backup-model"
    assert [message["role"] for message in sent["messages"]] == ["user"]
    if fault != "connection refused":
        assert primary.requests[0].body["messages"] == sent["messages"]
    (fallback,) = _of(events, "model_fallback")
    assert fallback["turn"] == 1 and fallback["attempts"] == 2
    assert (fallback["from_model"], fallback["to_model"]) == ("primary", "backup")
    assert "primary" in fallback["error"]
    starts = _of(events, "model_started")
    assert [(e["model"], e["attempt"]) for e in starts] == [
        ("primary", 1),
        ("primary", 2),
        ("backup", 3),
    ]
    assert starts[2]["fallback_from"] == "primary" and starts[2]["supersedes_attempt"] == 2
    ends = _of(events, "model_completed")
    assert [(e["model"], e["attempt"], "error" in e) for e in ends] == [
        ("primary", 1, True),
        ("primary", 2, True),
        ("backup", 3, False),
    ]
    assert result.usage.models == {"backup": 1}
    assert result.usage.model_calls == 1  # one turn: the fallback is not another call


async def test_a_later_turn_tries_the_run_s_model_again(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Turn 1 falls back; turn 2 (after the session's next message) is the primary's again."""
    calls = {"count": 0}

    def flaky(seen: Seen) -> Reply:
        calls["count"] += 1
        return STORM if calls["count"] <= 2 else Reply(body=openai_stream(["primary again"]))

    async with (
        WireServer(flaky) as primary,
        WireServer(lambda seen: GOOD) as backup,
        agent_env(client, task_queue, two_profiles(primary.url, backup.url), tmp_path) as env,
    ):
        first, _ = await _run(env, session={"session_id": "s1"})
        second, events = await _run(env, session={"session_id": "s1"})
    assert first.text == "backup answer" and first.usage.models == {"backup": 1}
    assert second.text == "primary again" and second.usage.models == {"primary": 1}
    assert not _of(events, "model_fallback")
    # The primary's next call had the whole conversation, the backup's answer included.
    roles = [message["role"] for message in primary.requests[-1].body["messages"]]
    assert roles == ["user", "assistant", "user"]


@pytest.mark.parametrize("status", [400, 401])
async def test_an_error_another_provider_would_repeat_does_not_fall_back(
    client: Client, task_queue: str, tmp_path: Path, status: int
) -> None:
    refused = Reply.error(status, {"error": {"message": "bad request"}})
    async with (
        WireServer(lambda seen: refused) as primary,
        WireServer(lambda seen: GOOD) as backup,
        agent_env(client, task_queue, two_profiles(primary.url, backup.url), tmp_path) as env,
    ):
        result, events = await _run(env)
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.MODEL_ERROR
    assert f"HTTP {status}" in result.failure.message
    assert len(primary.requests) == 1  # not retried either
    assert backup.requests == [] and not _of(events, "model_fallback")


async def test_an_exhausted_chain_fails_the_run_with_the_last_error(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """primary -> backup -> last (a fallback's own fallbacks follow it): all three fail."""
    last_reply = Reply.error(502, {"error": {"message": "the last one is down too"}})
    async with (
        WireServer(lambda seen: STORM) as primary,
        WireServer(lambda seen: STORM) as backup,
        WireServer(lambda seen: last_reply) as last,
    ):
        config = RuntimeConfig(
            agents=[AgentDefinition(id="solo", description="answers", model="primary")],
            models=[
                _profile("primary", primary.url, fallbacks=["backup"]),
                _profile("backup", backup.url, fallbacks=["last"]),
                _profile("last", last.url, max_attempts=1),
            ],
        )
        async with agent_env(client, task_queue, config, tmp_path) as env:
            result, events = await _run(env)
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.MODEL_ERROR
    assert "model 'last'" in result.failure.message
    assert "the last one is down too" in result.failure.message
    assert (len(primary.requests), len(backup.requests), len(last.requests)) == (2, 2, 1)
    hops = [(e["from_model"], e["to_model"]) for e in _of(events, "model_fallback")]
    assert hops == [("primary", "backup"), ("backup", "last")]
    starts = _of(events, "model_started")
    assert [e["attempt"] for e in starts] == [1, 2, 3, 4, 5]
    assert len(_of(events, "model_completed")) == 5  # every start has its end


# --------------------------------------------------------------------------- configuration


def _toml(tmp_path: Path, models: str, agent: str = "") -> Path:
    path = tmp_path / "otherone.toml"
    path.write_text(
        textwrap.dedent(
            """
            [runtime]
            default_model = "a"

            {models}

            [agents.solo]
            description = "answers"
            {agent}
            """
        ).format(models=textwrap.dedent(models), agent=agent)
    )
    return path


_THREE = """
[models.a]
provider = "scripted"
model = "x"
{a}
[models.b]
provider = "scripted"
model = "y"
{b}
[models.c]
provider = "scripted"
model = "z"
"""


@pytest.mark.parametrize(
    ("a", "b", "table", "message"),
    [
        ('fallbacks = ["nope"]', "", "models.a", "unknown model 'nope'"),
        ('fallbacks = ["a"]', "", "models.a", "cannot be its own fallback"),
        ('fallbacks = ["b"]', 'fallbacks = ["c", "a"]', "models.a", "a -> b -> a"),
        ('fallbacks = ["b", "b"]', "", "models.a", "more than once"),
        ("max_attempts = 0", "", "models.a", "greater than or equal to 1"),
    ],
)
def test_bad_fallbacks_are_refused_at_load_naming_the_field(
    tmp_path: Path, a: str, b: str, table: str, message: str
) -> None:
    path = _toml(tmp_path, _THREE.format(a=a, b=b))
    with pytest.raises(ConfigurationError) as refused:
        load_config(path)
    assert refused.value.table == table
    assert refused.value.field in ("fallbacks", "max_attempts")
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ('models = ["a", "nope"]', "unknown model 'nope'"),
        ('models = ["b", "c"]', "must include the agent's own model 'a'"),
        ('model = "b"\nmodels = ["a", "c"]', "must include the agent's own model 'b'"),
    ],
)
def test_an_agent_s_models_name_known_profiles_and_its_own(
    tmp_path: Path, agent: str, message: str
) -> None:
    path = _toml(tmp_path, _THREE.format(a="", b=""), agent)
    with pytest.raises(ConfigurationError) as refused:
        load_config(path)
    assert (refused.value.table, refused.value.field) == ("agents.solo", "models")
    assert message in str(refused.value)


def test_a_chain_lists_each_fallback_then_its_own(tmp_path: Path) -> None:
    path = _toml(
        tmp_path, _THREE.format(a='fallbacks = ["b", "c"]\nmax_attempts = 3', b='fallbacks = ["c"]')
    )
    snapshot = load_config(path).snapshot()
    chain = snapshot.model_chain(snapshot.models["a"])
    assert [profile.id for profile in chain] == ["a", "b", "c"]
    assert snapshot.models["a"].max_attempts == 3


# --------------------------------------------------------------------------- choosing the model


async def test_a_request_may_choose_a_model_its_agent_allows(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with (
        WireServer(lambda seen: Reply(body=openai_stream(["primary"]))) as primary,
        WireServer(lambda seen: GOOD) as backup,
        agent_env(client, task_queue, two_profiles(primary.url, backup.url), tmp_path) as env,
    ):
        result, events = await _run(env, model="backup")
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "backup answer" and result.usage.models == {"backup": 1}
    assert primary.requests == [] and len(backup.requests) == 1
    assert [e["model"] for e in _of(events, "model_started")] == ["backup"]
    assert "fallback_from" not in _of(events, "model_started")[0]


async def test_a_model_the_agent_does_not_allow_is_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Refused by a client that knows the configuration (the CLI, the HTTP API) before any
    run starts; by the run itself (`invalid_request`) when the client does not."""
    config = two_profiles("http://127.0.0.1:9", "http://127.0.0.1:9")
    config.add_model(_profile("other", "http://127.0.0.1:9"))
    async with agent_env(client, task_queue, config, tmp_path) as env:
        checked = AgentClient(client, task_queue=task_queue, store=env.store, config=config)
        with pytest.raises(InvalidRequestError) as refused:
            await checked.start(build_request(entry_agent="solo", input="hi", model="other"))
        assert refused.value.field == "model"
        assert "model 'other' is not allowed for agent 'solo'" in str(refused.value)
        assert "allowed: primary, backup" in str(refused.value)
        result = await env.agents.run(build_request(entry_agent="solo", input="hi", model="other"))
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.INVALID_REQUEST
    assert "model 'other' is not allowed for agent 'solo'" in result.failure.message


async def test_the_http_api_takes_the_model_and_refuses_one_not_allowed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with (
        WireServer(lambda seen: Reply(body=openai_stream(["primary"]))) as primary,
        WireServer(lambda seen: GOOD) as backup,
    ):
        config = two_profiles(primary.url, backup.url)
        config.add_model(_profile("other", backup.url))
        async with api_env(client, task_queue, config, tmp_path) as api:
            body = {"entry_agent": "solo", "input": "hi", "model": "backup"}
            started = await api.http.post("/v1/runs", json=body)
            assert started.status_code == 201, started.text
            done = await api.http.get(started.json()["result_url"], params={"wait": 60})
            refused = await api.http.post("/v1/runs", json={**body, "model": "other"})
    assert done.json()["output"]["value"] == "backup answer"
    assert done.json()["usage"]["models"] == {"backup": 1}
    assert refused.status_code == 422
    assert refused.json()["field"] == "model"


def test_otherone_run_takes_model() -> None:
    from otherone.client.cli.parser import build_parser
    from otherone.client.cli.run import _request_from

    args = build_parser().parse_args(["run", "solo", "hi", "--model", "backup"])
    assert _request_from(args, None).model == "backup"


async def test_an_agent_call_may_choose_the_target_s_model_within_its_allowance(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The model's `agent.call` is offered a ``model`` (the target allows a choice); a trusted
    call chooses one too; a model the target does not allow is refused to the caller."""
    script = {
        "boss": [
            {
                "tool_calls": [
                    {
                        "id": "c1",
                        "name": "agent.call",
                        "arguments": {"agent": "helper", "task": "help", "model": "deep"},
                    },
                    {
                        "id": "c2",
                        "name": "agent.call",
                        "arguments": {"agent": "helper", "task": "help", "model": "nope"},
                    },
                ]
            },
            "done",
        ],
        "helper": ["helped"],
    }
    scripted = {"provider": "scripted", "model": "m", "script": script}
    config = RuntimeConfig(
        agents=[
            AgentDefinition(id="boss", description="boss", callable_agents=["helper"]),
            AgentDefinition(
                id="helper", description="helper", model="fast", models=("fast", "deep")
            ),
        ],
        models=[
            ModelProfile.model_validate({"id": "fast", **scripted}),
            ModelProfile.model_validate({"id": "deep", **scripted}),
            ModelProfile.model_validate({"id": "nope", **scripted}),
        ],
        default_model="fast",
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        events = [record async for record in env.agents.events(result.run_id)]
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    children = {
        record.run_id: record.event
        for record in events
        if record.agent_id == "helper" and record.event["type"] == "model_started"
    }
    assert [event["model"] for event in children.values()] == ["deep"]
    tool_results = {entry.tool_call_id: entry.content for entry in entries if entry.role == "tool"}
    refusal = json.loads(tool_results["c2"] or "{}")
    assert "model 'nope' is not allowed for agent 'helper'" in json.dumps(refusal)


async def test_a_trusted_agent_call_chooses_the_model_too(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = {"boss": [{"text": "waiting", "delay_seconds": 5}], "helper": ["helped", "again"]}
    scripted = {"provider": "scripted", "model": "m", "script": script}
    config = RuntimeConfig(
        agents=[
            AgentDefinition(id="boss", description="boss", callable_agents=["helper"]),
            AgentDefinition(
                id="helper", description="helper", model="fast", models=("fast", "deep")
            ),
        ],
        models=[
            ModelProfile.model_validate({"id": "fast", **scripted}),
            ModelProfile.model_validate({"id": "deep", **scripted}),
        ],
        default_model="fast",
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))
        chosen = await env.agents.call_agent(
            handle.run_id, "t1", AgentCallRequest(target="helper", task="help", model="deep")
        )
        refused = await env.agents.call_agent(
            handle.run_id, "t2", AgentCallRequest(target="helper", task="help", model="other")
        )
        await handle.cancel()
    assert chosen.outcome is RunOutcome.COMPLETED, chosen.failure
    assert chosen.usage.models == {"deep": 1}
    assert refused.outcome is RunOutcome.FAILED and refused.failure is not None
    assert refused.failure.code is FailureCode.INVALID_REQUEST


# --------------------------------------------------------------------------- the decision


def _failed(cause: BaseException, retry_state: RetryState) -> ActivityError:
    error = ActivityError(
        "activity error",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type="otherone.call_model",
        activity_id="2",
        retry_state=retry_state,
    )
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("cause", "retry_state", "expected"),
    [
        (ApplicationError("503", type="model_error"), RetryState.MAXIMUM_ATTEMPTS_REACHED, True),
        (
            ApplicationError("401", type="model_error", non_retryable=True),
            RetryState.NON_RETRYABLE_FAILURE,
            False,
        ),
        (
            ApplicationError("db down", type="storage_error"),
            RetryState.MAXIMUM_ATTEMPTS_REACHED,
            False,
        ),
        (
            ApplicationError("too long", type="budget_exceeded", non_retryable=True),
            RetryState.NON_RETRYABLE_FAILURE,
            False,
        ),
        (
            TimeoutError("timed out", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[]),
            RetryState.MAXIMUM_ATTEMPTS_REACHED,
            True,
        ),
        (
            TimeoutError("no heartbeat", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[]),
            RetryState.MAXIMUM_ATTEMPTS_REACHED,
            False,
        ),
        (CancelledError("cancelled"), RetryState.CANCEL_REQUESTED, False),
    ],
)
def test_which_failures_fall_back(
    cause: BaseException, retry_state: RetryState, expected: bool
) -> None:
    assert falls_back(_failed(cause, retry_state)) is expected


async def test_the_model_call_span_names_the_profile_that_answered(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    failing = {"fail": {"message": "HTTP 503: overloaded", "attempts": 9}}
    scripted = {"provider": "scripted", "model": "m"}
    config = RuntimeConfig(
        agents=[AgentDefinition(id="solo", description="answers", model="primary")],
        models=[
            ModelProfile.model_validate(
                {
                    "id": "primary",
                    **scripted,
                    "max_attempts": 1,
                    "fallbacks": ["backup"],
                    "script": {"solo": [failing]},
                }
            ),
            ModelProfile.model_validate({"id": "backup", **scripted, "script": {"solo": ["ok"]}}),
        ],
    )
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        interceptor = OtheroneActivityInterceptor(provider.get_tracer("test"), config)
        async with build_worker(
            client, config, store, task_queue=task_queue, interceptors=[interceptor]
        ):
            agents = AgentClient(client, task_queue=task_queue, store=store)
            result = await agents.run(build_request(entry_agent="solo", input="hi"))
    finally:
        store.close()
        provider.shutdown()
    assert result.text == "ok" and result.usage.models == {"backup": 1}
    spans = [
        span
        for span in exporter.get_finished_spans()
        if (span.attributes or {}).get("gen_ai.operation.name") == "chat"
    ]
    seen = [
        (
            (span.attributes or {}).get("otherone.model_profile_id"),
            (span.attributes or {}).get("otherone.model_fallback_from"),
        )
        for span in spans
    ]
    assert seen == [("primary", None), ("backup", "primary")]
    assert (spans[1].attributes or {}).get("gen_ai.request.model") == "m"


def test_otherone_run_and_watch_say_when_a_turn_falls_back() -> None:
    from otherone.client.console import fallback_line

    line = fallback_line(
        {
            "type": "model_fallback",
            "turn": 2,
            "from_model": "gpt",
            "to_model": "claude",
            "attempts": 3,
            "error": "model 'gpt' (openai, attempt 3): HTTP 503\nService Unavailable",
        }
    )
    assert line.startswith("↪ model 'gpt' failed after 3 attempt(s): 'claude' answers turn 2")
    assert "\n" not in line
