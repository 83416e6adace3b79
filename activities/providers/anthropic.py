"""Anthropic Messages API streaming for ``anthropic`` profiles.

Request: ``POST {base_url}/v1/messages`` (base URL ``https://api.anthropic.com``, as in the
SDKs; one that already ends in ``/v1`` gets ``/messages``) with ``x-api-key`` and
``anthropic-version: 2023-06-01`` (override with ``other.extra_headers``, which also carries
``anthropic-beta``). The neutral messages are converted:

* every ``system`` message joins the top-level ``system`` string;
* assistant ``tool_calls`` become ``tool_use`` blocks (``input`` is the parsed arguments);
* ``tool`` messages become ``tool_result`` blocks in a *user* message, and consecutive messages
  of one role are merged into one, so the results of a turn's tool calls travel together (with
  a queued user text after them), as the API requires;
* ``max_tokens`` is required: the profile's/agent's, else `DEFAULT_MAX_TOKENS` (4096, what every
  current Claude model can produce); ``stop`` in ``other`` becomes ``stop_sequences``;
  ``tool_choice`` ``auto``/``required``/``none``/a function becomes ``auto``/``any``/``none``/
  ``tool``, and ``parallel_tool_calls = false`` becomes ``disable_parallel_tool_use``; the rest of
  ``other`` (e.g. ``thinking = {type = "enabled", budget_tokens = 2048}``) is merged last;
* prompt-cache breakpoints mark the tools, the system prompt (then a list of one text block)
  and the conversation, unless the profile's ``prompt_cache`` is false (`anthropic_cache`).

Response events: ``message_start`` (input usage), ``content_block_start`` (text, ``tool_use``
with id and name, thinking), ``content_block_delta`` (``text_delta``, ``input_json_delta``,
``thinking_delta``), ``message_delta`` (stop reason, output usage), ``message_stop`` (complete),
``ping`` and unknown events (ignored), ``error`` (classified by its type). Stop reasons are
reported in the neutral vocabulary (``stop``, ``length``, ``tool_calls``).

Extended thinking with tool use: each ``thinking`` block (its text and ``signature_delta``)
and ``redacted_thinking`` block (its ``data``) is reported whole at ``content_block_stop`` as a
`ReasoningBlock`; the run keeps it with the assistant entry, and later requests send it back
unmodified as the first blocks of that assistant message (before its text and ``tool_use``), as
the API requires.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from otherone.activities.message_parts import TOOL_IMAGES_KEY
from otherone.activities.providers.anthropic_cache import with_cache_breakpoints
from otherone.activities.providers.base import (
    REASONING_KEY,
    TOOL_ERROR_KEY,
    Finished,
    ModelRequest,
    ProviderError,
    ReasoningBlock,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageReport,
)
from otherone.activities.providers.http import (
    HttpCall,
    TransportOptions,
    body_options,
    call_label,
    endpoint,
    parse_chunk,
    run_stream,
)
from otherone.activities.providers.secrets import resolve_api_key
from otherone.activities.providers.sse import ServerSentEvent
from otherone.wire_names import WireNames
from otherone.worker import genai_spans

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
#: Error types of an ``error`` event that a retry cannot fix; all others (overloaded_error,
#: api_error, rate_limit_error, timeout_error, new ones) are retried.
FINAL_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "billing_error",
    }
)
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
#: The user turn that opens a context starting with the assistant (`anthropic_messages`).
EARLIER_NOT_SHOWN = "(Earlier messages of this conversation are not shown.)"
TOOL_CHOICE_TYPES = {"auto": "auto", "required": "any", "any": "any", "none": "none"}


#: The reasoning blocks this API sends and takes back.
ANTHROPIC_REASONING_TYPES = frozenset({"thinking", "redacted_thinking"})


class AnthropicProvider:
    """Streams one Messages API response."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        call, names = messages_call(request)
        async for event in run_stream(call, MessagesState(call.label, names)):
            yield event


def messages_call(request: ModelRequest) -> tuple[HttpCall, WireNames]:
    """The HTTP request of ``request`` (the key is read here, at call time)."""
    profile = request.profile
    label = call_label(profile, request.attempt)
    options = TransportOptions.of(request.settings.get("other", {}), label)
    key = resolve_api_key(profile)
    headers = {"Accept": "text/event-stream", "anthropic-version": ANTHROPIC_VERSION}
    headers.update(options.headers)
    if key is not None:
        headers["x-api-key"] = key.value
    names = WireNames(str(tool.get("function", {}).get("name", "")) for tool in request.tools)
    base_url = profile.base_url or DEFAULT_BASE_URL
    on_v1 = urllib.parse.urlsplit(base_url).path.rstrip("/").endswith("/v1")
    call = HttpCall(
        profile=profile,
        label=label,
        url=endpoint(base_url, "/messages" if on_v1 else "/v1/messages"),
        headers=headers,
        body=messages_body(request, names),
        key=key,
        read_timeout=options.read_timeout,
    )
    return call, names


def messages_body(request: ModelRequest, names: WireNames) -> dict[str, Any]:
    """The JSON body: neutral messages and settings under the Messages API's names."""
    settings, other = request.settings, body_options(request.settings.get("other", {}))
    system, messages = anthropic_messages(request.messages, names)
    body: dict[str, Any] = {
        "model": request.profile.model,
        "max_tokens": settings.get("max_tokens") or DEFAULT_MAX_TOKENS,
        "messages": messages,
        "stream": True,
    }
    if system:
        body["system"] = system
    for name in ("temperature", "top_p"):
        if settings.get(name) is not None:
            body[name] = settings[name]
    if request.tools:
        body["tools"] = [_wire_tool(tool, names) for tool in request.tools]
        choice = _tool_choice(settings.get("tool_choice"), settings.get("parallel_tool_calls"))
        if choice is not None:
            body["tool_choice"] = _encode_choice(choice, names)
    if "stop" in other:
        stop = other.pop("stop")
        body["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    if request.profile.prompt_cache is not False:
        body = with_cache_breakpoints(body)
    return {**body, **other}


def _wire_tool(tool: Mapping[str, Any], names: WireNames) -> dict[str, Any]:
    function = tool.get("function", {})
    wire: dict[str, Any] = {
        "name": names.encode(function.get("name", "")),
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        wire["description"] = function["description"]
    return wire


def _tool_choice(choice: Any, parallel: bool | None) -> dict[str, Any] | None:
    """Neutral (OpenAI-style) tool_choice and parallel_tool_calls as one Anthropic tool_choice."""
    if choice is None and parallel is None:
        return None
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        wire: dict[str, Any] = {"type": "tool", "name": choice["function"].get("name", "")}
    elif isinstance(choice, dict):
        wire = dict(choice)  # already in Anthropic's shape
    else:
        wire = {"type": TOOL_CHOICE_TYPES.get(str(choice or "auto"), str(choice))}
    if parallel is False and wire.get("type") != "none":
        wire["disable_parallel_tool_use"] = True
    return wire


def _encode_choice(choice: dict[str, Any], names: WireNames) -> dict[str, Any]:
    if isinstance(choice.get("name"), str):
        return {**choice, "name": names.encode(choice["name"])}
    return choice


def anthropic_messages(
    messages: list[dict[str, Any]], names: WireNames
) -> tuple[str, list[dict[str, Any]]]:
    """(system, messages): neutral messages as Messages API turns, one role after the other."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "system":
            if message.get("content"):
                system.append(str(message["content"]))
            continue
        role = "assistant" if message.get("role") == "assistant" else "user"
        blocks = _blocks(message, names)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[0]["role"] == "assistant":
        # After a compaction's cut or a handoff's last turns a context may open with the
        # assistant, which Bedrock (and the API before late 2024) refuses: a user turn opens it.
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": EARLIER_NOT_SHOWN}]})
    return "\n\n".join(system), turns


def _blocks(message: Mapping[str, Any], names: WireNames) -> list[dict[str, Any]]:
    if message.get("role") == "tool":
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message["tool_call_id"]}
        if message.get("content"):
            result["content"] = message["content"]
        images = message.get(TOOL_IMAGES_KEY)
        if images:  # a tool_result's content may hold image blocks next to its text
            text = [{"type": "text", "text": message["content"]}] if message.get("content") else []
            result["content"] = [*text, *(_content_block(image) for image in images)]
        if message.get(TOOL_ERROR_KEY):
            result["is_error"] = True  # the model is told the call failed, not what it gave
        return [result]
    # The turn's own thinking blocks first, unmodified (their signatures are checked); another
    # API's stored blocks (a session that changed models) are not for this one.
    blocks = [
        dict(block)
        for block in message.get(REASONING_KEY) or ()
        if block.get("type") in ANTHROPIC_REASONING_TYPES
    ]
    blocks += _content_blocks(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": names.encode(function["name"]),
                "input": tool_input(function.get("arguments")),
            }
        )
    return blocks


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    """Text (never an empty block: the API rejects those) or already-structured parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [_content_block(part) for part in content]
    return []


def _content_block(part: Any) -> Any:
    """A neutral part as a Messages API block: ``text``, ``image`` or ``document`` (a file),
    its ``source`` base64 (``media_type``, ``data``) or ``url``."""
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    if kind in ("image", "file"):
        source: dict[str, Any] = (
            {"type": "base64", "media_type": part["media_type"], "data": part["data"]}
            if "data" in part
            else {"type": "url", "url": part["url"]}
        )
        return {"type": "image" if kind == "image" else "document", "source": source}
    return part


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the object ``tool_use.input`` must be."""
    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


@dataclass
class MessagesState:
    """Turns Messages API stream events into our stream events (pure: no I/O)."""

    label: str
    names: WireNames
    done: bool = False
    stop_reason: str | None = None
    #: Reasoning blocks being streamed, by content block index (sent whole when they stop).
    reasoning: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Indexes of the `tool_use` blocks (their input deltas are a call's arguments).
    tool_uses: set[Any] = field(default_factory=set)

    def events(self, sse: ServerSentEvent) -> list[StreamEvent]:
        if sse.event == "ping":
            return []
        payload = parse_chunk(self.label, sse.data)
        kind = payload.get("type") or sse.event
        handler = self._handlers().get(str(kind))
        return handler(payload) if handler else []

    def finish(self) -> list[StreamEvent]:
        if not self.done:
            raise ProviderError(
                f"{self.label}: the stream ended before it was complete (no message_stop)",
                retryable=True,
            )
        reason = STOP_REASONS.get(self.stop_reason or "", self.stop_reason)
        return [Finished(reason)]

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], list[StreamEvent]]]:
        return {
            "message_start": self._message_start,
            "content_block_start": self._block_start,
            "content_block_delta": self._block_delta,
            "content_block_stop": self._block_stop,
            "message_delta": self._message_delta,
            "message_stop": self._message_stop,
            "error": self._error,
        }

    def _message_start(self, payload: dict[str, Any]) -> list[StreamEvent]:
        message = payload.get("message") or {}
        genai_spans.note_response(message.get("model"), message.get("id"))
        usage = message.get("usage") or {}
        return [usage_report(usage)]

    def _block_start(self, payload: dict[str, Any]) -> list[StreamEvent]:
        block, index = payload.get("content_block") or {}, payload.get("index")
        kind = block.get("type")
        if kind == "tool_use":
            # Only these are our tools: a `server_tool_use` block (a tool the API runs, e.g.
            # web search) streams its input the same way, but is no call for us to make.
            self.tool_uses.add(index)
            name = block.get("name")
            return [
                ToolCallDelta(
                    index=index if isinstance(index, int) else None,
                    id=block.get("id") or None,
                    name=self.names.decode(name) if name else None,
                )
            ]
        if kind == "text" and _text(block.get("text")):
            return [TextDelta(block["text"])]
        if kind == "thinking" and isinstance(index, int):
            thinking = block.get("thinking") if _text(block.get("thinking")) else ""
            self.reasoning[index] = {
                "type": "thinking",
                "thinking": thinking,
                "signature": str(block.get("signature") or ""),
            }
            return [ThinkingDelta(thinking)] if thinking else []
        if kind == "redacted_thinking" and isinstance(index, int):
            self.reasoning[index] = {"type": "redacted_thinking", "data": block.get("data", "")}
        return []

    def _block_delta(self, payload: dict[str, Any]) -> list[StreamEvent]:
        delta, index = payload.get("delta") or {}, payload.get("index")
        kind = delta.get("type")
        if kind == "text_delta" and _text(delta.get("text")):
            return [TextDelta(delta["text"])]
        if (
            kind == "input_json_delta"
            and index in self.tool_uses
            and _text(delta.get("partial_json"))
        ):
            return [
                ToolCallDelta(
                    index=index if isinstance(index, int) else None,
                    arguments=delta["partial_json"],
                )
            ]
        if kind == "thinking_delta" and _text(delta.get("thinking")):
            if index in self.reasoning:
                self.reasoning[index]["thinking"] += delta["thinking"]
            return [ThinkingDelta(delta["thinking"])]
        if kind == "signature_delta" and index in self.reasoning:
            self.reasoning[index]["signature"] += str(delta.get("signature") or "")
        return []  # citations_delta, ...

    def _block_stop(self, payload: dict[str, Any]) -> list[StreamEvent]:
        index = payload.get("index")
        block = self.reasoning.pop(index, None) if isinstance(index, int) else None
        return [ReasoningBlock(block)] if block is not None else []

    def _message_delta(self, payload: dict[str, Any]) -> list[StreamEvent]:
        reason = (payload.get("delta") or {}).get("stop_reason")
        if reason:
            self.stop_reason = str(reason)
        usage = payload.get("usage") or {}
        if not usage:
            return []
        return [usage_report(usage)]

    def _message_stop(self, payload: dict[str, Any]) -> list[StreamEvent]:
        self.done = True
        return []

    def _error(self, payload: dict[str, Any]) -> list[StreamEvent]:
        error = payload.get("error") or {}
        kind, message = str(error.get("type", "error")), error.get("message", "")
        raise ProviderError(
            f"{self.label}: error in stream: {kind}: {message}",
            retryable=kind not in FINAL_ERROR_TYPES,
        )


def usage_report(usage: Mapping[str, Any]) -> UsageReport:
    """A Messages API ``usage`` object (``message_start``'s, or ``message_delta``'s cumulative
    one): input tokens are reported in three parts, added up here; the cache's are kept apart
    too, to be priced as such. A count the object leaves out stays None (the earlier one holds).
    """
    return UsageReport(
        input_tokens=_input_tokens(usage),
        output_tokens=_count(usage.get("output_tokens")),
        cache_read_tokens=_count(usage.get("cache_read_input_tokens")),
        cache_write_tokens=_count(usage.get("cache_creation_input_tokens")),
    )


def _input_tokens(usage: Mapping[str, Any]) -> int | None:
    """Input tokens including cache writes and reads (the API counts those apart)."""
    parts = [
        _count(usage.get(name))
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    ]
    if parts[0] is None:
        return None
    return sum(part or 0 for part in parts)


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
