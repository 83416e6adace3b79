"""The HTTP providers against a real server on 127.0.0.1 speaking the providers' wire formats.

Covers request bodies and headers per provider, streaming (in small network pieces), error
classification (429 with retry-after / retry-after-ms, 5xx, 401/403, 400, cut streams, malformed
chunks, timeouts, refused connections) and the API key's resolution and secrecy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from otherone.activities.model_stream import TurnCollector
from otherone.activities.providers import default_providers
from otherone.activities.providers.base import (
    Finished,
    ModelProvider,
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageReport,
)
from otherone.activities.providers.http import HttpCall, endpoint, retry_after, shown_url
from otherone.activities.providers.secrets import ApiKey, parse_env_file
from otherone.definitions import ModelProfile
from tests.fixtures.providers.wire_server import (
    Reply,
    WireServer,
    anthropic_stream,
    fixture,
    openai_stream,
)
from tests.harness import wait_until

KEY_ENV = "OTHERONE_TEST_PROVIDER_KEY"
PROVIDERS = default_providers()
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "mcp.weather.lookup",
        "description": "Weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
AGENT_CALL_TOOL = {
    "type": "function",
    "function": {
        "name": "agent.call",
        "description": "Delegate.",
        "parameters": {"type": "object", "properties": {"agent": {"type": "string"}}},
    },
}
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Oslo, and ask the writer for a note."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "mcp.weather.lookup", "arguments": '{"city": "Oslo"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "agent.call", "arguments": '{"agent": "writer"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear"}'},
    {"role": "tool", "tool_call_id": "call_2", "content": '{"outcome": "completed"}'},
    {"role": "user", "content": "Thanks; be brief."},
]


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = f"sk-test-{secrets.token_hex(16)}"
    monkeypatch.setenv(KEY_ENV, value)
    monkeypatch.delenv("OTHERONE_SECRETS_FILE", raising=False)
    return value


def make_request(
    provider: str,
    base_url: str,
    *,
    key_env: str | None = KEY_ENV,
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    settings: dict[str, Any] | None = None,
    attempt: int = 1,
) -> ModelRequest:
    profile = ModelProfile(
        id=f"{provider}-test",
        provider=provider,  # type: ignore[arg-type]
        model="test-model",
        base_url=base_url,
        api_key_env=key_env,
    )
    return ModelRequest(
        profile=profile,
        agent_id="agent",
        run_id="run-1",
        turn=1,
        attempt=attempt,
        messages=messages or [{"role": "user", "content": "hi"}],
        tools=tools or [],
        settings=settings or {},
    )


async def collect(request: ModelRequest) -> list[StreamEvent]:
    provider: ModelProvider = PROVIDERS[request.profile.provider]
    return [event async for event in provider.stream(request)]


async def fail(request: ModelRequest) -> tuple[ProviderError, list[StreamEvent]]:
    """The error a stream ends with, and the events it yielded before."""
    events: list[StreamEvent] = []
    with pytest.raises(ProviderError) as caught:
        async for event in PROVIDERS[request.profile.provider].stream(request):
            events.append(event)
    return caught.value, events


def base(server: WireServer, provider: str) -> str:
    return server.url if provider == "anthropic" else f"{server.url}/v1"


def stream_of(provider: str) -> bytes:
    if provider == "anthropic":
        return anthropic_stream(["Hel", "lo"])
    return openai_stream(["Hel", "lo"])


# --------------------------------------------------------------------------- OpenAI dialects


async def test_openai_streams_text_read_in_small_pieces(key: str) -> None:
    reply = Reply(body=fixture("openai_text.sse"), piece_size=7)
    async with WireServer([reply]) as server:
        events = await collect(
            make_request(
                "openai",
                f"{server.url}/v1",
                settings={"max_tokens": 100, "temperature": 0.2, "top_p": 0.9},
            )
        )
    assert (
        "".join(e.text for e in events if isinstance(e, TextDelta))
        == "Hello there! How can I help été 😀?"
    )
    assert events[-2:] == [UsageReport(19, 10), Finished("stop")]
    [seen] = server.requests
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["authorization"] == f"Bearer {key}"
    assert seen.body == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 100,
        "temperature": 0.2,
        "top_p": 0.9,
    }


async def test_openai_tools_history_and_names_on_the_wire(key: str) -> None:
    async with WireServer([Reply(body=fixture("openai_multi_tool.sse"), piece_size=5)]) as server:
        request = make_request(
            "openai",
            f"{server.url}/v1",
            messages=HISTORY,
            tools=[WEATHER_TOOL, AGENT_CALL_TOOL],
            settings={
                "tool_choice": {"type": "function", "function": {"name": "agent.call"}},
                "parallel_tool_calls": True,
                "other": {"stop": ["END"], "seed": 7},
            },
        )
        turn = await TurnCollector(limit_bytes=10_000).consume(collect_iter(request), _noop, _noop)
    body = server.requests[0].body
    assert [tool["function"]["name"] for tool in body["tools"]] == [
        "mcp__weather__lookup",
        "agent__call",
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "agent__call"}}
    assert body["parallel_tool_calls"] is True and body["stop"] == ["END"] and body["seed"] == 7
    assistant = body["messages"][2]
    assert assistant["content"] is None
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == [
        "mcp__weather__lookup",
        "agent__call",
    ]
    assert body["messages"][3] == HISTORY[3] and body["messages"][0] == HISTORY[0]
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_weather_1", "get_weather", '{"city": "Paris"}'),
        ("call_agent_2", "agent.call", '{"agent": "writer", "task": "Draft a note for Paris"}'),
    ]
    assert (turn.input_tokens, turn.output_tokens, turn.finish_reason) == (82, 41, "tool_calls")


def collect_iter(request: ModelRequest) -> Any:
    return PROVIDERS[request.profile.provider].stream(request)


async def _noop(text: str) -> None:
    return None


async def test_openrouter_headers_parameters_and_reasoning(key: str) -> None:
    other = {
        "extra_headers": {"HTTP-Referer": "https://example.org/app", "X-Title": "Otherone test"},
        "provider": {"order": ["DeepInfra"]},
        "timeout": 30,
    }
    reply = Reply(body=fixture("openrouter_reasoning.sse"), piece_size=11)
    async with WireServer([reply]) as server:
        events = await collect(
            make_request(
                "openrouter", f"{server.url}/api/v1", settings={"max_tokens": 64, "other": other}
            )
        )
    [seen] = server.requests
    assert seen.path == "/api/v1/chat/completions"
    assert seen.headers["http-referer"] == "https://example.org/app"
    assert seen.headers["x-title"] == "Otherone test"
    assert seen.headers["authorization"] == f"Bearer {key}"
    assert seen.body["max_tokens"] == 64 and "max_completion_tokens" not in seen.body
    assert seen.body["provider"] == {"order": ["DeepInfra"]}
    assert "extra_headers" not in seen.body and "timeout" not in seen.body
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == [
        "The user asks",
        " for 2+2.",
    ]


async def test_local_server_without_key_gets_no_authorization_header(key: str) -> None:
    async with WireServer([Reply(body=fixture("local_crlf_tool.sse"), piece_size=3)]) as server:
        events = await collect(
            make_request(
                "local",
                f"{server.url}/v1/",
                key_env=None,
                tools=[WEATHER_TOOL],
                settings={"max_tokens": 50, "other": {"max_completion_tokens": 80}},
            )
        )
    [seen] = server.requests
    assert "authorization" not in seen.headers
    assert seen.path == "/v1/chat/completions"
    assert seen.body["max_completion_tokens"] == 80 and "max_tokens" not in seen.body
    assert ToolCallDelta(0, "Jq2cV1mA", "mcp.weather.lookup", '{"city":') in events


async def test_local_server_with_a_configured_key_sends_it(key: str) -> None:
    async with WireServer([Reply(body=openai_stream(["ok"]))]) as server:
        await collect(make_request("local", f"{server.url}/v1"))
    assert server.requests[0].headers["authorization"] == f"Bearer {key}"


# --------------------------------------------------------------------------- Anthropic


async def test_anthropic_request_conversion(key: str) -> None:
    async with WireServer([Reply(body=fixture("anthropic_tools.sse"), piece_size=9)]) as server:
        request = make_request(
            "anthropic",
            server.url,
            messages=HISTORY,
            tools=[WEATHER_TOOL, AGENT_CALL_TOOL],
            settings={
                "temperature": 0.5,
                "tool_choice": "required",
                "parallel_tool_calls": False,
                "other": {"stop": "END", "thinking": {"type": "enabled", "budget_tokens": 1024}},
            },
        )
        turn = await TurnCollector(limit_bytes=10_000).consume(collect_iter(request), _noop, _noop)
    [seen] = server.requests
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == key and "authorization" not in seen.headers
    assert seen.headers["anthropic-version"] == "2023-06-01"
    body = seen.body
    assert body["max_tokens"] == 4096 and body["stream"] is True and body["temperature"] == 0.5
    # Prompt-cache breakpoints (on by default): the system prompt, the last tool, the last block.
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["stop_sequences"] == ["END"] and "stop" not in body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["tools"][0] == {
        "name": "mcp__weather__lookup",
        "input_schema": WEATHER_TOOL["function"]["parameters"],
        "description": "Weather for a city.",
    }
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather in Oslo, and ask the writer for a note."}
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "mcp__weather__lookup",
                    "input": {"city": "Oslo"},
                },
                {
                    "type": "tool_use",
                    "id": "call_2",
                    "name": "agent__call",
                    "input": {"agent": "writer"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": '{"sky": "clear"}'},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": '{"outcome": "completed"}',
                },
                {
                    "type": "text",
                    "text": "Thanks; be brief.",
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        },
    ]
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("toolu_01A09q90qw90lq917835lq9", "get_weather", '{"city": "Paris"}'),
        (
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "agent.call",
            '{"agent": "writer", "task": "Draft a note"}',
        ),
    ]
    assert (turn.content, turn.input_tokens, turn.output_tokens) == (
        "Okay, I'll ask both.",
        472,
        89,
    )
    assert turn.finish_reason == "tool_calls"


async def test_anthropic_base_url_with_v1_and_max_tokens_and_thinking(key: str) -> None:
    async with WireServer([Reply(body=fixture("anthropic_thinking.sse"), piece_size=2)]) as server:
        events = await collect(
            make_request("anthropic", f"{server.url}/v1", settings={"max_tokens": 333})
        )
    assert server.requests[0].path == "/v1/messages"
    assert server.requests[0].body["max_tokens"] == 333
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["Let me add ", "2 and 2."]


# --------------------------------------------------------------------------- errors

PROVIDER_NAMES = ["openai", "openrouter", "local", "anthropic"]


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize(
    ("headers", "wait"),
    [({"retry-after": "7"}, 7.0), ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5)],
)
async def test_429_is_retryable_after_the_servers_delay(
    key: str, provider: str, headers: dict[str, str], wait: float
) -> None:
    payload = {"error": {"message": "Rate limit reached", "type": "requests"}}
    async with WireServer([Reply.error(429, payload, **headers)]) as server:
        error, _ = await fail(make_request(provider, base(server, provider), attempt=3))
    assert error.retryable and error.retry_after == wait
    assert error.message.startswith(f"model '{provider}-test' ({provider}, attempt 3): HTTP 429")
    assert "Rate limit reached" in error.message


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("status", [500, 502, 503, 529, 408, 409])
async def test_server_errors_are_retryable(key: str, provider: str, status: int) -> None:
    async with WireServer([Reply.error(status, {"error": {"message": "upstream"}})]) as server:
        error, _ = await fail(make_request(provider, base(server, provider)))
    assert error.retryable and error.retry_after is None
    assert f"HTTP {status}" in error.message and "upstream" in error.message
    assert len(server.requests) == 1  # the client never retries: Temporal does


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("status", [400, 404, 422])
async def test_other_client_errors_are_not_retryable(key: str, provider: str, status: int) -> None:
    payload = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": f"bad field, key was {key}"},
    }
    async with WireServer([Reply.error(status, payload, **{"request-id": "req_42"})]) as server:
        error, _ = await fail(make_request(provider, base(server, provider)))
    assert not error.retryable
    assert "bad field, key was <redacted>" in error.message and key not in error.message
    assert "[request id req_42]" in error.message


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("status", [401, 403])
async def test_a_rejected_key_names_its_env_var_never_the_key(
    key: str, provider: str, status: int
) -> None:
    payload = {"error": {"message": f"Incorrect API key provided: {key}"}}
    async with WireServer([Reply.error(status, payload)]) as server:
        error, _ = await fail(make_request(provider, base(server, provider)))
    assert not error.retryable
    assert f"model '{provider}-test'" in error.message
    assert f"environment variable {KEY_ENV}" in error.message
    assert key not in error.message and key[8:20] not in error.message


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("status", [401, 403])
async def test_a_rejected_key_from_the_secrets_file_names_the_file_and_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, provider: str, status: int
) -> None:
    value = f"sk-file-{secrets.token_hex(16)}"
    path = tmp_path / "model-keys.env"
    path.write_text(f"{KEY_ENV}={value}\n")
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv("OTHERONE_SECRETS_FILE", str(path))
    payload = {"error": {"message": f"Incorrect API key provided: {value}"}}
    async with WireServer([Reply.error(status, payload)]) as server:
        error, _ = await fail(make_request(provider, base(server, provider)))
    assert server.requests[0].headers.get("x-api-key", "").endswith(value) or (
        server.requests[0].headers["authorization"] == f"Bearer {value}"
    )
    assert not error.retryable
    assert f"key {KEY_ENV} of the secrets file {path} (OTHERONE_SECRETS_FILE)" in error.message
    assert "environment variable" not in error.message
    assert value not in error.message and value[8:20] not in error.message


async def test_401_from_a_keyless_local_server_says_to_configure_a_key() -> None:
    async with WireServer([Reply.error(401, {"error": "unauthorized"})]) as server:
        error, _ = await fail(make_request("local", f"{server.url}/v1", key_env=None))
    assert not error.retryable and "set api_key_env on model 'local-test'" in error.message


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
async def test_a_stream_cut_mid_way_is_retryable_after_the_deltas_so_far(
    key: str, provider: str
) -> None:
    body = stream_of(provider)
    cut = body.index(b'"lo"')  # inside the event after the first text delta
    async with WireServer([Reply(body=body, cut_after=cut, piece_size=16)]) as server:
        error, events = await fail(make_request(provider, base(server, provider)))
    assert error.retryable
    assert "RemoteProtocolError" in error.message
    assert TextDelta("Hel") in events


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
async def test_a_stream_that_ends_early_is_retryable(key: str, provider: str) -> None:
    body = stream_of(provider)
    early = body[: body.index(b'"lo"')]
    early = early[: early.rindex(b"\n\n") + 2]  # whole events only, then a clean end
    async with WireServer([Reply(body=early)]) as server:
        error, _ = await fail(make_request(provider, base(server, provider)))
    assert error.retryable and "ended before it was complete" in error.message


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
async def test_malformed_json_in_a_chunk_is_retryable(key: str, provider: str) -> None:
    body = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{\n\n'
    )
    if provider != "anthropic":
        body = b'data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"x"}\n\n'
    async with WireServer([Reply(body=body)]) as server:
        error, _ = await fail(make_request(provider, base(server, provider)))
    assert error.retryable and "malformed stream chunk (invalid JSON" in error.message


async def test_read_timeout_is_retryable_and_closes_the_connection(key: str) -> None:
    stalled = Reply(body=b": keep-alive\n\n", stall=True)
    async with WireServer([stalled]) as server:
        error, _ = await fail(
            make_request("openai", f"{server.url}/v1", settings={"other": {"timeout": 0.3}})
        )
        await wait_until(lambda: server.hung_up == 1, within=5, message="the client hung up")
    assert error.retryable and "ReadTimeout" in error.message


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
async def test_cancelling_a_stream_closes_the_connection_at_once(key: str, provider: str) -> None:
    """What happens when the run is cancelled: the activity's task is cancelled mid-stream."""
    body = stream_of(provider)
    stalled = Reply(body=body[: body.index(b'"lo"')], stall=True)  # "Hel", then silence
    received: list[StreamEvent] = []

    async def consume() -> None:
        async for event in PROVIDERS[provider].stream(
            make_request(provider, base(server, provider))
        ):
            received.append(event)

    async with WireServer([stalled]) as server:
        task = asyncio.create_task(consume())
        await wait_until(lambda: TextDelta("Hel") in received, within=5, message="first delta")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until(lambda: server.hung_up == 1, within=2, message="the client hung up")


async def test_connection_refused_is_retryable(key: str) -> None:
    async with WireServer([]) as server:
        url = f"{server.url}/v1"
    error, _ = await fail(make_request("openai", url))
    assert error.retryable and "connection failed: ConnectError" in error.message


async def test_json_instead_of_a_stream_is_not_retryable(key: str) -> None:
    reply = Reply(
        body=b'{"error": {"message": "stream not supported"}}', content_type="application/json"
    )
    async with WireServer([reply]) as server:
        error, _ = await fail(make_request("local", f"{server.url}/v1"))
    assert not error.retryable and "stream not supported" in error.message


@pytest.mark.parametrize(
    ("base_url", "other"),
    [
        ("ftp://127.0.0.1/v1", {}),
        ("not a url", {}),
        ("http://x:0/v1", {}),
        (None, {"timeout": "abc"}),
    ],
)
def test_unusable_transport_settings_are_refused_at_load(
    base_url: str | None, other: dict[str, Any]
) -> None:
    """A base URL that is not http(s), or a timeout that is not a number, failed every run at
    its first model call; the configuration refuses them, naming the field."""
    with pytest.raises(ValidationError) as caught:
        ModelProfile(id="p", provider="openai", model="m", base_url=base_url, other=other)
    assert caught.value.errors()[0]["loc"][0] == ("base_url" if base_url else "other")


async def test_an_unusable_base_url_is_not_retryable(key: str) -> None:
    """Settings that reach the transport unchecked (built without validation) still fail at
    once, not five times."""
    request = make_request("openai", "http://127.0.0.1/v1")
    profile = request.profile.model_copy(update={"base_url": "ftp://127.0.0.1/v1"})
    error, _ = await fail(dataclasses.replace(request, profile=profile))
    assert not error.retryable and "UnsupportedProtocol" in error.message


def test_retry_after_forms() -> None:
    assert retry_after({"retry-after": "2.5"}) == 2.5
    assert retry_after({"retry-after-ms": "250"}) == 0.25
    assert retry_after({"retry-after": "86400"}) == 300.0
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({"retry-after": "-3"}) is None
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after({}) is None


# --------------------------------------------------------------------------- keys


async def test_a_missing_key_is_a_non_retryable_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv("OTHERONE_SECRETS_FILE", raising=False)
    async with WireServer([Reply(body=stream_of("openai"))]) as server:
        error, _ = await fail(make_request("anthropic", server.url))
    assert not error.retryable and not server.requests
    assert f"model 'anthropic-test' (anthropic): no API key: environment variable {KEY_ENV}" in (
        error.message
    )


async def test_the_providers_usual_variable_is_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default-variable")
    async with WireServer([Reply(body=stream_of("openai"))]) as server:
        await collect(make_request("openai", f"{server.url}/v1", key_env=None))
    assert server.requests[0].headers["authorization"] == "Bearer sk-default-variable"


@pytest.mark.parametrize(
    ("file_name", "text"),
    [
        ("secrets.env", "# keys\nexport OTHER=1\n{name}='{value}'\n"),
        ("secrets.toml", '{name} = "{value}"\nnested = {{ a = 1 }}\n'),
    ],
)
async def test_keys_from_the_secrets_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, file_name: str, text: str
) -> None:
    value = f"sk-file-{secrets.token_hex(8)}"
    path = tmp_path / file_name
    path.write_text(text.format(name=KEY_ENV, value=value))
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv("OTHERONE_SECRETS_FILE", str(path))
    async with WireServer([Reply(body=stream_of("anthropic"))]) as server:
        await collect(make_request("anthropic", server.url))
    assert server.requests[0].headers["x-api-key"] == value
    monkeypatch.setenv(KEY_ENV, "sk-from-env-wins")
    async with WireServer([Reply(body=stream_of("anthropic"))]) as server:
        await collect(make_request("anthropic", server.url))
    assert server.requests[0].headers["x-api-key"] == "sk-from-env-wins"


def test_env_file_dialect() -> None:
    text = "A=1\n# c\n\nexport B = \"two words\"\nC=three # note\nD='x=y'\nnot a pair\n"
    assert parse_env_file(text) == {"A": "1", "B": "two words", "C": "three", "D": "x=y"}


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer sk-inline"},
        {"X-Goog-Api-Key": "inline"},
        {"X-Custom": "Bearer abcdefghijklmnop"},
        {"X-Custom": "0123456789abcdef0123456789abcdef"},
    ],
)
async def test_credentials_in_extra_headers_are_refused(key: str, headers: dict[str, str]) -> None:
    # Configuration refuses these already (tests/test_config_credentials.py); settings reach
    # the transport unvalidated, so it refuses them too.
    other = {"extra_headers": headers}
    async with WireServer([Reply(body=stream_of("openai"))]) as server:
        error, _ = await fail(make_request("openai", f"{server.url}/v1", settings={"other": other}))
    assert not error.retryable and "api_key_env" in error.message and not server.requests
    assert all(value not in error.message for value in headers.values())


def test_reprs_never_show_the_key() -> None:
    api_key = ApiKey(name=KEY_ENV, value="sk-very-secret")
    profile = ModelProfile(id="p", provider="openai", model="m")
    call = HttpCall(
        profile, "label", "http://x", {"Authorization": "Bearer sk-very-secret"}, {}, api_key
    )
    assert "sk-very-secret" not in repr(api_key) + repr(call)


async def test_whole_calls_at_one_index_are_separate_calls() -> None:
    """Ollama's OpenAI endpoint sends each of a turn's calls whole, in its own chunk, all at
    index 0 with their own ids: two calls, not one whose arguments run together (invalid
    JSON, and the corrupted call sent back in the history)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    def whole(call_id: str, city: str) -> bytes:
        function = {"name": "weather", "arguments": json.dumps({"city": city})}
        call = {"index": 0, "id": call_id, "type": "function", "function": function}
        return chunk({"role": "assistant", "content": "", "tool_calls": [call]})

    stream = whole("call_1", "Oslo") + whole("call_2", "Paris")
    stream += chunk({}, "tool_calls") + b"data: [DONE]\n\n"
    async with WireServer([Reply(body=stream, piece_size=7)]) as server:
        request = make_request("local", f"{server.url}/v1", key_env=None)
        turn = await TurnCollector(limit_bytes=10_000).consume(collect_iter(request), _noop, _noop)
    assert [(call.id, call.arguments) for call in turn.tool_calls] == [
        ("call_1", '{"city": "Oslo"}'),
        ("call_2", '{"city": "Paris"}'),
    ]


@pytest.mark.parametrize("value", ["sk-new-0123\nsk-old-4567", "sk-pasted\u200b0123", "sk a"])
async def test_a_key_no_header_can_carry_is_refused_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """A key file with two lines, a character pasted with the key: refused before any request,
    naming the variable and never the value (the newline made httpx's error quote the header
    escaped, which the scrubber missed: the key reached the run's failure, the store and the
    log; a non-ASCII one was an unclassified error retried five times)."""
    monkeypatch.setenv(KEY_ENV, value)
    monkeypatch.delenv("OTHERONE_SECRETS_FILE", raising=False)
    async with WireServer([Reply(body=stream_of("openai"))]) as server:
        error, _ = await fail(make_request("openai", f"{server.url}/v1"))
    assert not error.retryable and not server.requests
    assert f"the API key from environment variable {KEY_ENV} holds characters" in error.message
    assert "sk-" not in error.message


def test_the_scrubber_finds_a_key_quoted_escaped() -> None:
    api_key = ApiKey(name=KEY_ENV, value="sk-line\nsk-two")
    shown = "Illegal header value b'Bearer sk-line\\nsk-two'"
    assert "sk-" not in api_key.scrub(shown)


@pytest.mark.parametrize(
    ("base_url", "path", "expected"),
    [
        ("https://x.example/v1", "/chat/completions", "https://x.example/v1/chat/completions"),
        ("https://x.example/v1/", "/chat/completions", "https://x.example/v1/chat/completions"),
        (
            "https://r.example/openai/deployments/d?api-version=2024-10-21",
            "/chat/completions",
            "https://r.example/openai/deployments/d/chat/completions?api-version=2024-10-21",
        ),
    ],
)
def test_the_endpoint_keeps_the_base_urls_query(base_url: str, path: str, expected: str) -> None:
    """A query in base_url (Azure's api-version) stays after the path (it was before it)."""
    assert endpoint(base_url, path) == expected


def test_urls_in_messages_lose_user_info_and_query() -> None:
    assert shown_url("http://user:pw@127.0.0.1:9/v1?key=AIzaX") == "http://127.0.0.1:9/v1"


async def test_a_transport_error_names_the_url_without_its_query(key: str) -> None:
    """Refused connections name where they went, without what a query may hold."""
    request = make_request("openai", "http://127.0.0.1:9/v1?api-version=x-1")
    error, _ = await fail(request)
    assert error.retryable and "(http://127.0.0.1:9/v1/chat/completions)" in error.message
    assert "api-version" not in error.message


@pytest.mark.parametrize("status", [301, 307, 308])
async def test_a_redirect_is_not_retried_and_names_where_it_points(key: str, status: int) -> None:
    """Redirects are not followed (the request carries the key); one was read as a cut stream
    and retried five times."""
    moved = Reply(status=status, headers={"Location": "https://api.example/v1/chat/completions"})
    async with WireServer([moved]) as server:
        error, _ = await fail(make_request("openai", f"{server.url}/v1"))
    assert not error.retryable and f"HTTP {status}: the server redirects to" in error.message
    assert "https://api.example/v1/chat/completions" in error.message


async def test_an_html_page_is_not_taken_for_a_cut_stream(key: str) -> None:
    """A 200 HTML page (a captive portal, a base_url pointing at a web site) is said so, not
    retried as a stream that ended early."""
    page = Reply(content_type="text/html", body=b"<html><title>Login</title></html>")
    async with WireServer([page]) as server:
        error, _ = await fail(make_request("openai", f"{server.url}/v1"))
    assert not error.retryable and "answered an HTML page instead of an event stream" in (
        error.message
    )


def test_rate_limit_resets_give_the_wait_when_no_retry_after_is_sent() -> None:
    """A 429 without Retry-After: the reset of the exhausted limit (it was retried after 1, 2,
    4 and 8 s and failed while the limit had 20 s to go)."""
    openai = {
        "x-ratelimit-remaining-requests": "499",
        "x-ratelimit-reset-requests": "120ms",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "1m20s",
    }
    assert retry_after(openai) == 80.0
    assert retry_after({"x-ratelimit-reset-tokens": "20s"}) == 20.0
    assert retry_after({"x-ratelimit-reset-tokens": "soon"}) is None
    later = (datetime.now(UTC) + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    anthropic = {
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": later,
        "anthropic-ratelimit-requests-remaining": "10",
        "anthropic-ratelimit-requests-reset": later,
    }
    assert 25 < (retry_after(anthropic) or 0) <= 30
    assert retry_after({"retry-after": "3", "x-ratelimit-reset-tokens": "20s"}) == 3.0


async def test_an_openai_refusal_is_the_answer() -> None:
    """A refusal streams in `delta.refusal` with `content` null: it is the turn's text (the
    run completed with an empty answer) and its finish reason is `refusal`."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"

    stream = chunk({"role": "assistant", "content": None, "refusal": ""})
    stream += chunk({"refusal": "I can't help "}) + chunk({"refusal": "with that."})
    stream += chunk({}, "stop") + b"data: [DONE]\n\n"
    async with WireServer([Reply(body=stream)]) as server:
        request = make_request("local", f"{server.url}/v1", key_env=None)
        turn = await TurnCollector(limit_bytes=10_000).consume(collect_iter(request), _noop, _noop)
    assert (turn.content, turn.finish_reason) == ("I can't help with that.", "refusal")


async def test_an_anthropic_server_tool_is_no_call_of_ours(key: str) -> None:
    """A `server_tool_use` block (a tool the API runs: web search) streams its input like a
    `tool_use`; it made a nameless call of ours, sent back next turn (which the API refuses)."""

    def event(kind: str, payload: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n".encode()

    usage = {"input_tokens": 5, "output_tokens": 1}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": usage}
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    query = {"type": "input_json_delta", "partial_json": '{"query": "weather oslo"}'}
    stream = event("message_start", {"message": message})
    stream += event("content_block_start", {"index": 0, "content_block": search})
    stream += event("content_block_delta", {"index": 0, "delta": query})
    stream += event("content_block_stop", {"index": 0})
    text = {"type": "text", "text": ""}
    stream += event("content_block_start", {"index": 1, "content_block": text})
    stream += event(
        "content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "Sunny."}}
    )
    stream += event("content_block_stop", {"index": 1})
    stream += event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": usage})
    stream += event("message_stop", {})
    async with WireServer([Reply(body=stream)]) as server:
        turn = await TurnCollector(limit_bytes=10_000).consume(
            collect_iter(make_request("anthropic", server.url)), _noop, _noop
        )
    assert turn.tool_calls == () and turn.content == "Sunny."


async def test_a_failed_tool_result_is_marked_for_anthropic(key: str) -> None:
    """A tool result whose call failed is a `tool_result` with `is_error` (the content alone
    said it); OpenAI's API has no such field and gets none."""
    failed = {
        "role": "tool",
        "tool_call_id": "toolu_1",
        "content": '{"error": "x"}',
        "is_error": True,
    }
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ],
        },
        failed,
    ]
    async with WireServer([Reply(body=stream_of("anthropic"))]) as server:
        await collect(make_request("anthropic", server.url, messages=history))
    async with WireServer([Reply(body=stream_of("openai"))]) as other:
        await collect(make_request("openai", f"{other.url}/v1", messages=history))
    [result] = server.requests[0].body["messages"][-1]["content"]
    assert result == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": '{"error": "x"}',
        "is_error": True,
        "cache_control": {"type": "ephemeral"},  # the conversation's cache breakpoint
    }
    assert "is_error" not in other.requests[0].body["messages"][-1]
