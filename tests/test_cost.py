"""Cost accounting: prompt-cache tokens parsed from both providers' wire formats, priced by the
profile's declared prices (else `genai-prices`' table), summed exactly per call, run and tree.

The runs use the real dev server, worker and SQLite store; the providers' streams come from
the local wire server, byte for byte as the APIs send them.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import Client

from otherone.activities.model_stream import TurnCollector
from otherone.activities.providers.anthropic import AnthropicProvider, MessagesState
from otherone.activities.providers.anthropic_cache import with_cache_breakpoints
from otherone.activities.providers.base import ModelRequest, StreamEvent, UsageReport
from otherone.activities.providers.openai import ChatCompletionsState
from otherone.activities.providers.sse import SSEDecoder
from otherone.client.agent_client import build_request
from otherone.client.records_view import usage_line
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelPrices, ModelProfile
from otherone.errors import ConfigurationError
from otherone.pricing import CallTokens, call_cost, declared_cost, table_cost
from otherone.runs import RunOutcome, RunUsage
from otherone.toml_config import load_config
from otherone.wire_names import WireNames
from tests.fixtures.providers.wire_server import (
    Reply,
    Seen,
    WireServer,
    anthropic_stream,
    openai_stream,
)
from tests.harness import agent_env

NAMES = WireNames([])
KEY_ENV = "OTHERONE_TEST_COST_KEY"


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, "sk-cost-test")
    return KEY_ENV


def _events(state: ChatCompletionsState | MessagesState, body: bytes) -> list[StreamEvent]:
    decoder = SSEDecoder()
    out: list[StreamEvent] = []
    for sse in [*decoder.feed(body), *decoder.close()]:
        out += state.events(sse)
    return out + state.finish()


async def _collected(events: list[StreamEvent]) -> Any:
    async def stream() -> Any:
        for event in events:
            yield event

    async def ignore(_: str) -> None:
        return None

    return await TurnCollector(limit_bytes=10_000).consume(stream(), ignore, ignore)


# --------------------------------------------------------------------------- wire formats


async def test_openai_cached_prompt_tokens_are_parsed_as_cache_reads() -> None:
    body = openai_stream(["Hi."], usage=(2006, 300), cached=1920)
    events = _events(ChatCompletionsState("m", NAMES), body)
    reports = [event for event in events if isinstance(event, UsageReport)]
    assert reports == [UsageReport(2006, 300, cache_read_tokens=1920, cache_write_tokens=0)]
    turn = await _collected(events)
    assert (turn.input_tokens, turn.cache_read_tokens, turn.cache_write_tokens) == (2006, 1920, 0)


async def test_openai_usage_without_details_reports_no_cache() -> None:
    events = _events(ChatCompletionsState("m", NAMES), openai_stream(["Hi."], usage=(11, 7)))
    turn = await _collected(events)
    assert (turn.input_tokens, turn.cache_read_tokens, turn.cache_write_tokens) == (11, None, None)


async def test_anthropic_cache_reads_and_writes_are_parsed_and_input_counts_them() -> None:
    """``input_tokens`` on the wire is the uncached rest: the prompt is all three together."""
    body = anthropic_stream(["Hi."], usage=(21, 393), cache=(1500, 188))
    events = _events(MessagesState("m", NAMES), body)
    reports = [event for event in events if isinstance(event, UsageReport)]
    # message_start, then message_delta's cumulative usage (the same input counts again).
    assert reports[0] == UsageReport(1709, 1, cache_read_tokens=1500, cache_write_tokens=188)
    assert reports[-1] == UsageReport(1709, 393, cache_read_tokens=1500, cache_write_tokens=188)
    turn = await _collected(events)
    assert (turn.input_tokens, turn.output_tokens, turn.total_tokens) == (1709, 393, 2102)
    assert (turn.cache_read_tokens, turn.cache_write_tokens) == (1500, 188)


async def test_anthropic_delta_with_output_alone_keeps_the_start_cache_counts() -> None:
    """Older streams repeat only ``output_tokens`` in ``message_delta``."""
    body = anthropic_stream(["Hi."], usage=(21, 393), cache=(1500, 188))
    cumulative = b'"usage":{"input_tokens":21,"cache_creation_input_tokens":188,'
    cumulative += b'"cache_read_input_tokens":1500,"output_tokens":393}'
    assert cumulative in body
    body = body.replace(cumulative, b'"usage":{"output_tokens":393}')
    turn = await _collected(_events(MessagesState("m", NAMES), body))
    assert (turn.input_tokens, turn.output_tokens) == (1709, 393)
    assert (turn.cache_read_tokens, turn.cache_write_tokens) == (1500, 188)


# --------------------------------------------------------------------------- prices

PRICES = ModelPrices(input=Decimal("3"), output=Decimal("15"), cache_read=Decimal("0.30"))


def test_declared_prices_price_each_kind_of_token_exactly() -> None:
    tokens = CallTokens(input=1709, output=393, cache_read=1500, cache_write=188)
    # 21 fresh x 3 + 393 x 15 + 1500 x 0.30 + 188 x 3 (no cache_write price: input's).
    expected = (21 * 3 + 393 * 15 + Decimal("450") + 188 * 3) / Decimal(1_000_000)
    assert declared_cost(PRICES, tokens) == expected == Decimal("0.006972")


def test_declared_prices_win_over_the_table() -> None:
    profile = ModelProfile(id="p", provider="openai", model="gpt-4o", prices=PRICES)
    tokens = CallTokens(input=1_000_000, output=0)
    assert call_cost(profile, tokens) == Decimal(3)
    assert call_cost(profile.model_copy(update={"prices": None}), tokens) == Decimal("2.5")


def test_the_table_prices_cache_reads_and_knows_nothing_of_unknown_models() -> None:
    tokens = CallTokens(input=2_000_000, output=1_000_000, cache_read=1_000_000)
    # gpt-4o: $2.50 input, $1.25 cached input, $10 output per million.
    assert table_cost("openai", "gpt-4o", tokens) == Decimal("13.75")
    assert table_cost("openai", "no-such-model-xyz", tokens) is None
    assert table_cost("local", "gpt-4o", tokens) is None
    scripted = ModelProfile(id="s", provider="scripted", model="test")
    assert call_cost(scripted, tokens) is None


@pytest.mark.parametrize(
    ("prices", "field"),
    [
        ({"input": -1, "output": 1}, "input"),
        ({"input": 1, "output": True}, "output"),
        ({"input": 1, "output": "lots"}, "output"),
        ({"input": 1, "output": 1, "cache_reads": 1}, "cache_reads"),
        ({"output": 1}, "input"),
    ],
)
def test_bad_prices_are_refused_naming_the_field(prices: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ModelProfile.model_validate(
            {"id": "p", "provider": "openai", "model": "gpt-4o", "prices": prices}
        )
    assert field in str(refused.value)


def test_cost_is_a_plain_decimal_string_in_json() -> None:
    usage = RunUsage(cost=Decimal("3E-7"))
    assert json.loads(usage.model_dump_json())["cost"] == "0.0000003"
    assert RunUsage.model_validate_json(usage.model_dump_json()).cost == Decimal("3E-7")


# --------------------------------------------------------------------------- runs


def _wire_config(provider: str, base_url: str) -> RuntimeConfig:
    profile = ModelProfile(
        id="wire",
        provider=provider,  # type: ignore[arg-type]
        model="test-model",
        base_url=base_url if provider == "anthropic" else f"{base_url}/v1",
        api_key_env=KEY_ENV,
        prices=PRICES,
    )
    agent = AgentDefinition(id="asker", description="Asks.", system_prompt="You answer.")
    return RuntimeConfig(agents=[agent], models=[profile])


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_run_records_cache_tokens_and_cost_from_the_wire(
    client: Client, task_queue: str, tmp_path: Path, key_env: str, provider: str
) -> None:
    def answer(seen: Seen) -> Reply:
        if provider == "anthropic":
            return Reply(body=anthropic_stream(["Hi."], usage=(21, 393), cache=(1500, 188)))
        return Reply(body=openai_stream(["Hi."], usage=(1709, 393), cached=1500))

    async with (
        WireServer(answer) as server,
        agent_env(client, task_queue, _wire_config(provider, server.url), tmp_path) as env,
    ):
        result = await env.agents.run(build_request(entry_agent="asker", input="Hello"))
        record = await env.agents.get_run(result.run_id)
        events = [event.event async for event in env.agents.events(result.run_id)]
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    # OpenAI bills no cache writes: its 188 tokens are fresh input at the input price.
    expected = Decimal("0.006972")
    assert result.usage.cost == expected and record.usage.cost == expected
    assert result.usage.cache_read_tokens == 1500
    assert result.usage.cache_write_tokens == (188 if provider == "anthropic" else 0)
    completed = [event for event in events if event["type"] == "model_completed"]
    assert [event["cost"] for event in events if event["type"] == "run_completed"] == ["0.006972"]
    assert completed[-1]["usage"]["cost"] == "0.006972"
    assert completed[-1]["usage"]["cache_read_tokens"] == 1500


# --------------------------------------------------------------------------- cache breakpoints


@pytest.mark.parametrize("prompt_cache", [None, False])
async def test_anthropic_requests_mark_tools_system_and_conversation_for_caching(
    key_env: str, prompt_cache: bool | None
) -> None:
    tool = {
        "type": "function",
        "function": {"name": "lookup", "description": "Look up.", "parameters": {}},
    }
    messages = [
        {"role": "system", "content": "You answer."},
        {"role": "user", "content": "Hello"},
    ]
    async with WireServer([Reply(body=anthropic_stream(["Hi."]))]) as server:
        profile = ModelProfile(
            id="claude",
            provider="anthropic",
            model="claude-sonnet-4-5",
            base_url=server.url,
            api_key_env=key_env,
            prompt_cache=prompt_cache,
        )
        request = ModelRequest(
            profile=profile,
            agent_id="agent",
            run_id="run-1",
            turn=1,
            attempt=1,
            messages=messages,
            tools=[tool, {**tool, "function": {**tool["function"], "name": "other"}}],
        )
        _ = [event async for event in AnthropicProvider().stream(request)]
    body = server.requests[0].body
    if prompt_cache is False:
        assert "cache_control" not in json.dumps(body) and body["system"] == "You answer."
        return
    ephemeral = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "You answer.", "cache_control": ephemeral}]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1]["cache_control"] == ephemeral
    assert body["messages"][-1]["content"][-1] == {
        "type": "text",
        "text": "Hello",
        "cache_control": ephemeral,
    }


def test_thinking_blocks_are_never_marked() -> None:
    thinking = {"type": "thinking", "thinking": "hm", "signature": "s"}
    body = {
        "messages": [{"role": "assistant", "content": [{"type": "text", "text": "a"}, thinking]}]
    }
    marked = with_cache_breakpoints(body)
    assert marked["messages"][0]["content"] == [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        thinking,
    ]
    assert body["messages"][0]["content"][0] == {"type": "text", "text": "a"}  # not changed


def test_usage_lines_show_the_cache_tokens_and_the_exact_cost() -> None:
    usage = RunUsage(
        input_tokens=1709,
        output_tokens=393,
        total_tokens=2102,
        cache_read_tokens=1500,
        cache_write_tokens=188,
        cost=Decimal("0.006972"),
        model_calls=1,
    )
    line = usage_line(usage)
    assert "2102 tokens (in 1709, out 393, cache read 1500, cache write 188)" in line
    assert "$0.006972" in line
    assert "$" not in usage_line(RunUsage(input_tokens=1, output_tokens=1, model_calls=1))


def test_toml_declares_prices_and_a_cost_budget_and_bad_ones_name_the_field(
    tmp_path: Path,
) -> None:
    good = tmp_path / "otherone.toml"
    good.write_text(
        '[models.claude]\nprovider = "anthropic"\nmodel = "claude-sonnet-4-5"\n'
        'prices = { input = 3.00, output = 15, cache_read = "0.30" }\nprompt_cache = false\n'
        "[limits]\ncost_budget = 2.5\n"
    )
    config = load_config(good)
    prices = config.models["claude"].prices
    assert prices is not None and prices.cache_read == Decimal("0.30")
    assert prices.input == Decimal("3.00") and prices.cache_write is None
    assert config.models["claude"].prompt_cache is False
    assert config.limits.cost_budget == Decimal("2.5")
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace("output = 15", "output = -1"))
    with pytest.raises(ConfigurationError) as refused:
        load_config(bad)
    assert "prices.output" in str(refused.value) and "Traceback" not in str(refused.value)
