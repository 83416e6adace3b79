"""OpenTelemetry tracing and Prometheus metrics of a worker process.

Tracing has two layers:

* Temporal's ``TracingInterceptor`` on the client (workers built from that client inherit it):
  ``StartWorkflow`` / ``RunWorkflow`` / ``StartChildWorkflow`` / ``StartActivity`` /
  ``RunActivity`` / ``SignalWorkflow`` ... spans. Its workflow spans are created only when the
  workflow is not replaying, so a replay (e.g. after the workflow left the worker's cache) adds
  no spans.
* `OtheroneActivityInterceptor` (a worker interceptor): one span per attempt of each of our
  activities — ``run prepare``, ``chat {model}``, ``execute_tool {tool}``, ``agent call check``,
  ``run finish`` — with the run's lineage (``otherone.run_id``, ``otherone.root_run_id``,
  ``otherone.parent_run_id``, ``otherone.agent_id``, ``otherone.depth``) and what the activity
  did (model, provider and token usage; tool name; agent-call target). Activities are never
  replayed, so these spans are never duplicated either. The model and tool spans, and the
  ``invoke_agent {agent}`` span of each run, follow the OpenTelemetry GenAI semantic
  conventions (`otherone.worker.genai_spans`).

Exporters come from the standard ``OTEL_*`` environment variables (`configure_tracing`).
Metrics: `prometheus_runtime` builds a Temporal `Runtime` whose core metrics (``temporal_*``)
are served on ``http://HOST:PORT/metrics``; create the worker's client with that runtime.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Interceptor

from otherone.config import RuntimeConfig
from otherone.errors import ConfigurationError
from otherone.worker.activity_spans import (
    SPAN_NAMES,
    TRACER_NAME,
    OtheroneActivityInterceptor,
    annotate_run,
)

__all__ = [
    "SPAN_NAMES",
    "TRACER_NAME",
    "OtheroneActivityInterceptor",
    "WorkerTelemetry",
    "annotate_run",
    "configure_tracing",
    "prometheus_runtime",
    "worker_telemetry",
]
from otherone.worker.settings import otel_trace_exporters

if TYPE_CHECKING:
    from otherone.worker.settings import Settings

DEFAULT_SERVICE_NAME = "otherone-worker"

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
    #: Temporal's own spans too (`Settings.trace_temporal_spans`); without them, the spans of a
    #: tree are ours alone, in one trace whose id comes from the root run's id.
    temporal_spans: bool = True
    #: Prompts, answers, tool arguments and results on the spans (`Settings.trace_content`).
    capture_content: bool = False

    @property
    def client_tracing(self) -> bool:
        """Whether the worker's client carries Temporal's ``TracingInterceptor``."""
        return self.tracing and self.temporal_spans

    def interceptors(self, config: RuntimeConfig | None = None) -> list[Interceptor]:
        if not self.tracing:
            return []
        return [OtheroneActivityInterceptor(config=config, capture_content=self.capture_content)]


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
    return WorkerTelemetry(
        tracing=settings.tracing,
        runtime=runtime,
        capture_content=settings.trace_content,
        temporal_spans=settings.trace_temporal_spans,
    )
