"""OpenTelemetry spans (Temporal's interceptor + our activity spans) and Prometheus metrics."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.examples import EXAMPLE_CONFIG
from otherone.runs import AgentRunResult, RunOutcome
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.worker.app import build_worker, connect
from otherone.worker.genai_spans import agent_span_id, call_span_id
from otherone.worker.settings import Settings, otel_trace_exporters
from otherone.worker.telemetry import OtheroneActivityInterceptor, prometheus_runtime
from tests.harness import scripted_config
from tests.test_cli import address_of, cli_env, otherone

REPO = Path(__file__).resolve().parents[1]
RUN_WORKFLOW = "RunWorkflow:AgentRunWorkflow"
#: The conventions' content attributes (captured only when asked for).
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}
START_CHILD = "StartChildWorkflow:AgentRunWorkflow"


def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


def traced_team() -> RuntimeConfig:
    """coordinator: a tool call, then an agent call, then an answer; worker fails once, then
    answers (so one of its model calls has two attempts)."""
    return scripted_config(
        {
            "coordinator": [
                {
                    "tool_calls": [{"name": "lookup", "id": "t1", "arguments": {"city": "Paris"}}],
                    "input_tokens": 11,
                    "output_tokens": 7,
                },
                {
                    "tool_calls": [
                        {
                            "name": "agent.call",
                            "id": "call_1",
                            "arguments": {"agent": "worker", "task": "do work"},
                        }
                    ]
                },
                "final answer",
            ],
            "worker": [{"text": "worker result", "fail": {"attempts": 1}}],
        },
        agents=[
            AgentDefinition(
                id="coordinator",
                description="coordinator agent",
                system_prompt="You coordinate.",
                callable_agents=["worker"],
                tools=["lookup"],
            ),
            AgentDefinition(id="worker", description="worker agent"),
        ],
        tools=[lookup],
    )


@asynccontextmanager
async def traced_client(
    temporal_env: WorkflowEnvironment,
) -> AsyncIterator[tuple[Client, Tracer, InMemorySpanExporter]]:
    """A client carrying Temporal's TracingInterceptor with a test-local tracer (no globals)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host,
        namespace=temporal_env.client.namespace,
        data_converter=pydantic_data_converter,
        interceptors=[TracingInterceptor(tracer)],
    )
    try:
        yield client, tracer, exporter
    finally:
        provider.shutdown()


async def traced_run(
    client: Client,
    tracer: Tracer,
    config: RuntimeConfig,
    task_queue: str,
    tmp_path: Path,
    *,
    max_cached_workflows: int = 1000,
    capture: bool = False,
    input: str = "start",
) -> AgentRunResult:
    """Run the coordinator once on a worker with our activity spans; the worker has stopped
    (every span ended) when this returns."""
    store = Store.open(f"sqlite:///{tmp_path / f'{task_queue}.db'}")
    try:
        worker = build_worker(
            client,
            config,
            store,
            task_queue=task_queue,
            interceptors=[OtheroneActivityInterceptor(tracer, config, capture_content=capture)],
            max_cached_workflows=max_cached_workflows,
        )
        async with worker:
            agents = AgentClient(client, task_queue=task_queue, store=store)
            return await agents.run(build_request(entry_agent="coordinator", input=input))
    finally:
        store.close()


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def attr(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(key)


def activity_spans(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    """Our spans of activity attempts (not Temporal's, not the emitted invoke_agent ones)."""
    return [span for span in spans if attr(span, "otherone.activity")]


def parent_of(span: ReadableSpan, spans: Sequence[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, span.name
    return next(s for s in spans if s.context.span_id == span.parent.span_id)


def activity_key(span: ReadableSpan) -> tuple[Any, ...]:
    return (
        attr(span, "temporal.workflow_id"),
        attr(span, "temporal.activity_id"),
        attr(span, "otherone.activity.attempt"),
    )


async def test_spans_cover_the_run_tree_with_lineage(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    config = traced_team()
    async with traced_client(temporal_env) as (client, tracer, exporter):
        result = await traced_run(client, tracer, config, task_queue, tmp_path)
        spans = exporter.get_finished_spans()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "final answer"
    root, child = result.run_id, f"{result.run_id}/worker.call_1"

    assert len(named(spans, RUN_WORKFLOW)) == 2  # root and child workflow
    assert len(named(spans, START_CHILD)) == 1
    assert len({span.context.trace_id for span in spans}) == 1  # one trace for the tree

    ours = activity_spans(spans)
    for span in ours:
        assert attr(span, "otherone.root_run_id") == result.root_run_id
        assert attr(span, "otherone.run_id") in {root, child}
        if attr(span, "otherone.run_id") == child:
            assert attr(span, "otherone.agent_id") == "worker"
            assert attr(span, "otherone.parent_run_id") == root
            assert attr(span, "otherone.depth") == 1
        else:
            assert attr(span, "otherone.agent_id") == "coordinator"
            assert attr(span, "otherone.parent_run_id") is None
            assert attr(span, "otherone.depth") == 0
        temporal = f"RunActivity:{attr(span, 'otherone.activity')}"
        if attr(span, "gen_ai.operation.name") in ("chat", "execute_tool"):
            # a model or tool call: in its run's invoke_agent span, linked to Temporal's
            assert span.parent is not None
            assert span.parent.span_id == agent_span_id(attr(span, "otherone.run_id"))
            [link] = span.links
            linked = next(s for s in spans if s.context.span_id == link.context.span_id)
            assert linked.name == temporal
        else:  # each other span is a child of Temporal's RunActivity span of its activity
            assert parent_of(span, spans).name == temporal

    # a run is an invoke_agent span; the child's is nested in the agent.call tool span
    [root_agent] = named(spans, "invoke_agent coordinator")
    [child_agent] = named(spans, "invoke_agent worker")
    [call] = named(spans, "execute_tool agent.call")
    assert root_agent.context.span_id == agent_span_id(root)
    assert child_agent.context.span_id == agent_span_id(child)
    assert call.context.span_id == call_span_id(root, "call_1")
    assert parent_of(child_agent, spans) is call
    assert parent_of(call, spans) is root_agent
    assert parent_of(root_agent, spans).name == "StartActivity:otherone.finish_run"
    assert [link.context.span_id for link in child_agent.links] == [agent_span_id(root)]
    assert attr(child_agent, "gen_ai.agent.name") == "worker"
    assert attr(child_agent, "gen_ai.operation.name") == "invoke_agent"
    assert attr(root_agent, "gen_ai.conversation.id") == attr(root_agent, "otherone.session_id")
    assert attr(root_agent, "gen_ai.usage.input_tokens") >= 11
    assert child_agent.start_time is not None and root_agent.start_time is not None
    assert root_agent.start_time <= child_agent.start_time
    assert root_agent.end_time is not None and child_agent.end_time is not None
    assert child_agent.end_time <= root_agent.end_time

    models = named(spans, "chat test")
    coordinator_models = sorted(
        (s for s in models if attr(s, "otherone.agent_id") == "coordinator"),
        key=lambda s: attr(s, "otherone.turn"),
    )
    assert [attr(s, "otherone.turn") for s in coordinator_models] == [1, 2, 3]
    first = coordinator_models[0]
    assert attr(first, "gen_ai.usage.input_tokens") == 11
    assert attr(first, "gen_ai.usage.output_tokens") == 7
    assert attr(first, "gen_ai.request.model") == "test"
    assert attr(first, "gen_ai.provider.name") == "scripted"
    assert attr(first, "otherone.model_profile_id") == "scripted"
    assert all(isinstance(attr(s, "gen_ai.usage.output_tokens"), int) for s in coordinator_models)

    # the worker's model call failed once: one span per attempt, the failed one with the error
    worker_models = sorted(
        (s for s in models if attr(s, "otherone.agent_id") == "worker"),
        key=lambda s: attr(s, "otherone.activity.attempt"),
    )
    assert [attr(s, "otherone.activity.attempt") for s in worker_models] == [1, 2]
    failed, succeeded = worker_models
    assert failed.status.status_code is StatusCode.ERROR
    assert attr(failed, "error.type") == "model_error"
    assert attr(succeeded, "otherone.attempt") == 2
    assert attr(succeeded, "otherone.retry_of_attempt") == 1
    assert any(event.name == "exception" for event in failed.events)
    assert succeeded.status.status_code is not StatusCode.ERROR

    [tool_span] = named(spans, "execute_tool lookup")
    assert attr(tool_span, "gen_ai.tool.name") == "lookup"
    assert attr(tool_span, "gen_ai.tool.call.id") == "t1"
    assert attr(tool_span, "gen_ai.agent.name") == "coordinator"
    # no content unless asked for
    for span in spans:
        assert not any(key in CONTENT_KEYS for key in span.attributes or {}), span.name
    [check] = named(spans, "agent call check")
    assert attr(check, "otherone.agent_call.target") == "worker"
    assert attr(check, "otherone.agent_call.id") == "call_1"
    assert len(named(spans, "run prepare")) == 2
    finishes = named(spans, "run finish")
    assert {attr(s, "otherone.run.status") for s in finishes} == {"completed"}
    assert len(finishes) == 2


async def test_spans_are_not_duplicated_when_workflows_replay(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """With no workflow cache every workflow task replays the history from the start: the
    workflow spans must match a cached run and each activity attempt has exactly one span."""
    config = traced_team()
    counts: list[Counter[str]] = []
    for cache in (1000, 0):
        task_queue = f"tracing-cache-{cache}-{tmp_path.name}"
        async with traced_client(temporal_env) as (client, tracer, exporter):
            result = await traced_run(
                client, tracer, config, task_queue, tmp_path, max_cached_workflows=cache
            )
            spans = exporter.get_finished_spans()
            assert result.outcome is RunOutcome.COMPLETED
            ours = once_per_local_attempt(activity_spans(spans))
            keys = [activity_key(span) for span in ours]
            assert len(keys) == len(set(keys))  # one span per activity attempt
            # ... and one per activity the histories scheduled (+1 for the failed attempt)
            scheduled = 0
            workflow_tasks = 0
            for workflow_id in (result.run_id, f"{result.run_id}/worker.call_1"):
                history = await client.get_workflow_handle(workflow_id).fetch_history()
                scheduled += sum(
                    e.HasField("activity_task_scheduled_event_attributes")
                    # prepare_run and finish_run are local activities: a marker each
                    or e.marker_recorded_event_attributes.marker_name == "core_local_activity"
                    for e in history.events
                )
                workflow_tasks += sum(
                    e.HasField("workflow_task_completed_event_attributes") for e in history.events
                )
            assert len(ours) == scheduled + 1
            assert workflow_tasks > 2  # so the uncached run really replayed
            others = runs_of_kept_local_attempts(
                once_per_span_id([span for span in spans if not attr(span, "otherone.activity")]),
                ours,
            )
            counts.append(Counter(span.name for span in [*others, *ours]))
    cached, uncached = counts
    assert uncached == cached
    assert cached[RUN_WORKFLOW] == 2 and cached["chat test"] == 5
    assert cached["invoke_agent coordinator"] == cached["invoke_agent worker"] == 1


#: Spans of the local activities (prepare_run, finish_run).
LOCAL_SPANS = {"run prepare", "run finish"}
#: Temporal's spans around those local activities' executions.
LOCAL_RUN_SPANS = {"RunActivity:otherone.prepare_run", "RunActivity:otherone.finish_run"}


def once_per_local_attempt(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """``spans`` with one per local activity attempt: Temporal runs a local activity again,
    as the same attempt, when the workflow task that ran it failed (on a loaded machine, one
    that outlived its timeout), and each execution rightly has its span. Replays never do."""
    local = {activity_key(span): span for span in spans if span.name in LOCAL_SPANS}
    return [span for span in spans if span.name not in LOCAL_SPANS] + list(local.values())


def once_per_span_id(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """The spans a run and an agent call emit once done have ids derived from the run: a local
    activity executed again (see `once_per_local_attempt`) emits the same span again."""
    return list({span.context.span_id: span for span in spans}.values())


def runs_of_kept_local_attempts(
    others: list[ReadableSpan], ours: list[ReadableSpan]
) -> list[ReadableSpan]:
    """``others`` (Temporal's spans) without the `RunActivity` spans of a local activity's
    repeated executions: only those that are the parents of the local spans
    `once_per_local_attempt` kept."""
    kept = {span.parent.span_id for span in ours if span.name in LOCAL_SPANS and span.parent}
    return [
        span
        for span in others
        if span.name not in LOCAL_RUN_SPANS
        or ((context := span.get_span_context()) is not None and context.span_id in kept)
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_prometheus_endpoint_serves_temporal_metrics(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    port = free_port()
    client = await connect(
        temporal_env.client.service_client.config.target_host,
        temporal_env.client.namespace,
        runtime=prometheus_runtime(port),
    )
    config = scripted_config({"solo": ["hello"]})
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        async with build_worker(client, config, store, task_queue=task_queue):
            agents = AgentClient(client, task_queue=task_queue, store=store)
            result = await agents.run(build_request(entry_agent="solo", input="hi"))
            async with httpx.AsyncClient() as http:
                response = await http.get(f"http://127.0.0.1:{port}/metrics")
    finally:
        store.close()
    assert result.text == "hello"
    assert response.status_code == 200
    assert any(line.startswith("temporal_") for line in response.text.splitlines())


def test_tracing_setting_defaults_to_the_otel_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTHERONE_TRACING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert Settings().tracing is False and Settings().metrics_port is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert Settings().tracing is True
    monkeypatch.setenv("OTHERONE_TRACING", "false")
    assert Settings().tracing is False
    monkeypatch.setenv("OTHERONE_METRICS_PORT", "9464")
    assert Settings().metrics_port == 9464
    assert otel_trace_exporters({"OTEL_TRACES_EXPORTER": "console"}) == ["console"]
    assert otel_trace_exporters({"OTEL_TRACES_EXPORTER": "none"}) == []
    assert otel_trace_exporters({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x"}) == ["otlp"]
    assert otel_trace_exporters({}) == []


CONSOLE_SCRIPT = """
from opentelemetry import trace
from otherone.worker.settings import Settings
from otherone.worker.telemetry import configure_tracing, shutdown_tracing, worker_telemetry

telemetry = worker_telemetry(Settings())
assert telemetry.tracing and telemetry.runtime is None and telemetry.interceptors()
assert configure_tracing() is configure_tracing()  # idempotent
with trace.get_tracer("probe").start_as_current_span("probe span"):
    pass
shutdown_tracing()
"""


def test_configure_tracing_exports_to_the_console_from_otel_variables() -> None:
    """In a subprocess: `configure_tracing` installs the global provider (no leak into tests)."""
    env = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_SERVICE_NAME": "probe-service",
        "PYTHONPATH": str(REPO),
    }
    env.pop("OTHERONE_TRACING", None)
    done = subprocess.run(
        [sys.executable, "-c", CONSOLE_SCRIPT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "probe span"' in done.stdout
    assert '"service.name": "probe-service"' in done.stdout


async def test_a_run_started_by_the_cli_is_one_trace(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """`otherone run` with the README's `OTEL_TRACES_EXPORTER=console`: the CLI's
    StartWorkflow span roots the trace that every span of the tree's workers joins."""
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    env["OTEL_TRACES_EXPORTER"] = "console"
    config = load_config(EXAMPLE_CONFIG)
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    try:
        async with traced_client(temporal_env) as (client, tracer, exporter):
            worker = build_worker(
                client,
                config,
                store,
                task_queue=task_queue,
                interceptors=[OtheroneActivityInterceptor(tracer, config)],
            )
            async with worker:
                result = await otherone("run", "coordinator", "A report, please.", env=env)
            spans = exporter.get_finished_spans()
    finally:
        store.close()
    assert result.code == 0, result.describe()
    started = re.findall(
        r'"name": "StartWorkflow:AgentRunWorkflow",\s*"context": \{\s*"trace_id": "0x([0-9a-f]+)"',
        result.stdout,
    )
    assert len(started) == 1, result.stdout
    assert len(named(spans, RUN_WORKFLOW)) == 3  # the coordinator and its two children
    assert {format(span.context.trace_id, "032x") for span in spans} == {started[0]}
