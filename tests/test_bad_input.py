"""Bad input, table-driven: the client API, the CLI, ``otherone.toml`` and model output.

Why: every way a caller, an operator or a model can get input wrong must end in a typed error
(or, inside a run, a structured failure or tool result) that names the problem, and must leave
no half-written state behind: no workflow started for a rejected request, no row written for a
rejected call, no session left locked by a run that failed to start, nothing persisted that a
limit stopped. Each row of the tables below is one bad input; the tests share one worker and
one store (a module-scoped bench) and compare the store's row counts before and after.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import pytest_asyncio
from pydantic import ValidationError
from sqlalchemy import inspect, text
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from otherone.activities.providers.base import ModelRequest, StreamEvent, TextDelta, ToolCallDelta
from otherone.client.agent_client import AgentClient, build_request, root_run_id
from otherone.client.cli import run_cli
from otherone.contracts import ApprovalDecision, child_run_id
from otherone.definitions import AgentDefinition, RuntimeLimits
from otherone.errors import (
    ConfigurationError,
    FailureCode,
    IdempotencyConflictError,
    InvalidRequestError,
    OtheroneError,
    RunNotActiveError,
    RunNotFoundError,
)
from otherone.runs import (
    MAX_INPUT_BYTES,
    MAX_JSON_DEPTH,
    AgentCallRequest,
    AgentRunResult,
    ResultContract,
    RunOutcome,
    RunStatus,
)
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.tools import tool
from otherone.worker.telemetry import prometheus_runtime
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider

pytestmark = pytest.mark.timeout(120)

REPO_ROOT = Path(__file__).resolve().parent.parent
SURROGATE = "\udcff"  # what Python makes of an undecodable byte (or a broken JSON escape)
#: Marks where the test provider puts a lone surrogate into model output.
BAD_CHAR = "<bad-char>"
HOLDER = "holder"  # a root kept in its model call so trusted agent calls have a running caller

# --------------------------------------------------------------------------- the bench

executed: list[str] = []


@tool
def record(text: str) -> str:
    """Record a note.

    Args:
        text: The note.
    """
    executed.append(text)
    return f"recorded {text}"


@tool
def secret_tool() -> str:
    """Registered, but no agent may use it."""
    executed.append("secret_tool")
    return "secret"


@tool
def huge() -> str:
    """Returns far more than max_result_bytes."""
    return "x" * 10_000


def calls(*specs: tuple[str, Any]) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"name": name, "id": f"t{index}", "arguments": arguments}
            for index, (name, arguments) in enumerate(specs, start=1)
        ]
    }


def agent_call(arguments: Any) -> list[Any]:
    return [calls(("agent.call", arguments)), "recovered"]


def tool_call(name: str, arguments: Any) -> list[Any]:
    return [calls((name, arguments)), "recovered"]


#: Agent id -> scripted turns. A run of ``m_*`` / ``c_*`` shows the model a bad call of its own.
SCRIPT: dict[str, list[Any]] = {
    "plain": ["done"],
    HOLDER: ["released"],
    "m_bad_json": tool_call("record", "{not json"),
    "m_not_object": tool_call("record", "[1, 2]"),
    "m_wrong_type": tool_call("record", {"text": 42}),
    "m_missing": tool_call("record", {}),
    "m_extra": tool_call("record", {"text": "x", "colour": "red"}),
    "m_unknown_tool": tool_call("launch_missiles", {}),
    "m_disallowed": tool_call("secret_tool", {}),
    "m_bad_char_args": tool_call("record", f'{{"text": "a{BAD_CHAR}b"}}'),
    "c_unknown_agent": agent_call({"agent": "nobody", "task": "x"}),
    "c_not_callable": agent_call({"agent": "m_missing", "task": "x"}),
    "c_blank_task": agent_call({"agent": "plain", "task": "   "}),
    "c_bad_json": agent_call("{oops"),
    "c_context_text": agent_call({"agent": "plain", "task": "x", "context": "not an object"}),
    "c_extra": agent_call({"agent": "plain", "task": "x", "priority": 1}),
    "c_huge_context": agent_call({"agent": "plain", "task": "x", "context": {"b": "y" * 66_000}}),
    "h_tool_result": [calls(("huge", {})), "never"],
    "h_output": ["this answer is far longer than ten bytes"],
    "s_output": [f"bad {BAD_CHAR} byte"],
    "not_json": ["this is not JSON"],
    "wrong_json": ['{"n": "one"}'],
}


#: Every agent the ``c_*`` calls name.
CALLED = ("nobody", "m_missing", "plain")

#: Per-agent max_result_bytes (default 1000): tiny to stop an answer, big for a big call.
RESULT_BYTES = {"h_output": 10, "c_huge_context": 200_000}


def tools_of(agent_id: str) -> Any:
    if agent_id == "h_tool_result":
        return ["huge"]
    return ["record"] if agent_id.startswith("m_") else "none"


def bench_config() -> Any:
    agents = [
        AgentDefinition.model_validate(
            {
                "id": agent_id,
                "description": f"{agent_id} agent",
                "tools": tools_of(agent_id),
                "callable_agents": ["plain", "not_json", "wrong_json"],
                "limits": {"max_result_bytes": RESULT_BYTES.get(agent_id, 1000)},
            }
        )
        for agent_id in SCRIPT
    ]
    return scripted_config(
        SCRIPT,
        agents=agents,
        tools=[record, secret_tool, huge],
        limits=RuntimeLimits(max_tool_calls=50, max_depth=2),
    )


@dataclass
class BadCharProvider:
    """The scripted model, except that `BAD_CHAR` becomes a lone surrogate in what it streams:
    raw in text, as a JSON escape in tool arguments (as a provider's broken JSON would)."""

    inner: RecordingProvider = dataclasses.field(default_factory=RecordingProvider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self.inner.stream(request):
            if isinstance(event, TextDelta):
                event = TextDelta(event.text.replace(BAD_CHAR, SURROGATE))
            elif isinstance(event, ToolCallDelta):
                arguments = event.arguments.replace(BAD_CHAR, "\\udcff")
                event = dataclasses.replace(event, arguments=arguments)
            yield event


@dataclass
class Bench:
    agents: AgentClient
    store: Store
    temporal: Client
    address: str
    task_queue: str
    finished: AgentRunResult
    holder_run_id: str

    def counts(self) -> dict[str, int]:
        """Rows per table of the store: the state a rejected input must not change."""
        with self.store.engine.connect() as conn:
            tables = [t for t in inspect(conn).get_table_names() if t.startswith("otherone_")]
            counts = {
                t: conn.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one() for t in tables
            }
        assert {"otherone_entries", "otherone_sessions", "otherone_run_records"} <= set(counts)
        return counts

    def held_sessions(self) -> list[str]:
        """Sessions whose writer lease is held now (other than the holder root's)."""
        now = datetime.now(UTC)
        return [
            info.session_id
            for info in self.store.session_infos("local", include_internal=True)
            if info.holder(now) not in (None, self.holder_run_id)
        ]

    async def absent(self, run_id: str) -> bool:
        """Temporal has no workflow with this id (describe is exact, unlike visibility)."""
        try:
            await self.temporal.get_workflow_handle(run_id).describe()
        except RPCError as error:
            return error.status == RPCStatusCode.NOT_FOUND
        return False

    def tool_entries(self, result: AgentRunResult) -> list[tuple[str, str | None, Any]]:
        """(tool name, error kind, parsed content) of the run's tool results, in order."""
        return [
            (entry.tool_name or "", entry.error_kind, json.loads(entry.content))
            for entry in self.store.load_entries("local", result.session_id)
            if entry.role == "tool"
        ]


@pytest_asyncio.fixture(scope="module")
async def bench(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Bench]:
    provider = BadCharProvider()
    gate = provider.inner.gate(HOLDER, 1)
    task_queue = f"bad-input-{uuid4()}"
    tmp = tmp_path_factory.mktemp("bad-input")
    client = temporal_env.client
    async with agent_env(
        client, task_queue, bench_config(), tmp, providers={"scripted": provider}
    ) as env:
        finished = await env.agents.run(build_request(entry_agent="plain", input="hello"))
        holder = await env.agents.start(build_request(entry_agent=HOLDER, input="wait"))
        await wait_until(lambda: bool(provider.inner.calls(HOLDER)), message="holder's model call")
        # Its `model_started` is written within the event bound while the call waits: before
        # any test counts rows, so that no count sees it arrive.
        await wait_until(
            lambda: any(
                record.event["type"] == "model_started"
                for record in env.store.read_events(holder.run_id)
            ),
            message="holder's model_started stored",
        )
        now = datetime.now(UTC)
        leases = [info.holder(now) for info in env.store.session_infos("local")]
        assert holder.run_id in leases, "held_sessions() must be able to see a held lease"
        try:
            yield Bench(
                env.agents,
                env.store,
                client,
                client.service_client.config.target_host,
                task_queue,
                finished,
                holder.run_id,
            )
        finally:
            gate.set()
            await holder.result()


def assert_names(error: BaseException, *needles: str) -> None:
    message = str(error)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert "Traceback" not in message


# --------------------------------------------------------------------------- client: requests

BIG = "x" * (MAX_INPUT_BYTES + 1)

#: (case, request fields, field named by the error, text in the message)
REQUESTS: list[tuple[str, dict[str, Any], str, str]] = [
    ("bad agent id", {"entry_agent": "Bad Agent!"}, "entry_agent", "pattern"),
    ("empty agent id", {"entry_agent": ""}, "entry_agent", "pattern"),
    ("agent id of the wrong type", {"entry_agent": 7}, "entry_agent", "valid string"),
    ("empty input", {"input": ""}, "input", "must not be empty"),
    ("blank input", {"input": " \n\t"}, "input", "must not be empty"),
    ("oversized input", {"input": BIG}, "input", f"at most {MAX_INPUT_BYTES} bytes"),
    ("no messages", {"input": []}, "input", "at least one message"),
    (
        "no user message",
        {"input": [{"role": "assistant", "content": "hi"}]},
        "input",
        "non-empty user message",
    ),
    ("unknown role", {"input": [{"role": "robot", "content": "hi"}]}, "input", "role"),
    ("input of the wrong type", {"input": 12}, "input", "valid string"),
    ("non-UTF-8 bytes as input", {"input": b"\xff\xfe"}, "input", "unicode"),
    ("unpaired surrogate in input", {"input": f"hi {SURROGATE}"}, "input", "valid UTF-8"),
    (
        "unpaired surrogate in a message",
        {"input": [{"role": "user", "content": f"hi {SURROGATE}"}]},
        "input",
        "valid UTF-8 text (at 0.content)",
    ),
    ("empty idempotency key", {"idempotency_key": ""}, "idempotency_key", "at least 1"),
    ("oversized idempotency key", {"idempotency_key": "k" * 257}, "idempotency_key", "256"),
    ("blank session id", {"session": {"session_id": "  "}}, "session.session_id", "blank"),
    ("zero context window", {"session": {"context_window": 0}}, "session.context_window", "0"),
    (
        "threshold above 1",
        {"session": {"threshold_percentage": 1.5}},
        "session.threshold_percentage",
        "less than or equal to 1",
    ),
    (
        "bad partition key",
        {"runtime_context": {"partition_key": "no spaces allowed"}},
        "runtime_context.partition_key",
        "pattern",
    ),
    (
        "zero iterations override",
        {"limits": {"max_iterations_per_run": 0}},
        "limits.max_iterations_per_run",
        "greater than 0",
    ),
    (
        "negative timeout override",
        {"limits": {"run_timeout": -5}},
        "limits.run_timeout",
        "greater than zero",
    ),
    ("unknown limit", {"limits": {"max_fun": 1}}, "limits.max_fun", "Extra inputs"),
    ("oversized metadata", {"metadata": {"blob": "m" * 17_000}}, "metadata", "16 KiB"),
    (
        "unpaired surrogate in metadata",
        {"metadata": {"tags": ["ok", SURROGATE]}},
        "metadata",
        "(at tags.1)",
    ),
    ("unknown visibility", {"event_visibility": "everything"}, "event_visibility", "all"),
    (
        "flag of the wrong type",
        {"include_thinking_events": "maybe"},
        "include_thinking_events",
        "bool",
    ),
    ("unknown field", {"priority": "high"}, "priority", "Extra inputs"),
]


@pytest.mark.parametrize(
    ("fields", "field", "needle"),
    [case[1:] for case in REQUESTS],
    ids=[case[0] for case in REQUESTS],
)
async def test_bad_request_is_refused_before_anything_starts(
    bench: Bench, fields: dict[str, Any], field: str, needle: str
) -> None:
    key = f"bad-{uuid4()}"
    before = bench.counts()
    with pytest.raises(InvalidRequestError) as info:
        request = build_request(
            **{"entry_agent": "plain", "input": "hi", "idempotency_key": key, **fields}
        )
        await bench.agents.start(request)  # not reached: the request is refused first
    assert info.value.field is not None and info.value.field.startswith(field), info.value
    assert_names(info.value, needle, f"{field}")
    assert bench.counts() == before
    assert await bench.absent(
        root_run_id(build_request(entry_agent="plain", input="hi", idempotency_key=key))
    )


# --------------------------------------------------------------------------- client: calls

ClientCall = Callable[[Bench], Awaitable[Any]]

#: (case, call, error type, text in the message)
CALLS: list[tuple[str, ClientCall, type[OtheroneError], str]] = [
    (
        "message to an unknown run",
        lambda b: b.agents.send_message("run-does-not-exist", "hi"),
        RunNotFoundError,
        "run 'run-does-not-exist' not found",
    ),
    (
        "message to a finished run",
        lambda b: b.agents.send_message(b.finished.run_id, "hi"),
        RunNotActiveError,
        "is not running",
    ),
    (
        "empty run id",
        lambda b: b.agents.send_message("", "hi"),
        InvalidRequestError,
        "run_id: must be a non-empty run id",
    ),
    (
        "no messages",
        lambda b: b.agents.send_message(b.holder_run_id, []),
        InvalidRequestError,
        "messages: at least one message",
    ),
    (
        "blank message",
        lambda b: b.agents.send_message(b.holder_run_id, ["ok", "  "]),
        InvalidRequestError,
        "messages.1: must be a non-empty string",
    ),
    (
        "oversized message",
        lambda b: b.agents.send_message(b.holder_run_id, [BIG]),
        InvalidRequestError,
        "messages.0: must be at most",
    ),
    (
        "too many messages",
        lambda b: b.agents.send_message(b.holder_run_id, ["m"] * 65),
        InvalidRequestError,
        "messages: at most 64",
    ),
    (
        "message with an unpaired surrogate",
        lambda b: b.agents.send_message(b.holder_run_id, [f"a{SURROGATE}"]),
        InvalidRequestError,
        "messages.0: must be valid UTF-8",
    ),
    (
        "message of the wrong type",
        lambda b: b.agents.send_message(b.holder_run_id, [3]),  # type: ignore[list-item]
        InvalidRequestError,
        "messages.0: must be a non-empty string",
    ),
    (
        "cancel an unknown run",
        lambda b: b.agents.cancel("run-does-not-exist"),
        RunNotFoundError,
        "not found",
    ),
    (
        "cancel a finished run",
        lambda b: b.agents.cancel(b.finished.run_id),
        RunNotActiveError,
        "is not running",
    ),
    (
        "record of an unknown run",
        lambda b: b.agents.get_run("run-nope"),
        RunNotFoundError,
        "run-nope",
    ),
    ("record of an empty id", lambda b: b.agents.get_run(""), InvalidRequestError, "run_id"),
    (
        "tree of a malformed id",
        lambda b: b.agents.list_run_tree('x" OR "1"="1'),
        InvalidRequestError,
        "root_run_id: not a run id",
    ),
    (
        "trusted call on a finished run",
        lambda b: b.agents.call_agent(
            b.finished.run_id, "c1", AgentCallRequest(target="plain", task="x")
        ),
        RunNotActiveError,
        "is not running",
    ),
    (
        "same key, different request",
        lambda b: b.agents.start(
            build_request(entry_agent="plain", input="something else", idempotency_key="taken")
        ),
        IdempotencyConflictError,
        "idempotency_conflict: key 'taken'",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "needle"), [case[1:] for case in CALLS], ids=[case[0] for case in CALLS]
)
async def test_bad_client_call_raises_a_typed_error_and_writes_nothing(
    bench: Bench, call: ClientCall, error: type[OtheroneError], needle: str
) -> None:
    original = await bench.agents.run(
        build_request(entry_agent="plain", input="first", idempotency_key="taken")
    )
    before = bench.counts()
    with pytest.raises(error) as info:
        await call(bench)
    assert_names(info.value, needle)
    assert bench.counts() == before
    assert bench.held_sessions() == []
    # The run the conflicting key belongs to is untouched.
    assert (await bench.agents.result(original.run_id)).text == "done"


# --------------------------------------------------------------------------- runs that cannot start

#: (case, request fields, failure code, text in the message)
RUNS: list[tuple[str, dict[str, Any], FailureCode, str]] = [
    ("unknown agent", {"entry_agent": "nobody"}, FailureCode.AGENT_NOT_FOUND, "'nobody'"),
    (
        "override raising max_tool_calls",
        {"limits": {"max_tool_calls": 51}},
        FailureCode.INVALID_CONFIGURATION,
        "limits.max_tool_calls: override 51 is above the runtime limit 50",
    ),
    (
        "override raising max_depth",
        {"limits": {"max_depth": 3}},
        FailureCode.INVALID_CONFIGURATION,
        "limits.max_depth",
    ),
    (
        "override raising run_timeout",
        {"limits": {"run_timeout": 3600}},
        FailureCode.INVALID_CONFIGURATION,
        "limits.run_timeout",
    ),
    (
        "override raising max_result_bytes",
        {"limits": {"max_result_bytes": 1024 * 1024}},
        FailureCode.INVALID_CONFIGURATION,
        "limits.max_result_bytes",
    ),
]


@pytest.mark.parametrize(
    ("fields", "code", "needle"), [case[1:] for case in RUNS], ids=[case[0] for case in RUNS]
)
async def test_run_that_cannot_start_fails_structured_and_leaves_no_session(
    bench: Bench, fields: dict[str, Any], code: FailureCode, needle: str
) -> None:
    session_id = f"s-{uuid4()}"
    request = build_request(
        **{"entry_agent": "plain", "input": "hi", "session": {"session_id": session_id}, **fields}
    )
    result = await bench.agents.run(request)
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is code
    assert_names(AssertionError(result.failure.message), needle)
    # No session was opened (nothing written to it, no lease) and the record is final.
    assert session_id not in bench.store.list_sessions("local")
    assert bench.store.load_entries("local", session_id) == []
    assert bench.held_sessions() == []
    record = bench.store.get_run_record("local", result.run_id)
    assert record is None or record.status is RunStatus.FAILED


# --------------------------------------------------------------------------- model output

#: (case, agent, tool name, error kind given back to the model, text in the tool result)
TOOL_RESULTS: list[tuple[str, str, str, str | None, str]] = [
    ("tool arguments not JSON", "m_bad_json", "record", "invalid_arguments", "JSON"),
    ("tool arguments not an object", "m_not_object", "record", "invalid_arguments", "object"),
    ("tool argument of the wrong type", "m_wrong_type", "record", "invalid_arguments", "text"),
    ("tool argument missing", "m_missing", "record", "invalid_arguments", "text"),
    ("unknown tool argument", "m_extra", "record", "invalid_arguments", "colour"),
    (
        "hallucinated tool",
        "m_unknown_tool",
        "launch_missiles",
        "permission_denied",
        "tool 'launch_missiles' is not available",
    ),
    (
        "tool the agent may not use",
        "m_disallowed",
        "secret_tool",
        "permission_denied",
        "tool 'secret_tool' is not available",
    ),
    ("agent call to an unknown agent", "c_unknown_agent", "agent.call", None, "agent_not_found"),
    ("agent call not allowed", "c_not_callable", "agent.call", None, "agent_call_denied"),
    ("agent call with a blank task", "c_blank_task", "agent.call", None, "task is required"),
    ("agent call arguments not JSON", "c_bad_json", "agent.call", "invalid_arguments", "JSON"),
    (
        "agent call context not an object",
        "c_context_text",
        "agent.call",
        "invalid_arguments",
        "context",
    ),
    (
        "agent call with an unknown argument",
        "c_extra",
        "agent.call",
        "invalid_arguments",
        "unknown argument(s): priority",
    ),
    (
        "agent call context over max_context_transfer_bytes",
        "c_huge_context",
        "agent.call",
        None,
        "max_context_transfer_bytes",
    ),
]


@pytest.mark.parametrize(
    ("agent", "tool_name", "kind", "needle"),
    [case[1:] for case in TOOL_RESULTS],
    ids=[case[0] for case in TOOL_RESULTS],
)
async def test_bad_call_from_the_model_goes_back_to_it_and_runs_nothing(
    bench: Bench, agent: str, tool_name: str, kind: str | None, needle: str
) -> None:
    executions = len(executed)
    result = await bench.agents.run(build_request(entry_agent=agent, input="go"))
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "recovered"  # the model read the error and carried on
    [(name, error_kind, content)] = bench.tool_entries(result)
    assert (name, error_kind) == (tool_name, kind)
    assert needle in json.dumps(content), content
    assert len(executed) == executions, "the bad call must not run anything"
    assert result.usage.agent_calls <= 1
    # The call's child under either id formula (named after any agent the bad calls name).
    children = [child_run_id(result.run_id, result.run_id, "t1", target) for target in CALLED]
    for child in [f"{result.run_id}/t1", *children]:
        assert await bench.absent(child), f"no child run may start ({child})"
    assert bench.held_sessions() == []


#: (case, agent, outcome, text in the failure; the stopped output is never persisted)
STOPPED: list[tuple[str, str, RunOutcome, str]] = [
    ("huge tool result", "h_tool_result", RunOutcome.BUDGET_EXCEEDED, "max_result_bytes"),
    (
        "model output over max_result_bytes",
        "h_output",
        RunOutcome.BUDGET_EXCEEDED,
        "max_result_bytes",
    ),
]


@pytest.mark.parametrize(
    ("agent", "outcome", "needle"),
    [case[1:] for case in STOPPED],
    ids=[case[0] for case in STOPPED],
)
async def test_oversized_output_ends_the_run_and_is_not_persisted(
    bench: Bench, agent: str, outcome: RunOutcome, needle: str
) -> None:
    result = await bench.agents.run(build_request(entry_agent=agent, input="go"))
    assert result.outcome is outcome
    assert result.failure is not None and needle in result.failure.message
    entries = bench.store.load_entries("local", result.session_id)
    roles = [e.role for e in entries]
    assert roles.count("assistant") <= (1 if agent == "h_tool_result" else 0)
    # The oversized result is not persisted; its call is answered by an error instead (a
    # session must never hold a tool call without a result).
    tool_rows = [e for e in entries if e.role == "tool"]
    assert roles.count("tool") == roles.count("assistant")
    assert all("x" * 1000 not in row.content and row.error_kind for row in tool_rows)
    assert bench.held_sessions() == []


async def test_unpaired_surrogates_from_the_model_or_a_tool_are_replaced(bench: Bench) -> None:
    """Bytes that are not UTF-8 (a broken JSON escape from a provider, a tool's undecodable
    text) become U+FFFD instead of failing every retry of the store write."""
    text = await bench.agents.run(build_request(entry_agent="s_output", input="go"))
    assert text.outcome is RunOutcome.COMPLETED, text.failure
    assert text.text == "bad \ufffd byte"
    tool_run = await bench.agents.run(build_request(entry_agent="m_bad_char_args", input="go"))
    assert tool_run.outcome is RunOutcome.COMPLETED, tool_run.failure
    [(_, kind, content)] = bench.tool_entries(tool_run)
    assert kind is None and content == "recorded a\ufffdb"


#: (case, target, contract, text in the failure)
CONTRACTS: list[tuple[str, str, ResultContract, str]] = [
    ("json contract, text output", "not_json", ResultContract(kind="json"), "JSON"),
    (
        "json contract, schema violated",
        "wrong_json",
        ResultContract(
            kind="json",
            schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        ),
        "at n",
    ),
]


@pytest.mark.parametrize(
    ("target", "contract", "needle"),
    [case[1:] for case in CONTRACTS],
    ids=[case[0] for case in CONTRACTS],
)
async def test_output_breaking_the_result_contract_is_invalid_agent_output(
    bench: Bench, target: str, contract: ResultContract, needle: str
) -> None:
    # No output retries (tests/test_typed_results.py has them): the first answer decides.
    request = AgentCallRequest(
        target=target, task="answer", result_contract=contract, output_retries=0
    )
    result = await bench.agents.call_agent(bench.holder_run_id, f"call-{uuid4().hex}", request)
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None
    assert result.failure.code is FailureCode.INVALID_AGENT_OUTPUT
    assert needle in result.failure.message
    assert result.run_id is not None
    child = await bench.agents.get_run(result.run_id)
    assert child.status is RunStatus.FAILED and bench.held_sessions() == []


# --------------------------------------------------------------------------- otherone.toml

MINIMAL = """
[models.demo]
provider = "scripted"
model = "demo-1"

[agents.assistant]
description = "Helps"
system_prompt = "Be nice."
model = "demo"
"""

#: (case, file content, table, field, text in the message)
CONFIGS: list[tuple[str, bytes, str | None, str | None, str]] = [
    ("not TOML", b"[agents\n", None, None, "not valid TOML"),
    ("not UTF-8", MINIMAL.encode() + b"\n# caf\xe9\n", None, None, "not valid UTF-8"),
    ("unknown table", MINIMAL.encode() + b"[server]\nport = 1\n", "server", None, "unknown"),
    (
        "agent id not allowed",
        MINIMAL.replace("[agents.assistant]", '[agents."Bad Id"]').encode(),
        'agents."Bad Id"',
        None,
        "not a valid agent id",
    ),
    (
        "description of the wrong type",
        MINIMAL.replace('description = "Helps"', "description = 42").encode(),
        "agents.assistant",
        "description",
        "valid string",
    ),
    (
        "unknown model",
        MINIMAL.replace('model = "demo"\n', 'model = "nope"\n').encode(),
        None,
        None,
        "'nope'",
    ),
    (
        "unknown tool",
        (MINIMAL + 'tools = ["nope"]\n').encode(),
        None,
        None,
        "'nope'",
    ),
    (
        "inline api key",
        MINIMAL.replace('model = "demo-1"', 'model = "demo-1"\napi_key = "sk-123"').encode(),
        "models.demo",
        "api_key",
        "api_key_env",
    ),
    (
        "zero limit",
        b"[limits]\nmax_iterations_per_run = 0\n" + MINIMAL.encode(),
        "limits",
        "max_iterations_per_run",
        "greater than 0",
    ),
    (
        "oversized system prompt",
        MINIMAL.replace('"Be nice."', '"' + "p" * (128 * 1024 + 1) + '"').encode(),
        "agents.assistant",
        "system_prompt",
        "at most 131072 bytes",
    ),
]


@pytest.mark.parametrize(
    ("content", "table", "field", "needle"),
    [case[1:] for case in CONFIGS],
    ids=[case[0] for case in CONFIGS],
)
def test_bad_config_file_names_file_table_and_field(
    tmp_path: Path, content: bytes, table: str | None, field: str | None, needle: str
) -> None:
    path = tmp_path / "otherone.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigurationError) as info:
        load_config(path)
    error = info.value
    assert str(path) in str(error) and needle in str(error), error
    assert (error.table, error.field) == (table, field) or table is None, error
    assert error.__cause__ is None and "sk-123" not in str(error)


# --------------------------------------------------------------------------- the CLI


def cli_settings(bench: Bench, tmp_path: Path) -> dict[str, str]:
    return {
        "OTHERONE_TEMPORAL_ADDRESS": bench.address,
        "OTHERONE_TASK_QUEUE": bench.task_queue,
        "OTHERONE_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
        "OTHERONE_DATA_DIR": str(tmp_path / "data"),
    }


#: (case, arguments, exit code, text in the one-line error)
CLI: list[tuple[str, list[str], int, str]] = [
    ("bad agent id", ["run", "Bad Agent", "hi"], 2, "entry_agent"),
    ("blank text", ["run", "plain", "   "], 2, "input: must not be empty"),
    (
        "empty idempotency key",
        ["run", "plain", "hi", "--idempotency-key", ""],
        2,
        "idempotency_key",
    ),
    (
        "bad partition",
        ["run", "plain", "hi", "--partition", "a b"],
        2,
        "--partition / OTHERONE_PARTITION: must be 1-128",
    ),
    ("undecodable argument", ["run", "plain", f"hi {SURROGATE}"], 2, "input: must be valid UTF-8"),
    ("blank message", ["send", "run-x", ""], 2, "messages.0"),
    (
        "zero activity slots",
        ["worker", "--max-concurrent-activities", "0"],
        2,
        "--max-concurrent-activities",
    ),
    ("missing config file", ["worker", "--config", "nowhere.toml"], 2, "nowhere.toml not found"),
    ("unknown command", ["explode"], 2, "invalid choice"),
    ("empty run id", ["show", ""], 2, "run_id"),
    ("unknown run", ["show", "run-unknown"], 3, "run 'run-unknown' not found"),
]


@pytest.mark.parametrize(
    ("argv", "code", "needle"), [case[1:] for case in CLI], ids=[case[0] for case in CLI]
)
def test_bad_cli_input_exits_with_one_line_naming_it(
    bench: Bench,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    needle: str,
) -> None:
    for name in list(os.environ):
        if name.startswith("OTHERONE_"):
            monkeypatch.delenv(name)
    for name, value in cli_settings(bench, tmp_path).items():
        monkeypatch.setenv(name, value)
    before = bench.counts()
    assert run_cli(argv) == code
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and error.startswith("error: "), error
    assert needle in error and "Traceback" not in error
    assert bench.counts() == before
    assert not (tmp_path / "cli.db").exists(), "a refused command must not create the store"


async def test_cli_refuses_non_utf8_bytes_and_reports_a_failed_run(
    bench: Bench, tmp_path: Path
) -> None:
    """Real bytes on a command line (a subprocess), and a run that fails inside the worker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTHERONE_")}
    env.update(cli_settings(bench, tmp_path), PYTHONPATH=str(REPO_ROOT))

    async def otherone(*args: str | bytes) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "otherone.client.cli",
            *args,
            env=env,
            cwd=REPO_ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    code, _, err = await otherone("run", "plain", b"caf\xe9 \xff")
    assert code == 2 and err.strip().startswith("error: input: must be valid UTF-8"), err
    code, out, err = await otherone("run", "nobody", "hi", "--json")
    assert code == 1, err
    result = AgentRunResult.model_validate_json(out)
    assert result.failure is not None and result.failure.code is FailureCode.AGENT_NOT_FOUND


def test_the_tables_hold_at_least_forty_bad_inputs() -> None:
    tables: list[list[Any]] = [
        REQUESTS,
        CALLS,
        RUNS,
        TOOL_RESULTS,
        STOPPED,
        CONTRACTS,
        CONFIGS,
        CLI,
    ]
    assert sum(len(table) for table in tables) >= 40


def test_free_form_json_must_be_shallow_finite_and_storable() -> None:
    """Metadata nested deeper than the run input's parsers go used to be accepted and fail the
    run after it started (`invalid_request` with an empty agent); NaN was taken as a number
    (and broke idempotency: NaN is not NaN); a NUL in a decision was reported as a surrogate."""
    deep: Any = 1
    for _ in range(MAX_JSON_DEPTH + 1):
        deep = {"a": deep}
    with pytest.raises(InvalidRequestError, match="metadata: must nest at most 64 levels"):
        build_request(entry_agent="a", input="x", metadata=deep)
    with pytest.raises(InvalidRequestError, match="metadata: must hold JSON numbers only"):
        build_request(entry_agent="a", input="x", metadata={"n": float("nan")})
    with pytest.raises(ValidationError, match="context"):
        AgentCallRequest(target="a", task="t", context={"deep": deep})
    shallow: Any = 1
    for _ in range(MAX_JSON_DEPTH - 1):
        shallow = {"a": shallow}
    assert build_request(entry_agent="a", input="x", metadata=shallow).metadata == shallow
    with pytest.raises(ValidationError, match=r"text: must not contain a NUL character"):
        ApprovalDecision(call_id="c", decision="answer", text="a\x00b")


def test_a_metrics_port_in_use_is_a_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match="OTHERONE_METRICS_PORT"):
            prometheus_runtime(port)
