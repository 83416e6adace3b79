"""An OTLP/HTTP trace receiver on 127.0.0.1 that decodes ``ExportTraceServiceRequest``
protobufs as a backend does (tests/test_genai_traces.py), and a tracer provider exporting to it."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


@dataclass
class Received:
    """One span as a backend reads it off the wire."""

    name: str
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    kind: int
    attributes: dict[str, Any]
    links: list[bytes]
    status_code: int
    start: int
    end: int


@dataclass
class Receiver:
    url: str
    spans: list[Received] = field(default_factory=list)
    content_types: set[str] = field(default_factory=set)
    arrived: threading.Condition = field(default_factory=threading.Condition)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def _decoded(request: ExportTraceServiceRequest) -> list[Received]:
    spans = []
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                spans.append(
                    Received(
                        name=span.name,
                        trace_id=span.trace_id,
                        span_id=span.span_id,
                        parent_span_id=span.parent_span_id,
                        kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=[link.span_id for link in span.links],
                        status_code=span.status.code,
                        start=span.start_time_unix_nano,
                        end=span.end_time_unix_nano,
                    )
                )
    return spans


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP trace receiver (``POST /v1/traces``, protobuf) on 127.0.0.1."""
    receiver: Receiver | None = None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            assert receiver is not None
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            with receiver.arrived:
                receiver.content_types.add(self.headers.get("Content-Type", ""))
                receiver.spans.extend(_decoded(request))
                receiver.arrived.notify_all()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/v1/traces")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def otlp_provider(url: str) -> Iterator[TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "otherone-test"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url, timeout=10)))
    try:
        yield provider
    finally:
        provider.shutdown()
