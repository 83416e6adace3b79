"""Whole runs through the real runtime (Temporal dev server, worker, SQLite store) on each
provider, whose base URL points at a local server speaking that provider's wire format.

The agent ``boss`` calls a namespaced tool (``weather.lookup`` → ``weather__lookup`` on the
wire) and ``agent.call`` (→ ``agent__call``) in one turn; ``helper`` answers the child run; the
boss then answers with both results. The secrets test then looks for the API key everywhere a
run leaves traces: workflow histories, events, the store's tables and the logs.
"""

from __future__ import annotations

import io
import json
import logging
import secrets
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.client.console import make_console
from otherone.client.records_view import print_result_summary
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.errors import FailureCode
from otherone.runs import AgentRunResult, RunOutcome
from otherone.tools import ToolContext, tool
from tests.fixtures.providers.wire_server import (
    Reply,
    Seen,
    WireServer,
    anthropic_stream,
    openai_stream,
)
from tests.harness import AgentEnv, agent_env, history_with_payloads, wait_until

KEY_ENV = "OTHERONE_TEST_RUN_KEY"
PROVIDERS = ["openai", "openrouter", "local", "anthropic"]
FIRST_TURN = [
    ("call_weather", "weather__lookup", ['{"city": ', '"Oslo"}']),
    ("call_helper", "agent__call", ['{"agent": "helper", ', '"task": "Write a one-line note."}']),
]


@tool(name="weather.lookup")
def weather_lookup(city: str) -> dict[str, str]:
    """Current weather in a city."""
    return {"city": city, "sky": "clear"}


def config(
    provider: str, base_url: str, key_env: str | None, tools: list[Any] | None = None
) -> RuntimeConfig:
    profile = ModelProfile(
        id="wire",
        provider=provider,  # type: ignore[arg-type]
        model="test-model",
        base_url=base_url if provider == "anthropic" else f"{base_url}/v1",
        api_key_env=key_env,
        max_tokens=256,
    )
    agents = [
        AgentDefinition.model_validate(
            {
                "id": "boss",
                "description": "Plans.",
                "system_prompt": "You are the boss.",
                "tools": ["weather.lookup"],
                "callable_agents": ["helper"],
            }
        ),
        AgentDefinition(id="helper", description="Writes notes.", system_prompt="You help."),
    ]
    return RuntimeConfig(agents=agents, models=[profile], tools=tools or [weather_lookup])


class ScriptedWire:
    """Answers each request like the provider would, from what the request contains."""

    def __init__(self, provider: str) -> None:
        self.provider = provider

    def __call__(self, seen: Seen) -> Reply:
        body = seen.body
        anthropic = self.provider == "anthropic"
        system = json.dumps(body.get("system", "")) if anthropic else body["messages"][0]["content"]
        if "You help." in system:
            return self._stream(["A note: ", "pack a jumper."], [])
        if not _has_tool_results(body, anthropic=anthropic):
            return self._stream(["Checking."], FIRST_TURN)
        return self._stream(["Oslo is clear; ", "note attached."], [])

    def _stream(self, text: list[str], calls: list[tuple[str, str, list[str]]]) -> Reply:
        if self.provider == "anthropic":
            return Reply(body=anthropic_stream(text, calls), piece_size=13)
        return Reply(body=openai_stream(text, calls), piece_size=13)


def _has_tool_results(body: dict[str, Any], *, anthropic: bool) -> bool:
    if not anthropic:
        return any(message["role"] == "tool" for message in body["messages"])
    return any(
        block.get("type") == "tool_result"
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
    )


async def run_boss(env: AgentEnv) -> AgentRunResult:
    return await env.agents.run(build_request(entry_agent="boss", input="Weather in Oslo?"))


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_multi_agent_run_on_each_provider(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
) -> None:
    key_env = None if provider == "local" else KEY_ENV
    monkeypatch.setenv(KEY_ENV, "sk-run-test")
    async with (
        WireServer(ScriptedWire(provider)) as server,
        agent_env(client, task_queue, config(provider, server.url, key_env), tmp_path) as env,
    ):
        result = await run_boss(env)
        tree = await env.agents.list_run_tree(result.run_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "Oslo is clear; note attached."
    assert result.usage.model_calls == 2 and result.usage.agent_calls == 1
    assert result.usage.input_tokens and result.usage.output_tokens
    assert sorted(record.agent_id for record in tree) == ["boss", "helper"]
    boss_requests = [seen.body for seen in server.requests if "boss" in json.dumps(seen.body)]
    last = json.dumps(boss_requests[-1])
    assert "weather__lookup" in last and "agent__call" in last and "agent.call" not in last
    assert "pack a jumper." in last and '\\"sky\\": \\"clear\\"' in last
    auth = [seen.headers.get("authorization") for seen in server.requests]
    if provider == "local":
        assert auth == [None, None, None]
    elif provider != "anthropic":
        assert auth == ["Bearer sk-run-test"] * 3


async def test_the_api_key_appears_nowhere_a_run_leaves_traces(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # Our processes keep httpx at WARNING (`otherone.worker.logs`); an application may not.
    caplog.set_level(logging.DEBUG, logger="httpx")
    for provider in PROVIDERS:
        key = f"sk-secret-{provider}-{secrets.token_hex(16)}"
        monkeypatch.setenv(KEY_ENV, key)
        folder = tmp_path / provider
        folder.mkdir()
        async with (
            WireServer(ScriptedWire(provider)) as server,
            agent_env(
                client, f"{task_queue}-{provider}", config(provider, server.url, KEY_ENV), folder
            ) as env,
        ):
            result = await run_boss(env)
            traces = await _traces(client, env, result, folder / "store.db")
        assert result.outcome is RunOutcome.COMPLETED, result.failure
        sent = {
            seen.headers.get("authorization") or seen.headers.get("x-api-key")
            for seen in server.requests
        }
        assert sent in ({f"Bearer {key}"}, {key}), "the key must reach the provider"
        for where, text in [*traces.items(), ("logs", caplog.text)]:
            assert key not in text, f"{provider}: the API key leaked into {where}"
    assert "HTTP Request: POST" in caplog.text  # httpx's own logging was captured


async def _traces(
    client: Client, env: AgentEnv, result: AgentRunResult, database: Path
) -> dict[str, str]:
    """Histories of every run of the tree, the tree's events, the store's rows, the result."""
    await wait_until(
        lambda: _tree_size(env, result.run_id),
        message="both runs listed",
    )
    traces = {"result": result.model_dump_json()}
    for record in await env.agents.list_run_tree(result.run_id):
        history = await client.get_workflow_handle(record.run_id).fetch_history()
        traces[f"history of {record.agent_id}"] = history_with_payloads(history.to_json())
    events = env.store.read_events(result.run_id, limit=10_000)
    traces["events"] = json.dumps([event.model_dump(mode="json") for event in events])
    with sqlite3.connect(database) as connection:
        traces["store"] = "\n".join(connection.iterdump())
    # Positive controls: each trace holds what the run did, so a leak there would be seen.
    assert "Weather in Oslo?" in traces["history of boss"]
    assert "Write a one-line note." in traces["history of helper"]
    assert "agent_call_completed" in traces["events"] and "model_delta" in traces["events"]
    assert "pack a jumper." in traces["store"] and "INSERT INTO" in traces["store"]
    return traces


async def _tree_size(env: AgentEnv, run_id: str) -> bool:
    return len(await env.agents.list_run_tree(run_id)) == 2


async def test_a_rejected_key_fails_the_run_at_once_naming_the_variable(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"sk-rejected-{secrets.token_hex(8)}"
    monkeypatch.setenv(KEY_ENV, key)
    rejected = Reply.error(401, {"error": {"message": f"Incorrect API key provided: {key}"}})
    async with (
        WireServer([rejected]) as server,
        agent_env(client, task_queue, config("openai", server.url, KEY_ENV), tmp_path) as env,
    ):
        result = await run_boss(env)
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.MODEL_ERROR
    assert f"environment variable {KEY_ENV} was rejected" in result.failure.message
    assert key not in result.model_dump_json()
    assert len(server.requests) == 1  # not retried


async def test_a_provider_that_keeps_failing_ends_the_run_after_the_retries(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-unused")
    # retry-after-ms keeps the five attempts of the activity's retry policy fast (~1 s apart).
    failing = Reply.error(
        500, {"error": {"message": "The server had an error"}}, **{"retry-after-ms": "1"}
    )
    started = time.monotonic()
    async with (
        WireServer([failing]) as server,
        agent_env(client, task_queue, config("anthropic", server.url, KEY_ENV), tmp_path) as env,
    ):
        result = await run_boss(env)
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.MODEL_ERROR
    assert result.failure.message == (
        "model 'wire' (anthropic, attempt 5): HTTP 500 Internal Server Error: "
        "The server had an error"
    )
    assert len(server.requests) == 5
    assert time.monotonic() - started < 12


async def test_calls_a_server_sends_without_ids_get_ids_of_their_own(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """An OpenAI-compatible server that sends tool calls without an `id`: each call gets an id
    unique in the run. They were numbered by position (`call_0` in every turn), so the second
    turn's call had the first one's idempotency key (a tool following the documented
    exactly-once pattern skipped it) and, for `agent.call`, its child (found by a chaos test)."""
    keys: list[tuple[str, str]] = []

    @tool(name="weather.lookup")
    def lookup(city: str, ctx: ToolContext) -> dict[str, str]:
        """Current weather in a city."""
        keys.append((city, ctx.idempotency_key))
        return {"city": city, "sky": "clear"}

    def reply(seen: Seen) -> Reply:
        answered = sum(1 for message in seen.body["messages"] if message["role"] == "tool")
        if answered < 2:
            city = ["Oslo", "Bergen"][answered]
            call = ("", "weather__lookup", [json.dumps({"city": city})])
            return Reply(body=openai_stream([], [call]))
        return Reply(body=openai_stream(["Both clear."]))

    async with WireServer(reply) as server:
        runtime = config("local", server.url, None, [lookup])
        async with agent_env(client, task_queue, runtime, tmp_path) as env:
            result = await run_boss(env)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert [city for city, _ in keys] == ["Oslo", "Bergen"]
    assert len({key for _, key in keys}) == 2
    last = server.requests[-1].body["messages"]
    called = [call["id"] for m in last if m.get("tool_calls") for call in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert answered == called and len(set(called)) == 2


async def test_reasoning_and_signatures_go_back_to_the_server_that_sent_them(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """DeepSeek's thinking mode refuses a tool-calling turn's continuation without the turn's
    `reasoning_content`; Gemini refuses a function call without the `extra_content` (thought
    signature) it came with. Both are kept with the turn's entry and returned on its assistant
    message, to that server only (both were dropped: HTTP 400 on the second call)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"

    signature = {"google": {"thought_signature": "c2lnbmVk"}}
    call = {
        "index": 0,
        "id": "call_w",
        "type": "function",
        "function": {"name": "weather__lookup", "arguments": '{"city": "Oslo"}'},
        "extra_content": signature,
    }
    first = chunk({"role": "assistant", "reasoning_content": "Need the "})
    first += chunk({"reasoning_content": "weather."}) + chunk({"tool_calls": [call]})
    first += chunk({}, "tool_calls") + b"data: [DONE]\n\n"

    def reply(seen: Seen) -> Reply:
        answered = any(m["role"] == "tool" for m in seen.body["messages"])
        return Reply(body=openai_stream(["Clear."]) if answered else first)

    async with (
        WireServer(reply) as server,
        agent_env(client, task_queue, config("local", server.url, None), tmp_path) as env,
    ):
        result = await run_boss(env)
        again = await env.agents.run(
            build_request(
                entry_agent="boss", input="And now?", session={"session_id": result.session_id}
            )
        )
    assert result.outcome is RunOutcome.COMPLETED and again.outcome is RunOutcome.COMPLETED
    [assistant] = [m for m in server.requests[1].body["messages"] if m.get("tool_calls")]
    assert assistant["reasoning_content"] == "Need the weather."
    assert assistant["tool_calls"][0]["extra_content"] == signature
    # A later user message starts a new turn: the old reasoning is not sent again (DeepSeek's
    # own examples drop it), the signatures are not needed either.
    [earlier] = [m for m in server.requests[2].body["messages"] if m.get("tool_calls")]
    assert "reasoning_content" not in earlier and "extra_content" not in earlier["tool_calls"][0]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_answer_cut_at_max_tokens_says_so_in_the_result(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    provider: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A final answer the provider cut at its token limit still completes the run (its text is
    what there is), but the output says it was cut (`finish_reason`); a whole answer's is None."""
    cut = {"openai": "length", "anthropic": "max_tokens"}[provider]
    monkeypatch.setenv(KEY_ENV, "sk-run-test")

    def reply(seen: Seen) -> Reply:
        whole = "again" in json.dumps(seen.body["messages"])
        if provider == "anthropic":
            return Reply(
                body=anthropic_stream(
                    ["Whole."] if whole else ["The answer is, in sh"],
                    stop_reason=None if whole else cut,
                )
            )
        return Reply(
            body=openai_stream(
                ["Whole."] if whole else ["The answer is, in sh"], finish=None if whole else cut
            )
        )

    async with (
        WireServer(reply) as server,
        agent_env(client, task_queue, config(provider, server.url, KEY_ENV), tmp_path) as env,
    ):
        result = await run_boss(env)
        again = await env.agents.run(build_request(entry_agent="boss", input="again"))
    assert result.outcome is RunOutcome.COMPLETED and result.output is not None, result.failure
    assert (result.text, result.output.finish_reason) == ("The answer is, in sh", "length")
    shown = io.StringIO()
    print_result_summary(make_console(shown), result)  # `otherone run`'s summary
    assert "answer   cut at the model's max_tokens" in shown.getvalue()
    assert again.output is not None and (again.text, again.output.finish_reason) == (
        "Whole.",
        None,
    )


async def test_a_caller_reads_that_its_childs_answer_was_cut(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-run-test")
    to_helper = ("call_h", "agent__call", ['{"agent": "helper", "task": "Write a note."}'])

    def reply(seen: Seen) -> Reply:
        messages = seen.body["messages"]
        if messages[0]["content"].startswith("You help."):
            return Reply(body=openai_stream(["A note that stops mid"], finish="length"))
        if any(message["role"] == "tool" for message in messages):
            return Reply(body=openai_stream(["The helper was cut off."]))
        return Reply(body=openai_stream([], [to_helper]))

    async with (
        WireServer(reply) as server,
        agent_env(client, task_queue, config("openai", server.url, KEY_ENV), tmp_path) as env,
    ):
        result = await run_boss(env)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.output is not None and result.output.finish_reason is None
    [answer] = [m for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    child = json.loads(answer["content"].partition("\n")[2])  # after the untrusted-data note
    assert child["output"]["value"] == "A note that stops mid"
    assert child["output"]["finish_reason"] == "length"
