"""Spans by the OpenTelemetry GenAI semantic conventions (the ``gen_ai.*`` attributes of
``opentelemetry-semantic-conventions`` 0.66b2, i.e. semantic conventions 1.44 / the
semantic-conventions-genai repository they moved to).

The tree of a run, whatever worker does each part, and whichever attempt:

* ``invoke_agent {agent}`` for each run, emitted when the run ends (`run_span`) with the run's
  start and end as its times. Its span id is derived from the run id (`agent_span_id`), so the
  spans of the run's model and tool calls, made earlier by any worker, can name it as their
  parent before it exists; a worker killed mid-run changes nothing (no span is held open).
* ``chat {model}`` for each model call attempt and ``execute_tool {tool}`` for each tool call
  attempt (MCP tools included), children of their run's ``invoke_agent`` span, linked to
  Temporal's ``RunActivity`` span of the attempt.
* ``execute_tool agent.call`` / ``agent.spawn`` for each agent call that started a child
  (`call_span`, id derived from the caller's run id and the call id): the child's
  ``invoke_agent`` span is its child (one trace for the whole tree) and links to its caller's
  ``invoke_agent`` span. A handoff is the run's ``execute_tool agent.handoff`` span.

Span ids are chosen through the tracer's id generator (`chosen_ids_tracer`): the SDK offers no
other way to give a span a known id.

Content (prompts, answers, system instructions, tool arguments and results) is captured only
when asked for (`content_capture_enabled`: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``,
or ``OTHERONE_TRACE_CONTENT``), redacted like the store
(`otherone.redaction.redact_json`) and bounded (`bounded_messages`).
"""

from __future__ import annotations

import contextvars
import copy
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)
from opentelemetry.util.types import AttributeValue

from otherone.redaction import redact_json
from otherone.worker.settings import genai_content_requested

#: Whether the environment asks for content (the conventions' variable).
content_capture_enabled = genai_content_requested

#: The semantic conventions these spans follow (the tracer's schema URL).
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
#: A text part longer than this is cut (a prompt can hold whole documents).
PART_LIMIT_CHARS = 16_000
#: A content attribute (its JSON) longer than this loses its oldest messages first.
ATTRIBUTE_LIMIT_CHARS = 128_000
TRUNCATED = "…[truncated]"

#: Well-known ``gen_ai.provider.name`` values for our providers' names (others as they are).
PROVIDER_NAMES: Mapping[str, str] = {"openai": "openai", "anthropic": "anthropic"}

_capture: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otherone_genai_capture", default=False
)
_chosen: contextvars.ContextVar[tuple[int | None, int | None]] = contextvars.ContextVar(
    "otherone_genai_chosen_ids", default=(None, None)
)


@contextmanager
def capturing(enabled: bool) -> Iterator[None]:
    """Within: the current activity's spans take content when ``enabled``."""
    token = _capture.set(enabled)
    try:
        yield
    finally:
        _capture.reset(token)


def capture_on() -> bool:
    """Whether the current activity captures content (never outside `capturing`)."""
    return _capture.get()


# --------------------------------------------------------------------------- span ids


def _digest(*parts: str, size: int) -> int:
    data = "\x00".join(parts).encode()
    value = int.from_bytes(hashlib.blake2b(data, digest_size=size).digest(), "big")
    return value or 1  # zero is the invalid id


def agent_span_id(run_id: str) -> int:
    """The span id of a run's ``invoke_agent`` span."""
    return _digest("invoke_agent", run_id, size=8)


def call_span_id(caller_run_id: str, call_id: str) -> int:
    """The span id of the ``execute_tool agent.call`` span that started a child."""
    return _digest("agent_call", caller_run_id, call_id, size=8)


def tree_trace_id(run_id: str) -> int:
    """The trace id of a tree no caller's trace context reached (Temporal's spans off), from
    any of its run ids: a child's id begins with its caller's (``<caller>/...``), so the first
    segment is the same for the whole tree (a model call's span knows only its run's id)."""
    return _digest("trace", run_id.split("/", 1)[0], size=16)


class _ChosenIds(IdGenerator):
    """The wrapped generator's ids, except those `_chosen` holds for the span being started."""

    def __init__(self, wrapped: IdGenerator) -> None:
        self.wrapped = wrapped

    def generate_span_id(self) -> int:
        return _chosen.get()[0] or self.wrapped.generate_span_id()

    def generate_trace_id(self) -> int:
        return _chosen.get()[1] or self.wrapped.generate_trace_id()


def chosen_ids_tracer(tracer: Tracer) -> SdkTracer | None:
    """A copy of an SDK ``tracer`` whose spans may be given their ids; None for a tracer of
    another implementation (or the API's no-op), which then gets no derived-id spans."""
    if isinstance(tracer, trace.ProxyTracer):
        tracer = getattr(tracer, "_tracer", tracer)  # the provider's, once one was set
    if not isinstance(tracer, SdkTracer):
        return None
    chosen = copy.copy(tracer)
    chosen.id_generator = _ChosenIds(tracer.id_generator)
    return chosen


# --------------------------------------------------------------------------- parents


def _sampled(current: SpanContext) -> TraceFlags:
    return current.trace_flags if current.is_valid else TraceFlags(TraceFlags.SAMPLED)


def run_trace_id(root_run_id: str) -> int:
    """The current trace (Temporal's, propagated through the tree), else the tree's own."""
    current = trace.get_current_span().get_span_context()
    return current.trace_id if current.is_valid else tree_trace_id(root_run_id)


def parent_context(span_id: int, root_run_id: str) -> Context:
    """A context whose parent is the span ``span_id`` of the run tree's trace."""
    current = trace.get_current_span().get_span_context()
    parent = SpanContext(
        trace_id=run_trace_id(root_run_id),
        span_id=span_id,
        is_remote=True,
        trace_flags=_sampled(current),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def temporal_link() -> list[Link]:
    """A link to the current (Temporal ``RunActivity``) span, when there is one."""
    current = trace.get_current_span().get_span_context()
    return [Link(current, {"otherone.link": "temporal_activity"})] if current.is_valid else []


def workflow_parent() -> Context | None:
    """The parent of a root's ``invoke_agent`` span: Temporal's span of the run's workflow
    that scheduled the current activity (the parent of its ``RunActivity`` span, the current
    one before ours starts); None when no trace context reached the run."""
    current = trace.get_current_span()
    context = current.get_span_context()
    if not context.is_valid:
        return None
    parent = current.parent if isinstance(current, ReadableSpan) else None
    chosen = parent if parent is not None and parent.is_valid else context
    return trace.set_span_in_context(NonRecordingSpan(chosen))


@contextmanager
def _ids(span_id: int, trace_id: int | None = None) -> Iterator[None]:
    token = _chosen.set((span_id, trace_id))
    try:
        yield
    finally:
        _chosen.reset(token)


def _nanos(moment: datetime | None) -> int | None:
    return int(moment.timestamp() * 1e9) if moment is not None else None


# --------------------------------------------------------------------------- emitted spans


def run_span(
    tracer: SdkTracer,
    *,
    run_id: str,
    root_run_id: str,
    parent_run_id: str | None,
    agent_call_id: str | None,
    attributes: dict[str, AttributeValue],
    started_at: datetime | None,
    finished_at: datetime | None,
    error: str | None,
    root_parent: Context | None,
) -> None:
    """Emit the ``invoke_agent`` span of a run that ended (start and end from its record);
    a root's is a child of ``root_parent`` (`workflow_parent`)."""
    links: list[Link] = []
    if parent_run_id is not None:
        caller = agent_span_id(parent_run_id)
        links.append(_link(caller, root_run_id, "caller"))
        parent_id = call_span_id(parent_run_id, agent_call_id) if agent_call_id else caller
        parent: Context | None = parent_context(parent_id, root_run_id)
    else:
        parent = root_parent
    trace_id = None if parent is not None else tree_trace_id(root_run_id)
    name = f"invoke_agent {attributes.get('gen_ai.agent.name', '')}".rstrip()
    with _ids(agent_span_id(run_id), trace_id):
        span = tracer.start_span(
            name,
            context=parent or Context(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
            start_time=_nanos(started_at),
        )
    if error is not None:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=_nanos(finished_at))


def call_span(
    tracer: SdkTracer,
    *,
    caller_run_id: str,
    root_run_id: str,
    call_id: str,
    tool_name: str,
    attributes: dict[str, AttributeValue],
    started_ns: int,
) -> None:
    """Emit the ``execute_tool agent.call`` (or ``agent.spawn``) span of an agent call whose
    child is about to start: the parent of the child's ``invoke_agent`` span."""
    with _ids(call_span_id(caller_run_id, call_id)):
        span = tracer.start_span(
            f"execute_tool {tool_name}",
            context=parent_context(agent_span_id(caller_run_id), root_run_id),
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool_name,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function",
                **attributes,
            },
            links=temporal_link(),
            start_time=started_ns,
        )
    span.end()


def _link(span_id: int, root_run_id: str, kind: str) -> Link:
    current = trace.get_current_span().get_span_context()
    context = SpanContext(
        trace_id=run_trace_id(root_run_id),
        span_id=span_id,
        is_remote=True,
        trace_flags=_sampled(current),
    )
    return Link(context, {"otherone.link": kind})


def provider_name(provider: str) -> str:
    return PROVIDER_NAMES.get(provider, provider)


# --------------------------------------------------------------------------- content


def _cut(text: str) -> str:
    if len(text) <= PART_LIMIT_CHARS:
        return text
    return text[:PART_LIMIT_CHARS] + TRUNCATED


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: their texts
        texts = [str(part.get("text", "")) for part in content if isinstance(part, dict)]
        return "\n".join(text for text in texts if text)
    return "" if content is None else json.dumps(content, default=str)


def _arguments(arguments: Any) -> Any:
    """Tool arguments as the conventions want them (an object), else the text as it was."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return _cut(arguments)
    return arguments


def _tool_call_parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    parts = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name", call.get("name")),
                "arguments": _arguments(function.get("arguments", call.get("arguments"))),
            }
        )
    return parts


def convention_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One message of our neutral (OpenAI-like) shape as the conventions' ``ChatMessage``."""
    role = str(message.get("role", "user"))
    text = _cut(_text(message.get("content")))
    if role == "tool":
        response = _arguments(text)  # a JSON result as its value
        part = {
            "type": "tool_call_response",
            "id": message.get("tool_call_id"),
            "response": response,
        }
        return {"role": "tool", "parts": [part]}
    parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
    if role == "assistant":
        parts += _tool_call_parts(message)
    return {"role": role, "parts": parts}


def input_content(messages: Sequence[Mapping[str, Any]]) -> dict[str, AttributeValue]:
    """``gen_ai.system_instructions`` and ``gen_ai.input.messages`` of a request."""
    system = [message for message in messages if message.get("role") in ("system", "developer")]
    others = [message for message in messages if message not in system]
    attributes: dict[str, AttributeValue] = {}
    if system:
        parts = [{"type": "text", "content": _cut(_text(m.get("content")))} for m in system]
        attributes["gen_ai.system_instructions"] = bounded_messages(parts)
    attributes["gen_ai.input.messages"] = bounded_messages(
        [convention_message(message) for message in others]
    )
    return attributes


def output_content(
    text: str, tool_calls: Sequence[tuple[str, str, str]], finish_reason: str | None
) -> dict[str, AttributeValue]:
    """``gen_ai.output.messages`` of an answer (its text and its (id, name, arguments) calls)."""
    parts: list[dict[str, Any]] = [{"type": "text", "content": _cut(text)}] if text else []
    parts += [
        {"type": "tool_call", "id": id, "name": name, "arguments": _arguments(arguments)}
        for id, name, arguments in tool_calls
    ]
    message = {"role": "assistant", "parts": parts, "finish_reason": finish_reason or "stop"}
    return {"gen_ai.output.messages": bounded_messages([message])}


def bounded_messages(items: list[dict[str, Any]]) -> str:
    """``items`` redacted as JSON, the oldest left out while it is longer than the limit (the
    newest are what a turn adds)."""
    redacted = redact_json(items)
    encoded = json.dumps(redacted, ensure_ascii=False, default=str)
    while len(encoded) > ATTRIBUTE_LIMIT_CHARS and len(redacted) > 1:
        redacted = redacted[1:]
        encoded = json.dumps(redacted, ensure_ascii=False, default=str)
    if len(encoded) > ATTRIBUTE_LIMIT_CHARS:  # one huge message: its parts already cut
        return json.dumps([], ensure_ascii=False)
    return encoded


def bounded_text(value: Any) -> str:
    """A tool's arguments or result for ``gen_ai.tool.call.*``: redacted, cut."""
    redacted = redact_json(_arguments(value) if isinstance(value, str) else value)
    encoded = redacted if isinstance(redacted, str) else json.dumps(redacted, ensure_ascii=False)
    return _cut(encoded)


def note_response(model: object, response_id: object) -> bool:
    """Put the model and id the provider answered with on the current ``chat`` span (not
    content: always). Whether the answer named its model (a stream names it once enough)."""
    span = trace.get_current_span()
    if not isinstance(model, str) or not model:
        return False
    if span.is_recording():
        span.set_attribute("gen_ai.response.model", model)
        if isinstance(response_id, str) and response_id:
            span.set_attribute("gen_ai.response.id", response_id)
    return True


def note_model_request(messages: Sequence[Mapping[str, Any]]) -> None:
    """Put a model request's messages on the current ``chat`` span, when capturing."""
    span = trace.get_current_span()
    if capture_on() and span.is_recording():
        span.set_attributes(input_content(messages))


def note_model_answer(
    text: str, tool_calls: Sequence[tuple[str, str, str]], finish_reason: str | None
) -> None:
    """Put a model's answer on the current ``chat`` span, when capturing."""
    span = trace.get_current_span()
    if capture_on() and span.is_recording():
        span.set_attributes(output_content(text, tool_calls, finish_reason))


def note_tool_result(content: str) -> None:
    """Put a tool's result on the current ``execute_tool`` span, when capturing."""
    span = trace.get_current_span()
    if capture_on() and span.is_recording():
        span.set_attribute("gen_ai.tool.call.result", bounded_text(content))
