"""Spans by the OpenTelemetry GenAI semantic conventions, exported over OTLP (HTTP/protobuf) to
a receiver on 127.0.0.1 that decodes them as a backend does (issue 48): names, the tree's
parent/child structure, the conventions' attributes and content (opt-in, redacted, bounded)."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from otherone import redaction
from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.runs import AgentRunResult, RunOutcome
from otherone.store import Store
from otherone.worker import genai_spans
from otherone.worker.app import build_worker
from otherone.worker.genai_spans import agent_span_id, call_span_id, tree_trace_id
from otherone.worker.settings import Settings
from otherone.worker.telemetry import OtheroneActivityInterceptor, worker_telemetry
from tests.fixtures.providers.wire_server import Reply, WireServer, fixture
from tests.harness import scripted_config, wait_until
from tests.otlp_receiver import Received, Receiver, otlp_provider, otlp_receiver
from tests.processes import BackgroundProcess, address_of, cli_env, start_worker
from tests.test_handoff import chain_config
from tests.test_providers_http import base, collect, key, make_request
from tests.test_spawn import agent as spawn_agent
from tests.test_spawn import boss, calls, control, spawn
from tests.test_tracing import CONTENT_KEYS, traced_run, traced_team

__all__ = ["key"]  # the provider tests' API-key fixture, used here too

#: Every ``gen_ai.*`` attribute the installed semantic conventions define.
CONVENTION_ATTRIBUTES = {
    value
    for name, value in vars(gen_ai_attributes).items()
    if name.startswith("GEN_AI_") and isinstance(value, str)
}
OPENAI_ID = "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT"  # in the fixture stream
#: Names the conventions replaced (never emitted).
DEPRECATED = {"gen_ai.system", "gen_ai.prompt", "gen_ai.completion", "gen_ai.usage.prompt_tokens"}


async def exported_tree(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    task_queue: str,
    *,
    capture: bool,
    task: str,
    temporal_spans: bool = True,
) -> tuple[str, list[Received], Receiver]:
    """Run `traced_team` on a worker whose spans go over OTLP to a receiver; the run id and
    what the receiver decoded. ``temporal_spans``: Temporal's interceptor on the client."""
    with otlp_receiver() as receiver, otlp_provider(receiver.url) as provider:
        tracer = provider.get_tracer("otherone")
        client = await Client.connect(
            temporal_env.client.service_client.config.target_host,
            namespace=temporal_env.client.namespace,
            data_converter=pydantic_data_converter,
            interceptors=[TracingInterceptor(tracer)] if temporal_spans else [],
        )
        result = await traced_run(
            client, tracer, traced_team(), task_queue, tmp_path, capture=capture, input=task
        )
        assert result.outcome is RunOutcome.COMPLETED, result
        assert provider.force_flush(30_000)
        with receiver.arrived:
            assert receiver.arrived.wait_for(
                lambda: any(s.name == "invoke_agent coordinator" for s in receiver.spans), 30
            )
        return result.run_id, list(receiver.spans), receiver


def one(spans: list[Received], name: str) -> Received:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, (name, [span.name for span in spans])
    return found[0]


def by_id(spans: list[Received], span_id: bytes) -> Received:
    return next(span for span in spans if span.span_id == span_id)


def span_id(value: int) -> bytes:
    return value.to_bytes(8, "big")


def check_conventions(span: Received) -> None:
    """The conventions' attributes an operation's span must carry, and no gen_ai.* name they
    do not define."""
    attributes = span.attributes
    for name in attributes:
        if name.startswith("gen_ai."):
            assert name in CONVENTION_ATTRIBUTES, (span.name, name)
            assert name not in DEPRECATED, (span.name, name)
    operation = attributes["gen_ai.operation.name"]
    assert span.name.startswith(f"{operation} ")
    if operation == "chat":
        assert span.kind == ProtoSpan.SPAN_KIND_CLIENT
        assert attributes["gen_ai.provider.name"] == "scripted"
        assert span.name == f"chat {attributes['gen_ai.request.model']}"
        assert attributes["gen_ai.agent.name"] in {"coordinator", "worker"}
        assert attributes["gen_ai.conversation.id"]
    elif operation == "execute_tool":
        assert span.name == f"execute_tool {attributes['gen_ai.tool.name']}"
        assert attributes["gen_ai.tool.call.id"]
        assert attributes["gen_ai.tool.type"] == "function"
    elif operation == "invoke_agent":
        assert span.name == f"invoke_agent {attributes['gen_ai.agent.name']}"
        assert attributes["gen_ai.agent.id"] == attributes["gen_ai.agent.name"]
        assert attributes["gen_ai.conversation.id"] == attributes["otherone.session_id"]
    else:
        raise AssertionError(f"unexpected operation {operation!r} on {span.name}")
    for ours in ("otherone.run_id", "otherone.partition"):
        assert attributes.get(ours), (span.name, ours)


async def test_a_tree_exported_over_otlp_follows_the_genai_conventions(
    temporal_env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    secret = f"sk-genai-{secrets.token_hex(12)}"
    redaction.remember(secret)  # as a provider key in the environment is
    root, spans, receiver = await exported_tree(
        temporal_env, tmp_path, task_queue, capture=True, task=f"start with key {secret}"
    )
    child = f"{root}/worker.call_1"
    assert receiver.content_types == {"application/x-protobuf"}
    assert len({span.trace_id for span in spans}) == 1  # the whole tree: one trace

    genai = [span for span in spans if "gen_ai.operation.name" in span.attributes]
    for span in genai:
        check_conventions(span)

    # the tree: root invoke_agent > agent.call execute_tool > child invoke_agent > child chat
    root_agent = one(spans, "invoke_agent coordinator")
    child_agent = one(spans, "invoke_agent worker")
    call = one(spans, "execute_tool agent.call")
    assert root_agent.span_id == span_id(agent_span_id(root))
    assert call.span_id == span_id(call_span_id(root, "call_1"))
    assert call.parent_span_id == root_agent.span_id
    assert child_agent.parent_span_id == call.span_id
    assert child_agent.links == [root_agent.span_id]  # linked to its caller
    assert by_id(spans, root_agent.parent_span_id).name == "StartActivity:otherone.finish_run"
    chats = [span for span in genai if span.name == "chat test"]
    assert len(chats) == 5  # coordinator 3, worker 1 + its failed attempt
    for chat in chats:
        run = chat.attributes["otherone.run_id"]
        assert chat.parent_span_id == span_id(agent_span_id(run))
        assert root_agent.start <= chat.start and chat.end <= root_agent.end
    tool = one(spans, "execute_tool lookup")
    assert tool.parent_span_id == root_agent.span_id
    assert tool.attributes["gen_ai.tool.call.id"] == "t1"

    # the retried attempt is its own span, marked
    failed, retried = sorted(
        (chat for chat in chats if chat.attributes["otherone.run_id"] == child),
        key=lambda chat: chat.attributes["otherone.attempt"],
    )
    assert failed.status_code == 2 and failed.attributes["error.type"] == "model_error"  # ERROR
    assert retried.attributes["otherone.attempt"] == 2
    assert retried.attributes["otherone.retry_of_attempt"] == 1

    # usage on the chat spans and summed on the runs'
    first = min(
        (c for c in chats if c.attributes["otherone.run_id"] == root),
        key=lambda c: c.attributes["otherone.turn"],
    )
    assert first.attributes["gen_ai.usage.input_tokens"] == 11
    assert first.attributes["gen_ai.usage.output_tokens"] == 7
    assert root_agent.attributes["gen_ai.usage.input_tokens"] >= 11
    assert root_agent.attributes["otherone.run.status"] == "completed"

    # content, in the conventions' shapes, the secret redacted
    assert secret not in json.dumps([span.attributes for span in spans])
    messages = json.loads(first.attributes["gen_ai.input.messages"])
    assert messages[0] == {
        "role": "user",
        "parts": [{"type": "text", "content": "start with key <redacted>"}],
    }
    instructions = json.loads(first.attributes["gen_ai.system_instructions"])
    assert instructions[0]["type"] == "text"
    assert instructions[0]["content"].startswith("You coordinate.")
    [answer] = json.loads(first.attributes["gen_ai.output.messages"])
    assert answer["role"] == "assistant" and answer["finish_reason"]
    assert {"type": "tool_call", "id": "t1", "name": "lookup", "arguments": {"city": "Paris"}} in (
        answer["parts"]
    )
    later = max(
        (c for c in chats if c.attributes["otherone.run_id"] == root),
        key=lambda c: c.attributes["otherone.turn"],
    )
    sent = json.loads(later.attributes["gen_ai.input.messages"])
    responses = [part for message in sent for part in message["parts"]]
    tool_responses = [part for part in responses if part["type"] == "tool_call_response"]
    assert tool_responses[0] == {
        "type": "tool_call_response",
        "id": "t1",
        "response": "Paris: sunny",
    }
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"city": "Paris"}
    assert tool.attributes["gen_ai.tool.call.result"] == "Paris: sunny"


async def test_no_content_is_exported_when_capture_is_off(
    temporal_env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    _, spans, _ = await exported_tree(
        temporal_env, tmp_path, task_queue, capture=False, task="a private task"
    )
    assert any(span.name == "chat test" for span in spans)  # positive control
    for span in spans:
        assert not CONTENT_KEYS & span.attributes.keys(), span.name
    assert "a private task" not in json.dumps([span.attributes for span in spans])


async def test_without_temporal_spans_the_genai_spans_alone_make_the_tree_one_trace(
    temporal_env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    """``OTHERONE_TRACE_TEMPORAL_SPANS=false``: no Temporal spans, and still one trace (its id
    from the root run's) in which every span has its parent; the root's invoke_agent is the
    trace's root span."""
    root, spans, _ = await exported_tree(
        temporal_env, tmp_path, task_queue, capture=False, task="start", temporal_spans=False
    )
    assert not [span.name for span in spans if ":" in span.name]  # no RunActivity:..., etc.
    assert {span.trace_id for span in spans} == {tree_trace_id(root).to_bytes(16, "big")}
    root_agent = one(spans, "invoke_agent coordinator")
    assert root_agent.parent_span_id == b""
    ids = {span.span_id for span in spans}
    for span in spans:
        if span is not root_agent:
            assert span.parent_span_id in ids, span.name  # no orphan
    run_spans = [s for s in spans if s.name in ("run prepare", "run finish", "agent call check")]
    assert len(run_spans) == 5  # two prepares, two finishes, one agent call check
    for span in run_spans:  # our other spans: in their run's invoke_agent span too
        assert span.parent_span_id == span_id(agent_span_id(span.attributes["otherone.run_id"]))
    assert len([span for span in spans if span.name == "chat test"]) == 5


def test_content_is_bounded() -> None:
    huge = [{"role": "user", "content": "x" * 50_000} for _ in range(20)]
    attributes = genai_spans.input_content([{"role": "system", "content": "be brief"}, *huge])
    messages = attributes["gen_ai.input.messages"]
    assert isinstance(messages, str)
    assert len(messages) <= genai_spans.ATTRIBUTE_LIMIT_CHARS
    kept = json.loads(messages)
    assert 0 < len(kept) < len(huge)  # the oldest left out
    text = kept[-1]["parts"][0]["content"]
    assert text.endswith(genai_spans.TRUNCATED)
    assert len(text) == genai_spans.PART_LIMIT_CHARS + len(genai_spans.TRUNCATED)
    assert json.loads(str(attributes["gen_ai.system_instructions"])) == [
        {"type": "text", "content": "be brief"}
    ]
    assert len(genai_spans.bounded_text("y" * 100_000)) < 20_000


def test_content_capture_follows_the_conventions_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "OTHERONE_TRACE_CONTENT"):
        monkeypatch.delenv(name, raising=False)
    assert Settings().trace_content is False
    assert genai_spans.content_capture_enabled() is False
    for value, expected in (("true", True), ("SPAN_ONLY", True), ("false", False)):
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
        assert Settings().trace_content is expected
        assert genai_spans.content_capture_enabled() is expected
    monkeypatch.setenv("OTHERONE_TRACE_CONTENT", "false")  # ours wins
    assert Settings().trace_content is False
    assert Settings().trace_temporal_spans is True
    monkeypatch.setenv("OTHERONE_TRACE_TEMPORAL_SPANS", "false")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    telemetry = worker_telemetry(Settings(tracing=True))
    assert telemetry.tracing and not telemetry.client_tracing
    assert worker_telemetry(Settings(tracing=True, trace_temporal_spans=True)).client_tracing


@pytest.mark.parametrize(
    ("provider", "stream", "model", "response_id"),
    [
        ("openai", "openai_text.sse", "gpt-4.1-2025-04-14", OPENAI_ID),
        (
            "anthropic",
            "anthropic_tools.sse",
            "claude-sonnet-4-5-20250929",
            "msg_01XFDUDYJgAACzvnptvVoYEL",
        ),
    ],
)
async def test_the_chat_span_names_the_model_that_answered(
    key: str, provider: str, stream: str, model: str, response_id: str
) -> None:
    """``gen_ai.response.model`` / ``.id`` from the provider's own stream (a real HTTP server
    speaking its wire format), not from the profile."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with WireServer([Reply(body=fixture(stream), piece_size=9)]) as server:
        with tracer_provider.get_tracer("test").start_as_current_span("chat test-model"):
            await collect(make_request(provider, base(server, provider)))
    [span] = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["gen_ai.response.model"] == model
    assert span.attributes["gen_ai.response.id"] == response_id


KILL_CONFIG = """
[runtime]
default_model = "scripted"

[models.scripted]
provider = "scripted"
model = "test"

[[models.scripted.script.coordinator]]
tool_calls = [{ name = "agent.call", id = "c1", arguments = { agent = "helper", task = "work" } }]

[[models.scripted.script.coordinator]]
text = "final answer"

[[models.scripted.script.helper]]
text = "slow result"
delay_seconds = 2.5

[agents.coordinator]
description = "Coordinates."
callable_agents = ["helper"]

[agents.helper]
description = "Helps."
"""


async def test_a_trace_survives_a_worker_killed_mid_tree(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """Worker 1 is killed (SIGKILL) during the child's model call; worker 2 retries it and ends
    the tree. Both workers' spans are one trace, and the child's calls, made by either, nest in
    the child's invoke_agent span that worker 2 emits at the end (no span was held open)."""
    config = tmp_path / "otherone.toml"
    config.write_text(KILL_CONFIG)
    with otlp_receiver() as receiver, otlp_provider(receiver.url) as provider:
        env = cli_env(
            address_of(temporal_env),
            task_queue,
            tmp_path,
            config=config,
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.url,
            OTEL_BSP_SCHEDULE_DELAY="50",  # export at once: worker 1 will not flush at exit
            OTEL_SERVICE_NAME="otherone-worker",
        )
        env.pop("OTEL_TRACES_EXPORTER", None)
        client = await Client.connect(
            address_of(temporal_env),
            namespace=temporal_env.client.namespace,
            data_converter=pydantic_data_converter,
            interceptors=[TracingInterceptor(provider.get_tracer("client"))],
        )
        first = await start_worker(env, name="worker-1")
        second: BackgroundProcess | None = None
        store = Store.open(env["OTHERONE_DATABASE_URL"])
        try:
            agents = AgentClient(client, task_queue=task_queue, store=store)
            handle = await agents.start(build_request(entry_agent="coordinator", input="go"))
            child = f"{handle.run_id}/helper.c1"

            def child_model_started() -> bool:
                events = store.read_events(handle.run_id, limit=1000)
                return any(e.run_id == child and e.event["type"] == "model_started" for e in events)

            await wait_until(child_model_started, within=30, message="the child's model call")
            first.send_signal(signal.SIGKILL)
            await first.exit_code(within=10)
            second = await start_worker(env, name="worker-2")
            result = await asyncio.wait_for(handle.result(), 90)
            assert result.outcome is RunOutcome.COMPLETED, result

            def both_runs_ended() -> bool:
                names = [span.name for span in receiver.spans]
                return "invoke_agent coordinator" in names and "invoke_agent helper" in names

            await wait_until(both_runs_ended, within=30, message="the runs' invoke_agent spans")
        finally:
            store.close()
            await first.kill()
            if second is not None:
                await second.stop(30)
        spans = list(receiver.spans)
    runs = {span.attributes.get("otherone.run_id") for span in spans} - {None}
    assert runs == {handle.run_id, child}
    assert len({span.trace_id for span in spans}) == 1  # one trace, both workers' spans in it
    child_agent = one(spans, "invoke_agent helper")
    assert child_agent.span_id == span_id(agent_span_id(child))
    assert child_agent.parent_span_id == span_id(call_span_id(handle.run_id, "c1"))
    # the killed attempt never ended (no span); the retry's span nests in the child's run
    chats = [s for s in spans if s.name == "chat test" and s.attributes["otherone.run_id"] == child]
    assert [chat.attributes["otherone.attempt"] for chat in chats] == [2]
    assert chats[0].parent_span_id == child_agent.span_id
    # worker 1's spans (exported before the kill) are in the same tree: the root's first turn
    first_turn = [
        s
        for s in spans
        if s.name == "chat test"
        and s.attributes["otherone.run_id"] == handle.run_id
        and s.attributes["otherone.turn"] == 1
    ]
    assert len(first_turn) == 1
    assert first_turn[0].parent_span_id == span_id(agent_span_id(handle.run_id))


async def traced_in_memory(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    task_queue: str,
    config: RuntimeConfig,
    entry_agent: str,
) -> tuple[AgentRunResult, Sequence[ReadableSpan]]:
    """Run ``entry_agent`` on a worker with our spans (and Temporal's), kept in memory."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tracer_provider.get_tracer("test")
    client = await Client.connect(
        address_of(temporal_env),
        namespace=temporal_env.client.namespace,
        data_converter=pydantic_data_converter,
        interceptors=[TracingInterceptor(tracer)],
    )
    store = Store.open(f"sqlite:///{tmp_path / 'memory-traced.db'}")
    try:
        interceptor = OtheroneActivityInterceptor(tracer, config, capture_content=False)
        async with build_worker(
            client, config, store, task_queue=task_queue, interceptors=[interceptor]
        ):
            agents = AgentClient(client, task_queue=task_queue, store=store)
            result = await agents.run(build_request(entry_agent=entry_agent, input="go"))
    finally:
        store.close()
        tracer_provider.shutdown()
    assert result.outcome is RunOutcome.COMPLETED, result
    return result, exporter.get_finished_spans()


async def test_a_spawned_child_nests_in_the_spawn_tool_span_linked_to_its_caller(
    temporal_env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    config = scripted_config(
        {
            "boss": [calls(spawn("s1")), calls(control("aw", "await")), "all done"],
            "worker": ["spawned result"],
        },
        agents=[boss(), spawn_agent("worker")],
    )
    result, spans = await traced_in_memory(temporal_env, tmp_path, task_queue, config, "boss")
    child = f"{result.run_id}/worker.s1"
    [boss_run] = [span for span in spans if span.name == "invoke_agent boss"]
    [spawned] = [span for span in spans if span.name == "execute_tool agent.spawn"]
    [child_run] = [span for span in spans if span.name == "invoke_agent worker"]
    assert spawned.context.span_id == call_span_id(result.run_id, "s1")
    assert spawned.parent is not None and spawned.parent.span_id == boss_run.context.span_id
    assert child_run.context.span_id == agent_span_id(child)
    assert child_run.parent is not None and child_run.parent.span_id == spawned.context.span_id
    assert [link.context.span_id for link in child_run.links] == [boss_run.context.span_id]
    assert len({span.context.trace_id for span in spans}) == 1


async def test_handoffs_are_tool_spans_of_the_run_named_on_its_invoke_agent_span(
    temporal_env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    result, spans = await traced_in_memory(
        temporal_env, tmp_path, task_queue, chain_config("full"), "triage"
    )
    [run] = [span for span in spans if span.name == "invoke_agent triage"]
    assert run.attributes is not None
    assert run.context.span_id == agent_span_id(result.run_id)
    assert list(run.attributes["otherone.handoffs"]) == ["triage->billing", "billing->expert"]
    assert run.attributes["otherone.agent_id"] == "expert"  # the agent it ended with
    handoffs = [span for span in spans if span.name == "execute_tool agent.handoff"]
    assert sorted(str((s.attributes or {})["gen_ai.tool.call.id"]) for s in handoffs) == [
        "h1",
        "h2",
    ]
    for span in handoffs:
        assert span.parent is not None and span.parent.span_id == run.context.span_id
    chats = [
        span for span in spans if (span.attributes or {}).get("gen_ai.operation.name") == "chat"
    ]
    assert {(s.attributes or {}).get("gen_ai.agent.name") for s in chats} == {
        "triage",
        "billing",
        "expert",
    }
