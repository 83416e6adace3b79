"""OpenTelemetry tracing and Prometheus metrics of a worker process.

Tracing has two layers:

* Temporal's ``TracingInterceptor`` on the client (workers built from that client inherit it):
  ``StartWorkflow`` / ``RunWorkflow`` / ``StartChildWorkflow`` / ``StartActivity`` /
  ``RunActivity`` / ``SignalWorkflow`` ... spans. Its workflow spans are created only when the
  workflow is not replaying, so a replay (e.g. after the workflow left the worker's cache) adds
  no spans.
* `OtheroneActivityInterceptor` (a worker interceptor): one span per attempt of each of our
  activities — ``run prepare``, ``model call``, ``tool call``, ``agent call check``,
  ``run finish`` — with the run's lineage (``otherone.run_id``, ``otherone.root_run_id``,
  ``otherone.parent_run_id``, ``otherone.agent_id``, ``otherone.depth``) and what the activity
  did (model, provider and token usage; tool name; agent-call target). Activities are never
  replayed, so these spans are never duplicated either.

Exporters come from the standard ``OTEL_*`` environment variables (`configure_tracing`).
Metrics: `prometheus_runtime` builds a Temporal `Runtime` whose core metrics (``temporal_*``)
are served on ``http://HOST:PORT/metrics``; create the worker's client with that runtime.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue
from pydantic import BaseModel
from temporalio import activity
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from otherone.config import RuntimeConfig
from otherone.contracts import (
    ACTIVITY_CALL_MODEL,
    ACTIVITY_FINISH_RUN,
    ACTIVITY_PREPARE_CALL,
    ACTIVITY_PREPARE_RUN,
    ACTIVITY_RUN_GUARDRAIL,
    ACTIVITY_RUN_TOOL,
    GuardrailVerdict,
    ModelTurn,
    RunPlan,
    RunRef,
    ToolOutcome,
)
from otherone.errors import ConfigurationError
from otherone.worker.settings import otel_trace_exporters

if TYPE_CHECKING:
    from otherone.worker.settings import Settings

DEFAULT_SERVICE_NAME = "otherone-worker"
TRACER_NAME = "otherone"
ACTIVITY_PREFIX = "otherone."

#: Span names of our activities; any other ``otherone.*`` activity gets its name without the
#: prefix, underscores as spaces (``otherone.compact_session`` -> ``compact session``).
SPAN_NAMES: Mapping[str, str] = {
    ACTIVITY_PREPARE_RUN: "run prepare",
    ACTIVITY_CALL_MODEL: "model call",
    ACTIVITY_RUN_TOOL: "tool call",
    ACTIVITY_PREPARE_CALL: "agent call check",
    ACTIVITY_FINISH_RUN: "run finish",
    ACTIVITY_RUN_GUARDRAIL: "guardrail",
}

_configured: TracerProvider | None = None


# --------------------------------------------------------------------------- exporters


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name == "otlp":
        protocol = os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
        )
        if protocol and protocol != "http/protobuf":
            raise ValueError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported; use http/protobuf"
            )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # endpoint, headers, timeout: from OTEL_EXPORTER_OTLP_*
    raise ValueError(f"OTEL_TRACES_EXPORTER: unsupported exporter {name!r} (otlp, console, none)")


def configure_tracing(service_name: str = DEFAULT_SERVICE_NAME) -> TracerProvider:
    """Install (once per process) a global TracerProvider exporting as ``OTEL_*`` says.

    ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``, comma separated) picks the
    exporters; unset, OTLP over HTTP is used when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
    ``..._TRACES_ENDPOINT``) is set, else nothing is exported. ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` override ``service_name``. Later calls return the same provider.
    Call `shutdown_tracing` before a hard exit (``os._exit`` skips the SDK's atexit flush).
    """
    global _configured
    if _configured is not None:
        return _configured
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    for name in otel_trace_exporters():
        exporter = _exporter(name)
        processor = (
            SimpleSpanProcessor(exporter) if name == "console" else BatchSpanProcessor(exporter)
        )
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _configured = provider
    return provider


def ensure_tracing(service_name: str) -> None:
    """`configure_tracing` unless the application installed an SDK tracer provider of its own
    (a library must not replace it; OpenTelemetry allows one global provider)."""
    if _configured is None and not isinstance(trace.get_tracer_provider(), TracerProvider):
        configure_tracing(service_name)


def shutdown_tracing() -> None:
    """Flush and stop the provider installed by `configure_tracing` (no-op if none)."""
    global _configured
    if _configured is not None:
        _configured.shutdown()
        _configured = None


# --------------------------------------------------------------------------- metrics


def prometheus_runtime(port: int, host: str = "127.0.0.1") -> Runtime:
    """A Temporal runtime serving its metrics at ``http://host:port/metrics`` (Prometheus).

    Pass it to ``Client.connect(..., runtime=...)`` (`otherone.worker.app.connect`); workers built
    from
    that client report their metrics there. One runtime per process and port.
    """
    try:
        return Runtime(
            telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"{host}:{port}"))
        )
    except ValueError as error:  # the SDK's words for a port in use, a bad host, ...
        raise ConfigurationError(
            f"cannot serve metrics on {host}:{port}: {error}", field="OTHERONE_METRICS_PORT"
        ) from None


@dataclass(frozen=True)
class WorkerTelemetry:
    """What `Settings` ask for: pass ``tracing``/``runtime`` to `otherone.worker.app.connect` and
    ``interceptors(config)`` to `otherone.worker.app.build_worker`."""

    tracing: bool
    runtime: Runtime | None

    def interceptors(self, config: RuntimeConfig | None = None) -> list[Interceptor]:
        return [OtheroneActivityInterceptor(config=config)] if self.tracing else []


def worker_telemetry(
    settings: Settings, service_name: str = DEFAULT_SERVICE_NAME
) -> WorkerTelemetry:
    """Configure tracing (when ``settings.tracing``) and build the metrics runtime (when
    ``settings.metrics_port``) of a worker process."""
    if settings.tracing:
        configure_tracing(service_name)
    runtime = (
        prometheus_runtime(settings.metrics_port, settings.metrics_host)
        if settings.metrics_port is not None
        else None
    )
    return WorkerTelemetry(tracing=settings.tracing, runtime=runtime)


# --------------------------------------------------------------------------- activity spans


class OtheroneActivityInterceptor(Interceptor):
    """Worker interceptor: a span per attempt of each ``otherone.*`` activity.

    ``tracer`` defaults to the global provider's; ``config`` (the worker's runtime config) lets
    model spans name the provider and model of a model profile.
    """

    def __init__(self, tracer: Tracer | None = None, config: RuntimeConfig | None = None) -> None:
        self.tracer = tracer or trace.get_tracer(TRACER_NAME)
        self.config = config

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivitySpans(next, self)

    def model_attributes(self, profile_id: str) -> dict[str, AttributeValue]:
        profile = self.config.models.get(profile_id) if self.config is not None else None
        if profile is None:
            return {}
        return {
            "gen_ai.provider.name": profile.provider,
            "gen_ai.system": profile.provider,
            "gen_ai.request.model": profile.model,
        }


class _ActivitySpans(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, root: OtheroneActivityInterceptor):
        super().__init__(next)
        self.root = root

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        name = info.activity_type
        if not name.startswith(ACTIVITY_PREFIX):
            return await super().execute_activity(input)
        span_name = SPAN_NAMES.get(name, name.removeprefix(ACTIVITY_PREFIX).replace("_", " "))
        attributes: dict[str, AttributeValue] = {
            "otherone.activity": name,
            "otherone.activity.attempt": info.attempt,
            "temporal.workflow_id": info.workflow_id or "",
            "temporal.activity_id": info.activity_id,
        }
        argument = input.args[0] if input.args else None
        if isinstance(argument, BaseModel):
            attributes.update(self._input_attributes(name, argument))
        with self.root.tracer.start_as_current_span(
            span_name,
            attributes=attributes,
            record_exception=True,
            set_status_on_exception=True,
        ) as span:
            result = await super().execute_activity(input)
            _result_attributes(span, result)
            return result

    def _input_attributes(self, name: str, argument: BaseModel) -> dict[str, AttributeValue]:
        ref = getattr(argument, "ref", None) or getattr(argument, "caller", None)
        attributes = _lineage(ref) if isinstance(ref, RunRef) else {}
        if name == ACTIVITY_CALL_MODEL:
            profile_id = str(getattr(argument, "model_profile_id", ""))
            attributes["gen_ai.operation.name"] = "chat"
            attributes["otherone.model_profile_id"] = profile_id
            attributes["otherone.turn"] = int(getattr(argument, "turn", 0))
            attributes.update(self.root.model_attributes(profile_id))
            fallback_from = getattr(argument, "fallback_from", None)
            if fallback_from:  # this profile answers a turn the run's model could not
                attributes["otherone.model_fallback_from"] = str(fallback_from)
        elif name == ACTIVITY_RUN_TOOL:
            call = getattr(argument, "call", None)
            attributes["otherone.tool.name"] = str(getattr(call, "name", ""))
            attributes["otherone.tool.call_id"] = str(getattr(call, "id", ""))
        elif name == ACTIVITY_PREPARE_CALL:
            request = getattr(argument, "request", None)
            attributes["otherone.agent_call.target"] = str(getattr(request, "target", ""))
            attributes["otherone.agent_call.id"] = str(getattr(argument, "call_id", ""))
        elif name == ACTIVITY_RUN_GUARDRAIL:
            check = getattr(argument, "check", None)
            attributes["otherone.guardrail.name"] = str(getattr(argument, "name", ""))
            attributes["otherone.guardrail.kind"] = str(getattr(check, "kind", ""))
            attributes["otherone.run_id"] = str(getattr(check, "run_id", ""))
            attributes["otherone.agent_id"] = str(getattr(check, "agent_id", ""))
        elif name == ACTIVITY_FINISH_RUN:
            attributes["otherone.run.status"] = str(getattr(argument, "status", ""))
        return attributes


def annotate_run(ref: RunRef) -> None:
    """Name the run on the current activity's span. Model and tool inputs carry only the key of
    the run's reference, resolved inside the activity after the span began
    (`otherone.activities.run_refs`), so the span gets the lineage then."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(_lineage(ref))


def _lineage(ref: RunRef) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "otherone.run_id": ref.run_id,
        "otherone.root_run_id": ref.root_run_id,
        "otherone.agent_id": ref.agent_id,
        "otherone.depth": ref.depth,
        "otherone.session_id": ref.session_id,
    }
    if ref.parent_run_id is not None:
        attributes["otherone.parent_run_id"] = ref.parent_run_id
    return attributes


def _result_attributes(span: Span, result: object) -> None:
    if isinstance(result, ModelTurn):
        usage = {
            "gen_ai.usage.input_tokens": result.input_tokens,
            "gen_ai.usage.output_tokens": result.output_tokens,
            "otherone.usage.total_tokens": result.total_tokens,
        }
        for key, value in usage.items():
            if value is not None:
                span.set_attribute(key, value)
        if result.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
        span.set_attribute("otherone.tool_calls", len(result.tool_calls))
    elif isinstance(result, ToolOutcome):
        span.set_attribute("otherone.tool.result_bytes", result.result_bytes)
        if result.error_kind is not None:
            span.set_attribute("otherone.tool.error_kind", str(result.error_kind))
            span.set_status(Status(StatusCode.ERROR, result.error or str(result.error_kind)))
    elif isinstance(result, GuardrailVerdict):
        span.set_attribute("otherone.guardrail.tripped", result.tripped)
        if result.tripped:
            span.set_attribute("otherone.guardrail.reason", result.reason[:500])
    elif isinstance(result, RunPlan):
        span.set_attribute("otherone.model_profile_id", result.model_profile_id)
        span.set_attribute("otherone.agent_version", result.agent_version)
