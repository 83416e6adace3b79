"""The SSE parser and the providers' stream translation, under any network chunking.

Recorded streams (``tests/fixtures/providers/*.sse``) are cut at random byte boundaries — inside
events, lines, ``\\r\\n`` pairs and multi-byte UTF-8 characters — and must always give the same
events as the whole stream.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otherone.activities.providers.anthropic import MessagesState
from otherone.activities.providers.base import (
    Finished,
    ProviderError,
    ReasoningBlock,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageReport,
)
from otherone.activities.providers.openai import ChatCompletionsState
from otherone.activities.providers.sse import ServerSentEvent, SSEDecoder
from otherone.wire_names import WireNames
from tests.fixtures.providers.wire_server import fixture

NAMES = WireNames(["get_weather", "agent.call", "mcp.weather.lookup"])
State = ChatCompletionsState | MessagesState
STATES: dict[str, Callable[[], State]] = {
    "openai_text.sse": lambda: ChatCompletionsState("m", NAMES),
    "openai_multi_tool.sse": lambda: ChatCompletionsState("m", NAMES),
    "openrouter_reasoning.sse": lambda: ChatCompletionsState("m", NAMES),
    "local_crlf_tool.sse": lambda: ChatCompletionsState("m", NAMES),
    "anthropic_tools.sse": lambda: MessagesState("m", NAMES),
    "anthropic_thinking.sse": lambda: MessagesState("m", NAMES),
}


def parse(chunks: Sequence[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.close()


def translate(name: str, chunks: Sequence[bytes]) -> list[StreamEvent]:
    """What a provider yields for this stream, read in these pieces (as `run_stream` does)."""
    state = STATES[name]()
    out: list[StreamEvent] = []
    for sse in parse(chunks):
        out += state.events(sse)
        if state.done:
            break
    return out + state.finish()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


# --------------------------------------------------------------------------- the parser


def test_events_with_names_ids_comments_and_multiline_data() -> None:
    stream = (
        b": keep-alive\n\n"
        b'event: message_start\nid: 7\ndata: {"a":1}\n\n'
        b"data: line one\ndata:line two\ndata\n\n"
        b"retry: 3000\n:comment\ndata: x\n\n"
        b"event: empty\n\n"
        b"data: [DONE]\n\n"
    )
    assert parse([stream]) == [
        ServerSentEvent(data='{"a":1}', event="message_start", id="7"),
        ServerSentEvent(data="line one\nline two\n", id="7"),
        ServerSentEvent(data="x", id="7", retry=3000),
        ServerSentEvent(data="[DONE]", id="7", retry=3000),
    ]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(newline: bytes) -> None:
    stream = newline.join([b"event: e", b"data: 1", b"", b"data: 2", b"", b""])
    assert parse([stream]) == [ServerSentEvent("1", "e"), ServerSentEvent("2")]


def test_carriage_return_then_line_feed_in_the_next_read_is_one_line_break() -> None:
    assert parse([b"data: 1\r", b"\ndata: 2\r", b"\n\r", b"\n"]) == [ServerSentEvent("1\n2")]


def test_a_bom_is_skipped_and_utf8_split_across_reads_survives() -> None:
    data = "\ufeffdata: été 😀\n\n".encode()
    assert parse([bytes([byte]) for byte in data]) == [ServerSentEvent("été 😀")]


def test_an_event_cut_before_its_blank_line_is_dropped() -> None:
    assert parse([b'data: {"ok":1}\n\ndata: {"cut']) == [ServerSentEvent('{"ok":1}')]
    assert parse([b"data: 1\n"]) == []


# --------------------------------------------------------------------------- property tests


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(STATES)), cuts=st.lists(st.integers(0, 10_000), max_size=40))
def test_recorded_streams_give_the_same_events_however_they_are_chunked(
    name: str, cuts: list[int]
) -> None:
    data = fixture(name)
    whole = translate(name, [data])
    assert translate(name, split(data, cuts)) == whole
    assert parse(split(data, cuts)) == parse([data])


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(STATES)))
def test_byte_by_byte_reads_give_the_same_events(name: str) -> None:
    data = fixture(name)
    assert translate(name, [data[i : i + 1] for i in range(len(data))]) == translate(name, [data])


_values = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=30
)
_events = st.lists(
    st.tuples(st.sampled_from(["", "message", "delta"]), st.lists(_values, min_size=1, max_size=3)),
    max_size=6,
)


@settings(max_examples=100, deadline=None)
@given(
    events=_events,
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    comments=st.booleans(),
    cuts=st.lists(st.integers(0, 5_000), max_size=30),
)
def test_generated_streams_round_trip(
    events: list[tuple[str, list[str]]], newline: str, comments: bool, cuts: list[int]
) -> None:
    lines: list[str] = []
    for kind, data in events:
        if comments:
            lines.append(": ping")
        if kind:
            lines.append(f"event: {kind}")
        lines += [f"data: {value}" for value in data]
        lines.append("")
    encoded = "".join(line + newline for line in lines).encode()
    expected = [ServerSentEvent("\n".join(data), kind or "message") for kind, data in events]
    assert parse(split(encoded, cuts)) == expected


# --------------------------------------------------------------------------- translation


def test_openai_text_stream() -> None:
    assert translate("openai_text.sse", [fixture("openai_text.sse")]) == [
        TextDelta("Hello"),
        TextDelta(" there"),
        TextDelta("! How can"),
        TextDelta(" I help été 😀?"),
        UsageReport(19, 10),
        Finished("stop"),
    ]


def test_openai_interleaved_tool_calls_are_emitted_faithfully_with_decoded_names() -> None:
    events = translate("openai_multi_tool.sse", [fixture("openai_multi_tool.sse")])
    assert events[:2] == [
        ToolCallDelta(0, "call_weather_1", "get_weather", ""),
        ToolCallDelta(1, "call_agent_2", "agent.call", ""),
    ]
    assert [(e.index, e.arguments) for e in events[2:8] if isinstance(e, ToolCallDelta)] == [
        (0, '{"ci'),
        (1, '{"agent": "wri'),
        (0, 'ty": "Pa'),
        (1, 'ter", "task": "Draft a note'),
        (0, 'ris"}'),
        (1, ' for Paris"}'),
    ]
    assert events[8:] == [UsageReport(82, 41, 0, 0), Finished("tool_calls")]  # cached: 0


def test_openrouter_reasoning_and_keep_alive_comments() -> None:
    assert translate("openrouter_reasoning.sse", [fixture("openrouter_reasoning.sse")]) == [
        ThinkingDelta("The user asks"),
        ThinkingDelta(" for 2+2."),
        TextDelta("2 + 2"),
        TextDelta(" = 4."),
        UsageReport(12, 30),
        Finished("stop"),
    ]


def test_local_server_crlf_reasoning_content_and_namespaced_tool() -> None:
    assert translate("local_crlf_tool.sse", [fixture("local_crlf_tool.sse")]) == [
        ThinkingDelta("Need the"),
        ThinkingDelta(" weather tool."),
        ToolCallDelta(0, "Jq2cV1mA", "mcp.weather.lookup", '{"city":'),
        ToolCallDelta(0, None, None, '"Oslo"}'),
        UsageReport(140, 21),
        # Kept with the turn and returned with its assistant message (DeepSeek's rule).
        ReasoningBlock(
            {
                "type": "chat_completions_round_trip",
                "server": "",
                "reasoning_content": "Need the weather tool.",
            }
        ),
        Finished("tool_calls"),
    ]


def test_anthropic_text_and_tool_use_blocks() -> None:
    assert translate("anthropic_tools.sse", [fixture("anthropic_tools.sse")]) == [
        UsageReport(472, 1),
        TextDelta("Okay, I'll "),
        TextDelta("ask both."),
        ToolCallDelta(1, "toolu_01A09q90qw90lq917835lq9", "get_weather", ""),
        ToolCallDelta(1, None, None, '{"city": '),
        ToolCallDelta(1, None, None, '"Paris"}'),
        ToolCallDelta(2, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "agent.call", ""),
        ToolCallDelta(2, None, None, '{"agent": "writer", '),
        ToolCallDelta(2, None, None, '"task": "Draft a note"}'),
        UsageReport(None, 89),
        Finished("tool_calls"),
    ]


def test_anthropic_thinking_blocks() -> None:
    assert translate("anthropic_thinking.sse", [fixture("anthropic_thinking.sse")]) == [
        UsageReport(36, 1),
        ThinkingDelta("Let me add "),
        ThinkingDelta("2 and 2."),
        # The whole signed block, to be sent back with the turn (extended thinking + tools).
        ReasoningBlock(
            {
                "type": "thinking",
                "thinking": "Let me add 2 and 2.",
                "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h",
            }
        ),
        TextDelta("The answer "),
        TextDelta("is 4 — été."),
        UsageReport(None, 120),
        Finished("stop"),
    ]


def test_anthropic_cache_tokens_count_as_input() -> None:
    state = MessagesState("m", NAMES)
    usage = {"input_tokens": 5, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 7}
    event = ServerSentEvent(
        '{"type":"message_start","message":{"usage":' + str(usage).replace("'", '"') + "}}",
        "message_start",
    )
    assert state.events(event) == [
        UsageReport(112, None, cache_read_tokens=7, cache_write_tokens=100)
    ]


@pytest.mark.parametrize("name", sorted(STATES))
def test_a_stream_cut_anywhere_before_its_end_is_a_retryable_error(name: str) -> None:
    data = fixture(name)
    end = data.rindex(b"data:")  # everything up to the last event ([DONE] / message_stop)
    errors = 0
    for cut in range(0, end, max(1, end // 25)):
        events = _translate_or_error(name, data[:cut])
        if isinstance(events, ProviderError):
            errors += 1
            assert events.retryable and "ended before it was complete" in events.message
        else:  # only OpenAI-format streams cut after their finish_reason are complete
            assert name.startswith(("openai", "openrouter", "local"))
            assert isinstance(events[-1], Finished) and events[-1].reason
    assert errors >= 20


def _translate_or_error(name: str, data: bytes) -> list[StreamEvent] | ProviderError:
    try:
        return translate(name, [data])
    except ProviderError as error:
        return error


def test_malformed_json_in_a_chunk_is_a_retryable_error() -> None:
    state = ChatCompletionsState("model 'gpt' (openai, attempt 1)", NAMES)
    with pytest.raises(ProviderError) as caught:
        state.events(ServerSentEvent('{"choices":[{"delta":{"content":"hi"}'))
    assert caught.value.retryable
    assert caught.value.message.startswith(
        "model 'gpt' (openai, attempt 1): malformed stream chunk"
    )
    with pytest.raises(ProviderError):
        MessagesState("m", NAMES).events(ServerSentEvent("[1, 2]", "content_block_delta"))


def test_errors_inside_streams_are_classified() -> None:
    overloaded = ServerSentEvent(
        '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', "error"
    )
    invalid = ServerSentEvent(
        '{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}', "error"
    )
    with pytest.raises(ProviderError) as retryable:
        MessagesState("m", NAMES).events(overloaded)
    with pytest.raises(ProviderError) as final:
        MessagesState("m", NAMES).events(invalid)
    assert retryable.value.retryable and "overloaded_error: Overloaded" in retryable.value.message
    assert not final.value.retryable
    openrouter = ServerSentEvent('{"error":{"code":502,"message":"Provider returned error"}}')
    bad_request = ServerSentEvent('{"error":{"code":400,"message":"context too long"}}')
    with pytest.raises(ProviderError) as upstream:
        ChatCompletionsState("m", NAMES).events(openrouter)
    with pytest.raises(ProviderError) as refused:
        ChatCompletionsState("m", NAMES).events(bad_request)
    assert upstream.value.retryable and not refused.value.retryable


def test_an_openai_stream_with_no_answer_or_content_that_is_not_text_is_retried() -> None:
    """A chunk whose ``content`` is not text, or a stream that is only ``[DONE]``, used to end
    the run `completed` with an empty answer; both are malformed answers, retried like a cut
    stream. (An empty answer the model chose, with its choice and finish reason, stays one.)"""
    bad_content = ChatCompletionsState("m", NAMES)
    with pytest.raises(ProviderError, match="'content' is int, not text") as raised:
        bad_content.events(ServerSentEvent('{"choices": [{"index": 0, "delta": {"content": 5}}]}'))
    assert raised.value.retryable
    only_done = ChatCompletionsState("m", NAMES)
    assert only_done.events(ServerSentEvent("[DONE]")) == []
    with pytest.raises(ProviderError, match="held no answer") as raised:
        only_done.finish()
    assert raised.value.retryable
    empty = ChatCompletionsState("m", NAMES)
    chunk = '{"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}'
    empty.events(ServerSentEvent(chunk))
    empty.events(ServerSentEvent("[DONE]"))
    assert empty.finish() == [Finished("stop")]
