"""Guardrails (issue 45): input, output and tool guardrails as activities of a real run (dev
server, SQLite store, scripted or recording provider), their events, and bad configuration
refused naming the field (Python and TOML)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.client.console import EventPrinter, make_console
from otherone.client.watch import WatchState
from otherone.definitions import AgentDefinition, RuntimeLimits, RuntimePolicy
from otherone.errors import ConfigurationError, FailureCode
from otherone.guardrail_policy import GuardrailPolicy
from otherone.guardrails import (
    GuardrailCheck,
    GuardrailDefinitionError,
    GuardrailRegistry,
    GuardrailResult,
    guardrail,
)
from otherone.runs import RunOutcome
from otherone.toml_config import load_config
from otherone.tools import ToolDefinitionError, tool
from tests.guardrail_fixtures import (
    ALL_GUARDRAILS,
    ATTEMPTS,
    GATES,
    LOOKUPS,
    SIDE_EFFECTS,
    lookup_contact,
    send_money,
)
from tests.harness import AgentEnv, agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider
from tests.snapshot_versions import version_without_later_fields


def _agent(**fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate({"id": "clerk", "description": "a clerk", **fields})


def _config(turns: list[Any], policy: RuntimePolicy | None = None, **fields: Any) -> Any:
    config = scripted_config(
        {"clerk": turns},
        agents=[_agent(tools=["send_money"], **fields)],
        tools=[send_money],
        policy=policy,
    )
    for check in ALL_GUARDRAILS:
        config.add_guardrail(check)
    return config


def _events(env: AgentEnv, run_id: str) -> list[dict[str, Any]]:
    return [record.event for record in env.store.read_events(run_id, after=0)]


def _of(events: list[dict[str, Any]], *types: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] in types]


def _transfer(amount: int, call_id: str = "pay-1") -> dict[str, Any]:
    arguments = {"to": "bob", "amount": amount}
    return {"tool_calls": [{"name": "send_money", "id": call_id, "arguments": arguments}]}


# --------------------------------------------------------------------------- declarations


def test_a_guardrail_must_take_one_check_and_have_a_valid_name() -> None:
    def two(a: Any, b: Any) -> GuardrailResult:
        return GuardrailResult.passed()

    with pytest.raises(GuardrailDefinitionError, match="'two': must take one argument"):
        guardrail(two)
    with pytest.raises(GuardrailDefinitionError, match="invalid name"):
        guardrail(name="no spaces")(lambda check: GuardrailResult.passed())
    with pytest.raises(GuardrailDefinitionError, match="max_attempts"):
        guardrail(name="flaky", max_attempts=0)(lambda check: GuardrailResult.passed())
    registry = GuardrailRegistry(ALL_GUARDRAILS)
    with pytest.raises(GuardrailDefinitionError, match="'no_secrets': a guardrail with this"):
        registry.register(ALL_GUARDRAILS[0])


def test_an_unknown_guardrail_is_refused_naming_agent_and_field() -> None:
    config = _config(["hi"], guardrails={"output": ["polite_answer", "nope"]})
    with pytest.raises(ConfigurationError) as refused:
        config.validate()
    assert (refused.value.table, refused.value.field) == ("agents.clerk", "guardrails.output")
    assert "unknown guardrail 'nope'" in refused.value.message
    policy = RuntimePolicy(guardrails=GuardrailPolicy(tools={"send_money": ("missing",)}))
    with pytest.raises(ConfigurationError) as refused:
        _config(["hi"], policy=policy).validate()
    assert (refused.value.table, refused.value.field) == ("policy", "guardrails.tools.send_money")
    unknown_tool = RuntimePolicy(guardrails=GuardrailPolicy(tools={"wire": ("small_amounts",)}))
    with pytest.raises(ConfigurationError, match="unknown tool 'wire'"):
        _config(["hi"], policy=unknown_tool).validate()


def test_bad_modes_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="on_tool_trip"):
        GuardrailPolicy.model_validate({"on_tool_trip": "explode"})


_TOML = """
[runtime]
tools = ["tests.guardrail_fixtures:send_money"]
guardrails = [{guardrails}]
[policy.guardrails]
input = ["no_secrets"]
[models.demo]
provider = "scripted"
model = "demo-1"
[agents.clerk]
description = "a clerk"
model = "demo"
tools = ["send_money"]
[agents.clerk.guardrails]
output = ["polite_answer"]
tools = {{ send_money = ["small_amounts"] }}
on_tool_trip = "fail"
"""


def test_toml_registers_guardrails_and_declares_them_per_agent_tool_and_policy(
    tmp_path: Path,
) -> None:
    refs = ", ".join(
        f'"tests.guardrail_fixtures:{name}"'
        for name in ("no_secrets", "polite_answer", "small_amounts")
    )
    good = tmp_path / "good.toml"
    good.write_text(_TOML.format(guardrails=refs))
    config = load_config(good)
    assert config.guardrails.names() == ["no_secrets", "polite_answer", "small_amounts"]
    clerk = config.agents["clerk"].guardrails
    assert clerk.output == ("polite_answer",) and clerk.on_tool_trip == "fail"
    assert clerk.tools == {"send_money": ("small_amounts",)}
    assert config.policy.guardrails.input == ("no_secrets",)
    snapshot = config.snapshot()
    assert set(snapshot.guardrails) == {"no_secrets", "polite_answer", "small_amounts"}

    missing = tmp_path / "missing.toml"
    missing.write_text(_TOML.format(guardrails='"tests.guardrail_fixtures:no_secrets"'))
    with pytest.raises(ConfigurationError) as refused:
        load_config(missing)
    # The agent's output guardrail is the one not registered (the policy's input one is).
    assert (refused.value.table, refused.value.field) == ("agents.clerk", "guardrails.output")
    assert "unknown guardrail 'polite_answer' (registered: no_secrets)" in refused.value.message
    broken = tmp_path / "broken.toml"
    broken.write_text(_TOML.format(guardrails='"tests.guardrail_fixtures:nothing_here"'))
    with pytest.raises(ConfigurationError) as refused:
        load_config(broken)
    assert (refused.value.table, refused.value.field) == ("runtime", "guardrails.0")
    assert "has no attribute 'nothing_here'" in refused.value.message


def test_snapshots_without_guardrails_keep_their_versions() -> None:
    """A declaration without guardrails or hooks hashes as before they existed (stored
    snapshots and the runs pinned to them keep their versions)."""
    plain = scripted_config(
        {"clerk": ["hi"]}, agents=[_agent(tools=["send_money"])], tools=[send_money]
    )
    snapshot = plain.snapshot()
    assert snapshot.version == version_without_later_fields(snapshot)
    guarded = _config(["hi"], guardrails={"input": ["no_secrets"]})
    assert guarded.snapshot().version != _config(["hi"]).snapshot().version


def test_a_tool_declares_its_own_guardrails() -> None:
    @tool(guardrails=["small_amounts"])
    def wire(to: str, amount: int) -> str:
        """Wire money."""
        return "wired"

    assert wire.guardrails == ("small_amounts",)
    with pytest.raises(ToolDefinitionError, match="list of guardrail names"):
        tool(guardrails="small_amounts")(wire.function)
    config = scripted_config({"clerk": ["hi"]}, agents=[_agent(tools=["wire"])], tools=[wire])
    with pytest.raises(ConfigurationError) as refused:
        config.validate()  # small_amounts is not registered here
    assert (refused.value.table, refused.value.field) == ("runtime", "tools")
    assert "tool 'wire': unknown guardrail 'small_amounts'" in refused.value.message


# --------------------------------------------------------------------------- runs


async def test_an_input_trip_fails_the_run_before_any_model_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = _config(["never said"], guardrails={"input": ["no_secrets"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(
            build_request(entry_agent="clerk", input="my password is hunter2")
        )
        passed = await env.agents.run(build_request(entry_agent="clerk", input="hello"))
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_TRIPPED
    assert "input guardrail 'no_secrets' tripped: the message carries a password" in (
        result.failure.message
    )
    assert result.usage.model_calls == 0  # nothing billed
    assert [request.run_id for request in provider.requests] == [passed.run_id]
    [tripped] = _of(events, "guardrail_tripped")
    assert tripped["guardrail"] == "no_secrets" and tripped["kind"] == "input"
    assert tripped["data"] == {"word": "password"}
    assert not _of(events, "model_started")
    assert passed.outcome is RunOutcome.COMPLETED
    assert [e["guardrail"] for e in _of(_events(env, passed.run_id), "guardrail_passed")] == [
        "no_secrets"
    ]


async def test_in_parallel_mode_a_trip_cancels_the_model_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The model call starts beside the guardrail and is held until cancelled: the trip
    cancels it (its `model_completed` says so) and the run ends guardrail_tripped."""
    provider = RecordingProvider()
    provider.gate("clerk", 1)  # never opened: only the cancellation ends this call
    config = _config(["never said"], guardrails={"input": ["no_secrets"], "input_mode": "parallel"})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(
            build_request(entry_agent="clerk", input="my password is hunter2")
        )
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_TRIPPED
    assert len(provider.calls("clerk")) == 1  # it had started
    [completed] = _of(events, "model_completed")
    assert completed["error"] == "cancelled"
    types = [event["type"] for event in events]
    assert types.index("guardrail_tripped") < types.index("run_failed")


async def test_in_parallel_mode_a_trip_after_the_answer_discards_it_and_runs_no_tool(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The model answered (with a tool call) before the guardrail decided: the trip ends the
    run all the same, the tool never runs, and its call is answered in the session (no call
    without a result). The model call happened: it is counted."""
    SIDE_EFFECTS.clear()
    GATES["slow"] = asyncio.Event()
    config = _config(
        [_transfer(5), "never"],
        guardrails={"input": ["slow_no_secrets"], "input_mode": "parallel"},
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(
            build_request(entry_agent="clerk", input="my password is hunter2")
        )
        await wait_until(
            lambda: bool(_of(_events(env, handle.run_id), "model_completed")),
            message="the model's answer",
        )
        GATES["slow"].set()
        result = await handle.result()
        entries = env.store.load_entries("local", result.session_id)
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_TRIPPED
    assert SIDE_EFFECTS == [] and result.usage.model_calls == 1
    assert [entry.role for entry in entries] == ["user", "assistant", "tool"]
    assert "the run ended (failed)" in str(entries[-1].content)


async def test_in_parallel_mode_a_pass_keeps_the_answer(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _config(["an answer"], guardrails={"input": ["no_secrets"], "input_mode": "parallel"})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="hello"))
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "an answer"
    assert [e["guardrail"] for e in _of(events, "guardrail_passed")] == ["no_secrets"]


async def test_a_queued_user_message_is_checked_too(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = _config(["first", "second"], guardrails={"input": ["no_secrets"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        gate = provider.gate("clerk", 1)
        handle = await env.agents.start(build_request(entry_agent="clerk", input="hello"))
        await wait_until(lambda: provider.started.is_set(), message="the first model call")
        await handle.send_message("the password is 1234")
        await handle.record()  # a query answered after the signal: the workflow has it
        gate.set()
        result = await handle.result()
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_TRIPPED
    assert len(provider.calls("clerk")) == 1  # the message never reached the model


async def test_an_output_trip_fails_the_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _config(["that is a stupid question"], guardrails={"output": ["polite_answer"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="why?"))
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_TRIPPED
    assert "output guardrail 'polite_answer' tripped: the answer is rude" in result.failure.message
    assert _of(events, "guardrail_tripped")[0]["kind"] == "output"


async def test_an_output_trip_may_ask_the_model_for_another_answer(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = _config(
        ["that is a stupid question", "Because the sky scatters blue light."],
        guardrails={"output": ["polite_answer"], "on_output_trip": "retry"},
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="why blue?"))
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.COMPLETED
    assert result.text == "Because the sky scatters blue light."
    feedback = provider.calls("clerk")[1].messages[-1]
    assert feedback["role"] == "user"
    assert "guardrail 'polite_answer' refused it: the answer is rude" in feedback["content"]
    assert [e["type"] for e in _of(events, "guardrail_tripped", "guardrail_passed")] == [
        "guardrail_tripped",
        "guardrail_passed",
    ]
    assert _of(events, "output_rejected")[0]["retry"] == 1


async def test_a_tool_trip_is_a_refusal_the_model_sees_and_the_tool_never_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SIDE_EFFECTS.clear()
    provider = RecordingProvider()
    config = _config(
        [_transfer(5000), _transfer(50, "pay-2"), "done"],
        guardrails={"tools": {"send_money": ["small_amounts"]}},
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="pay bob"))
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.COMPLETED
    assert SIDE_EFFECTS == ["sent 50 to bob"]  # the refused call never ran
    refusal = provider.calls("clerk")[1].messages[-1]
    assert refusal["role"] == "tool"
    content = json.loads(refusal["content"])
    assert content["guardrail"] == "small_amounts"
    assert content["reason"] == "amount 5000 is over 100"
    [tripped] = _of(events, "guardrail_tripped")
    assert (tripped["tool"], tripped["tool_call_id"]) == ("send_money", "pay-1")
    completed = {e["tool_call_id"]: e for e in _of(events, "tool_completed")}
    assert "guardrail 'small_amounts' refused" in completed["pay-1"]["error"]


async def test_a_tool_s_own_guardrail_refuses_its_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    ran: list[int] = []

    @tool(guardrails=["small_amounts"])
    def wire(to: str, amount: int) -> str:
        """Wire money."""
        ran.append(amount)
        return "wired"

    call = {"name": "wire", "id": "w1", "arguments": {"to": "bob", "amount": 500}}
    config = scripted_config(
        {"clerk": [{"tool_calls": [call]}, "refused"]},
        agents=[_agent(tools=["wire"])],
        tools=[wire],
    )
    for check in ALL_GUARDRAILS:
        config.add_guardrail(check)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="wire"))
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.COMPLETED and ran == []
    assert [e["guardrail"] for e in _of(events, "guardrail_tripped")] == ["small_amounts"]


async def test_a_tool_trip_may_fail_the_run_instead(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SIDE_EFFECTS.clear()
    policy = RuntimePolicy(guardrails=GuardrailPolicy(tool=("small_amounts",), on_tool_trip="fail"))
    config = _config([_transfer(5000), "never"], policy=policy)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="pay bob"))
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_TRIPPED
    assert "tool guardrail 'small_amounts' tripped" in result.failure.message
    assert SIDE_EFFECTS == []


async def test_a_guardrail_that_keeps_raising_fails_the_run_after_its_attempts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _config(["never"], guardrails={"input": ["always_raises"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="hello"))
        events = _events(env, result.run_id)
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_FAILED
    assert "input guardrail 'always_raises' failed" in result.failure.message
    assert "RuntimeError: classifier unreachable" in result.failure.message
    assert ATTEMPTS[result.run_id] == 2  # its retry policy, then the end
    assert _of(events, "guardrail_failed")[0]["guardrail"] == "always_raises"


async def test_a_guardrail_returning_the_wrong_type_fails_at_once_naming_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _config(["an answer"], guardrails={"output": ["wrong_type"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="hello"))
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_FAILED
    assert "guardrail 'wrong_type' returned bool, not a GuardrailResult" in result.failure.message


async def test_guardrails_check_a_child_s_answer_too(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    call = {"name": "agent.call", "id": "c1", "arguments": {"agent": "helper", "task": "t"}}
    agents = [
        AgentDefinition(id="boss", description="boss", callable_agents=["helper"]),  # type: ignore[arg-type]
        AgentDefinition.model_validate(
            {"id": "helper", "description": "helper", "guardrails": {"output": ["polite_answer"]}}
        ),
    ]
    config = scripted_config(
        {"boss": [{"tool_calls": [call]}, "ok"], "helper": ["stupid task"]}, agents=agents
    )
    for check in ALL_GUARDRAILS:
        config.add_guardrail(check)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        tree = await env.agents.list_run_tree(result.root_run_id)
    child = next(record for record in tree if record.agent_id == "helper")
    assert child.failure is not None and child.failure.code is FailureCode.GUARDRAIL_TRIPPED
    assert result.outcome is RunOutcome.COMPLETED


def test_a_check_carries_what_it_checks() -> None:
    check = GuardrailCheck(kind="tool", run_id="r", agent_id="a", turn=1, tool_name="t")
    assert check.arguments is None and check.text == ""


async def test_watch_and_run_output_show_what_tripped_and_why(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The events of a real run, as `otherone watch` folds them and `otherone run` prints
    them: the refused call's guardrail and reason, and the run's end."""
    SIDE_EFFECTS.clear()
    config = _config(
        [_transfer(5000), "that is a stupid question"],
        guardrails={"output": ["polite_answer"], "tools": {"send_money": ["small_amounts"]}},
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="pay"))
        records = env.store.read_events(result.root_run_id, after=0)
    state = WatchState(result.root_run_id)
    for record in records:
        state.apply(record)
    activity = [item.text for item in state.activity]
    assert "⛔ tool guardrail 'small_amounts' on send_money tripped: amount 5000 is over 100" in (
        activity
    )
    assert "⛔ output guardrail 'polite_answer' tripped: the answer is rude" in activity
    assert state.root is not None and state.root.status == "failed"
    assert "guardrail_tripped: output guardrail 'polite_answer' tripped" in str(state.root.failure)
    out, err = io.StringIO(), io.StringIO()
    printer = EventPrinter(result.run_id, out, make_console(err), verbose=True)
    for record in records:
        printer.handle(record)
    lines = err.getvalue()
    assert "⛔ output guardrail 'polite_answer' tripped: the answer is rude" in lines
    assert "⛔ tool guardrail 'small_amounts' on send_money tripped" in lines


@pytest.mark.parametrize("inline_bytes", [2048, 0], ids=["inline", "stored"])
async def test_a_result_guardrail_withholds_a_result_the_tool_returned(
    client: Client, task_queue: str, tmp_path: Path, inline_bytes: int
) -> None:
    """The tool ran (its ledger says so), but the model sees the refusal instead of its
    result, whether the result came back inline or was stored by the tool activity."""
    LOOKUPS.clear()
    provider = RecordingProvider()
    call = {"name": "lookup_contact", "id": "l1", "arguments": {"name": "ann"}}
    agent = _agent(tools=["lookup_contact"], guardrails={"tool_result": ["no_contact_details"]})
    config = scripted_config(
        {"clerk": [{"tool_calls": [call]}, "cannot say"]},
        agents=[agent],
        tools=[lookup_contact],
        limits=RuntimeLimits(inline_tool_result_bytes=inline_bytes),
    )
    for check in ALL_GUARDRAILS:
        config.add_guardrail(check)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="ann's mail?"))
        events = _events(env, result.run_id)
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.COMPLETED and LOOKUPS == ["ann"]
    seen = provider.calls("clerk")[1].messages[-1]
    assert seen["role"] == "tool" and "ann@example.com" not in json.dumps(seen)
    assert "guardrail 'no_contact_details' withheld this call's result" in seen["content"]
    assert "ann@example.com" not in json.dumps([entry.content for entry in entries])
    [tripped] = _of(events, "guardrail_tripped")
    assert (tripped["kind"], tripped["tool_call_id"]) == ("tool_result", "l1")


async def test_a_result_trip_may_fail_the_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    call = {"name": "lookup_contact", "id": "l1", "arguments": {"name": "bo"}}
    agent = _agent(
        tools=["lookup_contact"],
        guardrails={
            "tool_results": {"lookup_contact": ["no_contact_details"]},
            "on_tool_trip": "fail",
        },
    )
    config = scripted_config(
        {"clerk": [{"tool_calls": [call]}, "never"]}, agents=[agent], tools=[lookup_contact]
    )
    for check in ALL_GUARDRAILS:
        config.add_guardrail(check)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="clerk", input="bo's mail?"))
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.GUARDRAIL_TRIPPED
    assert "tool_result guardrail 'no_contact_details' tripped" in result.failure.message
