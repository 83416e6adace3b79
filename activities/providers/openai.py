"""Chat Completions streaming for ``openai``, ``openrouter`` and ``local`` profiles.

One wire format, three kinds of server: OpenAI itself, OpenRouter, and any OpenAI-compatible
server (Ollama, vLLM, llama.cpp, LM Studio). The request is built from the neutral messages and
settings; the response is read as SSE ``chat.completion.chunk`` objects and turned into our
stream events, emitted faithfully (tool-call pieces are merged by the activity's collector).

Parameter names:

* the output limit is ``max_completion_tokens`` for ``openai`` (OpenAI deprecated
  ``max_tokens`` there, and its reasoning models reject it) and ``max_tokens`` for
  ``openrouter`` and ``local`` (what OpenRouter documents and what every compatible server
  understands). Either name written in ``other`` wins and the other one is not sent;
* ``temperature``, ``top_p``, ``stop`` (from ``other``), ``tools`` (names encoded by
  `otherone.wire_names`), ``tool_choice`` and ``parallel_tool_calls`` (only with tools: the API
  refuses them alone); ``stream_options.include_usage`` so the last chunk carries usage;
  every other ``other`` key is merged into the body last (it may override any of these);
* ``context_length`` is never sent (compaction uses the session's ``context_window``).

Reasoning arrives as ``reasoning_content`` (DeepSeek, vLLM, llama.cpp), ``reasoning``
(OpenRouter, Ollama) or ``thinking`` deltas: all become `ThinkingDelta`. The stream is complete
at ``data: [DONE]``, or at its end when a ``finish_reason`` was seen (servers that omit
``[DONE]``); anything shorter is a cut stream, retryable.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from otherone.activities.message_parts import TOOL_IMAGES_KEY, data_url
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
    is_retryable_status,
    parse_chunk,
    run_stream,
)
from otherone.activities.providers.secrets import resolve_api_key
from otherone.activities.providers.sse import ServerSentEvent
from otherone.wire_names import WireNames
from otherone.worker import genai_spans

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "local": "http://127.0.0.1:11434/v1",  # Ollama's default
}
MAX_TOKENS_PARAMETER = {
    "openai": "max_completion_tokens",
    "openrouter": "max_tokens",
    "local": "max_tokens",
}
OUTPUT_LIMIT_NAMES = ("max_tokens", "max_completion_tokens")
REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")
#: Type of the reasoning block this API's turns store: what their server wants returned.
ROUND_TRIP = "chat_completions_round_trip"


class OpenAIChatProvider:
    """Streams one Chat Completions response; the profile's provider picks the dialect."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        call, names = chat_completions_call(request)
        state = ChatCompletionsState(call.label, names, server=call.url)
        async for event in run_stream(call, state):
            yield event


def chat_completions_call(request: ModelRequest) -> tuple[HttpCall, WireNames]:
    """The HTTP request of ``request`` (the key is read here, at call time)."""
    profile = request.profile
    label = call_label(profile, request.attempt)
    options = TransportOptions.of(request.settings.get("other", {}), label)
    key = resolve_api_key(profile)
    headers = {"Accept": "text/event-stream", **options.headers}
    if key is not None:
        headers["Authorization"] = f"Bearer {key.value}"
    names = WireNames(_tool_name(tool) for tool in request.tools)
    base_url = profile.base_url or DEFAULT_BASE_URLS[profile.provider]
    call = HttpCall(
        profile=profile,
        label=label,
        url=endpoint(base_url, "/chat/completions"),
        headers=headers,
        body=chat_completions_body(request, names),
        key=key,
        read_timeout=options.read_timeout,
    )
    return call, names


def chat_completions_body(request: ModelRequest, names: WireNames) -> dict[str, Any]:
    """The JSON body: neutral messages and settings under the API's parameter names."""
    settings, other = request.settings, body_options(request.settings.get("other", {}))
    body: dict[str, Any] = {
        "model": request.profile.model,
        "messages": _wire_messages(request.messages, names, endpoint_of(request)),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if settings.get("max_tokens") and not any(name in other for name in OUTPUT_LIMIT_NAMES):
        body[MAX_TOKENS_PARAMETER.get(request.profile.provider, "max_tokens")] = settings[
            "max_tokens"
        ]
    for name in ("temperature", "top_p"):
        if settings.get(name) is not None:
            body[name] = settings[name]
    if request.tools:
        body["tools"] = [_wire_tool(tool, names) for tool in request.tools]
        if settings.get("tool_choice") is not None:
            body["tool_choice"] = _wire_tool_choice(settings["tool_choice"], names)
        if settings.get("parallel_tool_calls") is not None:
            body["parallel_tool_calls"] = settings["parallel_tool_calls"]
    return {**body, **other}


def _tool_name(tool: Mapping[str, Any]) -> str:
    return str(tool.get("function", {}).get("name", ""))


def _wire_tool(tool: Mapping[str, Any], names: WireNames) -> dict[str, Any]:
    function = dict(tool.get("function", {}))
    function["name"] = names.encode(function.get("name", ""))
    return {**tool, "function": function}


def _wire_tool_choice(choice: Any, names: WireNames) -> Any:
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        function = choice["function"]
        return {**choice, "function": {**function, "name": names.encode(function["name"])}}
    return choice


def endpoint_of(request: ModelRequest) -> str:
    """The URL a request goes to (what a turn's round-trip data is tied to)."""
    base_url = request.profile.base_url or DEFAULT_BASE_URLS[request.profile.provider]
    return endpoint(base_url, "/chat/completions")


def _wire_messages(
    messages: Sequence[Mapping[str, Any]], names: WireNames, server: str
) -> list[dict[str, Any]]:
    """The messages as sent; the current turn's assistant messages (those after the last user
    message) get back what their server asked to be returned (`ROUND_TRIP`)."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    wire: list[dict[str, Any]] = []
    images: list[Mapping[str, Any]] = []  # of the tool messages just written
    for index, message in enumerate(messages):
        if images and message.get("role") != "tool":
            wire.append(_tool_images_message(images))
            images = []
        if message.get(TOOL_IMAGES_KEY):
            images.append(message)
        wire.append(_wire_message(message, names, server if index > last_user else None))
    if images:
        wire.append(_tool_images_message(images))
    return wire


def _tool_images_message(tool_messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The images tools returned, as a user message after their results: a Chat Completions
    tool message holds text only."""
    content: list[dict[str, Any]] = []
    for message in tool_messages:
        text = f"Images returned by tool call {message['tool_call_id']}:"
        content.append({"type": "text", "text": text})
        content += [chat_completions_part(image) for image in message[TOOL_IMAGES_KEY]]
    return {"role": "user", "content": content}


def _wire_message(
    message: Mapping[str, Any], names: WireNames, server: str | None = None
) -> dict[str, Any]:
    """A neutral message as sent: tool names encoded, no empty text next to tool calls, and,
    for a ``server`` that sent them, the turn's reasoning and tool-call extras."""
    wire = dict(message)
    blocks = wire.pop(REASONING_KEY, None) or ()
    returned = next(
        (b for b in blocks if b.get("type") == ROUND_TRIP and server and b.get("server") == server),
        None,
    )
    wire.pop(TOOL_ERROR_KEY, None)  # not a field of this API (the content says it failed)
    wire.pop(TOOL_IMAGES_KEY, None)  # sent in a user message after the results
    if isinstance(message.get("content"), list):
        wire["content"] = [chat_completions_part(part) for part in message["content"]]
    if message.get("role") == "assistant" and message.get("tool_calls"):
        wire["tool_calls"] = [
            {
                **call,
                "function": {
                    **call["function"],
                    "name": names.encode(call["function"]["name"]),
                },
            }
            for call in message["tool_calls"]
        ]
        if not message.get("content"):
            wire["content"] = None
        if returned is not None:
            _return_to_server(wire, returned)
    return wire


def chat_completions_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A neutral content part as Chat Completions takes it: ``text``; ``image_url`` (a data
    URL, or the image's own http(s) URL); ``file`` (``filename`` and ``file_data``, a data URL:
    the API takes files inline only, so a file given by URL is sent as its URL in text)."""
    kind = part.get("type")
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": data_url(part)}}
    if kind == "file" and "data" in part:
        file = {"filename": part["filename"], "file_data": data_url(part)}
        return {"type": "file", "file": file}
    if kind == "file":
        return {"type": "text", "text": f"[file {part.get('filename')}: {part.get('url')}]"}
    return dict(part)


def _return_to_server(wire: dict[str, Any], returned: Mapping[str, Any]) -> None:
    """Put back on an assistant message what its server asked for: DeepSeek's thinking mode
    refuses a tool-calling turn's continuation without its ``reasoning_content``, Gemini a
    function call without the ``extra_content`` (its thought signature) it came with."""
    if isinstance(returned.get("reasoning_content"), str):
        wire["reasoning_content"] = returned["reasoning_content"]
    extras = returned.get("tool_call_extras") or []
    for position, call in enumerate(wire["tool_calls"]):
        extra = next(
            (
                item["extra_content"]
                for item in extras
                if item.get("id") == call["id"]
                or (item.get("id") is None and item.get("index") == position)
            ),
            None,
        )
        if extra is not None:
            call["extra_content"] = extra


@dataclass
class ChatCompletionsState:
    """Turns ``chat.completion.chunk`` events into stream events (pure: no I/O)."""

    label: str
    names: WireNames
    #: Where the request went: the round-trip block is tied to it (`ROUND_TRIP`).
    server: str = ""
    done: bool = False
    finish_reason: str | None = None
    #: Whether any chunk carried the answer's choice (a stream of [DONE] alone holds none).
    answered: bool = False
    #: Whether the answer is a refusal (``delta.refusal`` instead of ``content``).
    refused: bool = False
    #: Whether a chunk named the model that answered (on the model call's span).
    model_noted: bool = False
    #: DeepSeek's ``reasoning_content`` pieces (returned with a tool-calling turn).
    reasoning_content: list[str] = field(default_factory=list)
    #: ``extra_content`` of tool calls (Gemini's thought signatures), with their index and id.
    tool_call_extras: list[dict[str, Any]] = field(default_factory=list)
    #: Whether the turn calls tools (only then is reasoning returned).
    calls_tools: bool = False

    def events(self, sse: ServerSentEvent) -> list[StreamEvent]:
        if sse.data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = parse_chunk(self.label, sse.data)
        if chunk.get("error"):
            raise self._stream_error(chunk["error"])
        events: list[StreamEvent] = []
        if not self.model_noted:
            self.model_noted = genai_spans.note_response(chunk.get("model"), chunk.get("id"))
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                events += self._choice(choice)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            events.append(usage_report(usage))
        return events

    def finish(self) -> list[StreamEvent]:
        if not self.done and self.finish_reason is None:
            raise ProviderError(
                f"{self.label}: the stream ended before it was complete (no [DONE])",
                retryable=True,
            )
        if not self.answered:  # not an empty answer (that has a choice): no answer at all
            raise ProviderError(
                f"{self.label}: the stream held no answer (no choice before its end)",
                retryable=True,
            )
        return [*self._round_trip(), Finished("refusal" if self.refused else self.finish_reason)]

    def _round_trip(self) -> list[StreamEvent]:
        """What this server wants back with the turn's assistant message, as a reasoning block
        stored with it (never in Temporal's history): see `_return_to_server`."""
        block: dict[str, Any] = {"type": ROUND_TRIP, "server": self.server}
        if self.reasoning_content and self.calls_tools:
            block["reasoning_content"] = "".join(self.reasoning_content)
        if self.tool_call_extras:
            block["tool_call_extras"] = self.tool_call_extras
        return [ReasoningBlock(block)] if len(block) > 2 else []

    def _choice(self, choice: Mapping[str, Any]) -> list[StreamEvent]:
        self.answered = True
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content is not None and not isinstance(content, str):
            raise ProviderError(
                f"{self.label}: malformed chunk: 'content' is {type(content).__name__}, not text",
                retryable=True,
            )
        events: list[StreamEvent] = []
        reasoning = next((delta[k] for k in REASONING_KEYS if _text(delta.get(k))), None)
        if reasoning:
            events.append(ThinkingDelta(reasoning))
        if _text(delta.get("reasoning_content")):
            self.reasoning_content.append(delta["reasoning_content"])
        if _text(delta.get("content")):
            events.append(TextDelta(delta["content"]))
        if _text(delta.get("refusal")):
            # The model declined (structured outputs, safety): its words are the answer, not
            # an empty text; the turn's finish reason says `refusal`.
            self.refused = True
            events.append(TextDelta(delta["refusal"]))
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                events.append(self._tool_call(call))
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        return events

    def _tool_call(self, call: Mapping[str, Any]) -> ToolCallDelta:
        self.calls_tools = True
        function = call.get("function") or {}
        if isinstance(call.get("extra_content"), dict):
            self.tool_call_extras.append(
                {
                    "index": call.get("index"),
                    "id": call.get("id") or None,
                    "extra_content": call["extra_content"],
                }
            )
        name, arguments = function.get("name"), function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            arguments = json.dumps(arguments)  # a server that sends the object itself
        index = call.get("index")
        return ToolCallDelta(
            index=index if isinstance(index, int) else None,
            id=call.get("id") or None,
            name=self.names.decode(name) if name else None,
            arguments=arguments or "",
        )

    def _stream_error(self, error: Any) -> ProviderError:
        """An error object inside the stream (OpenRouter, some servers): numeric codes classify."""
        message = error.get("message") if isinstance(error, dict) else str(error)
        code = error.get("code") if isinstance(error, dict) else None
        retryable = is_retryable_status(code) if isinstance(code, int) else True
        return ProviderError(
            f"{self.label}: error in stream: {message} (code {code})", retryable=retryable
        )


def usage_report(usage: Mapping[str, Any]) -> UsageReport:
    """A Chat Completions ``usage`` object: ``prompt_tokens`` includes the cached ones
    (``prompt_tokens_details.cached_tokens``, OpenAI's automatic caching, billed at the cache
    price); OpenAI bills no cache writes, so they are reported as none."""
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    return UsageReport(
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        cache_read_tokens=cached,
        cache_write_tokens=0 if cached is not None else None,
    )


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
