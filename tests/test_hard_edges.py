"""Hard edges (issue 15): runs that never end, wrong outcomes, broken sessions, silent loss.

Each test failed on the main branch before its fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from otherone.activities.call_model import RUN_ALREADY_ENDED
from otherone.activities.providers.base import (
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from otherone.client.agent_client import AgentClient, RunHandle, build_request, root_run_id
from otherone.client.run_results import not_found_or
from otherone.config import RuntimeConfig
from otherone.contracts import (
    SIGNAL_USER_MESSAGES,
    STORE_TOTAL_TIMEOUT,
    WORKFLOW_NAME,
    EventRecord,
    UserMessages,
)
from otherone.definitions import (
    AccessPolicy,
    AgentDefinition,
    ModelOverrides,
    ModelProfile,
    RuntimeLimits,
)
from otherone.errors import FailureCode, InvalidRequestError, RunNotActiveError, RunNotFoundError
from otherone.runs import (
    DEFAULT_PARTITION,
    AgentCallRequest,
    AgentRunResult,
    RunOutcome,
    RunStatus,
)
from otherone.store import SessionBusyError, Store
from otherone.tools import tool
from otherone.worker.devserver import find_temporal_binary
from otherone.workflows.finishing import FINISH_GRACE
from otherone.workflows.messages import MAX_QUEUED_MESSAGES
from tests.api_env import api_env
from tests.edge_seams import GateStore, RefusingStore, StrictProvider
from tests.fixtures.providers.wire_server import Reply, Seen, WireServer, anthropic_stream
from tests.harness import AgentEnv, agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider
from tests.test_api import assert_problem, run_body
from tests.test_api import config as api_config
from tests.test_cli import address_of, assert_one_line_error, cli_env, otherone
from tests.test_watch import ROOT, Events, fold


async def test_input_that_is_no_run_request_ends_failed_invalid_request(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A start by Temporal's own client with `{}` (or a string) ends at once, naming the
    problems, instead of failing its workflow task for ever."""
    config = scripted_config({"agent": ["hi"]})
    async with agent_env(client, task_queue, config, tmp_path):
        results = []
        for raw in ({}, "hello", {"run_id": "x", "root_run_id": "x", "request": {"input": "q"}}):
            handle = await client.start_workflow(
                WORKFLOW_NAME,
                raw,
                id=f"raw-{uuid.uuid4().hex}",
                task_queue=task_queue,
                result_type=AgentRunResult,
            )
            results.append((handle.id, await asyncio.wait_for(handle.result(), 20)))
    for workflow_id, result in results:
        assert result.outcome is RunOutcome.FAILED
        assert result.failure is not None
        assert result.failure.code is FailureCode.INVALID_REQUEST
        assert result.failure.message.startswith("invalid run input: ")
        assert result.run_id == workflow_id
    assert "run_id: Field required" in results[0][1].failure.message  # type: ignore[union-attr]
    assert "request.entry_agent: Field required" in results[2][1].failure.message  # type: ignore[union-attr]


async def run_again_in_session_s1(env: AgentEnv) -> AgentRunResult:
    """A second run on session `s1`: it completes only if the first run left it free."""
    request = build_request(entry_agent="agent", input="again", session={"session_id": "s1"})
    return await asyncio.wait_for(env.agents.run(request), 20)


@dataclass
class HeldRun:
    """A run on session `s1` cancelled while it waits in the held store call."""

    env: AgentEnv
    store: GateStore
    handle: RunHandle


@contextlib.asynccontextmanager
async def cancelled_while_held(
    client: Client, task_queue: str, tmp_path: Path, held: str
) -> AsyncIterator[HeldRun]:
    """Start a run on session `s1` (its answer: "done"), wait until it is in ``held`` (a store
    call held at a `GateStore` gate), cancel it; the gate opens when the test does (or on the
    way out)."""
    store = GateStore(f"sqlite:///{tmp_path / 'store.db'}", held=held)
    config = scripted_config({"agent": ["done"]})
    try:
        async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
            handle = await env.agents.start(
                build_request(entry_agent="agent", input="wait", session={"session_id": "s1"})
            )
            assert await asyncio.to_thread(store.entered.wait, 20)
            await handle.cancel()
            yield HeldRun(env, store, handle)
    finally:
        store.release.set()
        store.close()


async def test_cancel_while_preparing_ends_cancelled_and_frees_the_session(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with cancelled_while_held(client, task_queue, tmp_path, "save_snapshot") as run:
        result = await asyncio.wait_for(run.handle.result(), 20)
        run.store.release.set()
        again = await run_again_in_session_s1(run.env)
    assert result.outcome is RunOutcome.CANCELLED, result.failure
    assert result.failure is None
    assert again.outcome is RunOutcome.COMPLETED


async def test_a_cancel_during_the_lease_store_call_never_leaves_the_session_locked(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Cancelled while `start_run` (the lease, the record, `run_started`) runs in its worker
    thread, prepare lets the call end and gives back the lease it took; the run ends cancelled
    only then. (It used to stop at once while the thread went on and took the lease for the
    ended run: the session stayed locked until the lease expired.)"""
    async with cancelled_while_held(client, task_queue, tmp_path, "start_run") as run:
        ending = asyncio.ensure_future(run.handle.result())
        # The run's end waits for the store call (a workflow task holding a local activity
        # is renewed within ~6 s: the cancel has reached the activity well before this).
        done, _ = await asyncio.wait({ending}, timeout=10)
        assert not done, "the run ended while its lease was still being taken"
        run.store.release.set()
        result = await asyncio.wait_for(ending, 20)
        assert run.store.session_holder("local", "s1") is None
        again = await run_again_in_session_s1(run.env)
    assert result.outcome is RunOutcome.CANCELLED, result.failure
    assert again.outcome is RunOutcome.COMPLETED, again.failure


def tool_that_waits(started: asyncio.Event, blocked: str | None = None) -> Any:
    """A tool whose first call waits until cancelled (the first run), later ones answer.

    With ``blocked``, only the first call for that topic waits, whichever call starts first
    (parallel calls start in any order on a loaded machine)."""

    @tool
    async def slow_lookup(topic: str) -> str:
        """Look a topic up (slowly)."""
        if not started.is_set() and blocked in (None, topic):
            started.set()
            await asyncio.Event().wait()
        return topic

    return slow_lookup


async def tool_outcome_recorded(client: Client, run_id: str, call_id: str) -> bool:
    """Whether the run's history holds the completed tool activity of ``call_id``."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    needle = f'"tool_call_id":"{call_id}"'.encode()
    return any(
        needle in payload.data
        for event in history.events
        if event.HasField("activity_task_completed_event_attributes")
        for payload in event.activity_task_completed_event_attributes.result.payloads
    )


@pytest.mark.parametrize("inline_bytes", [0, 2048], ids=["stored", "inline"])
async def test_cancel_mid_tool_answers_every_tool_call_so_the_session_goes_on(
    client: Client, task_queue: str, tmp_path: Path, inline_bytes: int
) -> None:
    started = asyncio.Event()
    lookup = tool_that_waits(started, blocked="a")
    calls = [{"name": "slow_lookup", "arguments": {"topic": t}, "id": f"c{t}"} for t in "ab"]
    config = scripted_config(
        {"agent": [{"tool_calls": calls}, "answered after the cancel"]},
        agents=[
            AgentDefinition(
                id="agent",
                description="agent",
                tools=["slow_lookup"],
                model_overrides=ModelOverrides(parallel_tool_calls=True),
            )
        ],
        tools=[lookup],
        limits=RuntimeLimits(inline_tool_result_bytes=inline_bytes),
    )
    strict = StrictProvider(RecordingProvider())
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": strict}
    ) as env:
        handle = await env.agents.start(
            build_request(entry_agent="agent", input="look up", session={"session_id": "s1"})
        )
        await asyncio.wait_for(started.wait(), 20)
        await wait_until(  # "b" has finished (stored its result, or handed it back); "a" waits
            lambda: tool_outcome_recorded(client, handle.run_id, "cb"),
            message="b's outcome recorded",
        )
        await handle.cancel()
        cancelled = await asyncio.wait_for(handle.result(), 20)
        entries = env.store.load_entries("local", "s1")
        events = [e.event async for e in env.agents.events(handle.run_id)]
        again = await asyncio.wait_for(
            env.agents.run(
                build_request(entry_agent="agent", input="go on", session={"session_id": "s1"})
            ),
            20,
        )
    assert cancelled.outcome is RunOutcome.CANCELLED
    tool_rows = [row for row in entries if row.role == "tool"]
    # "a" was still running: answered cancelled; "b" had finished (its effect happened) as
    # the run was cancelled: the session holds its real result, not "never had a result".
    assert [row.error_kind for row in tool_rows] == ["cancelled", None]
    assert "the run ended (cancelled)" in tool_rows[0].content
    assert tool_rows[1].content == '"b"', tool_rows[1].content
    assert strict.refused == []
    assert again.outcome is RunOutcome.COMPLETED, again.failure
    # Each call's events once: "b" finished, "a" was ended by the run's end.
    ends = [(e["type"], e["tool_call_id"], e.get("error")) for e in events if "tool_call_id" in e]
    assert sorted((kind, call) for kind, call, _ in ends) == [
        ("tool_completed", "ca"),
        ("tool_completed", "cb"),
        ("tool_started", "ca"),
        ("tool_started", "cb"),
    ]
    assert ("tool_completed", "cb", None) in ends


NUL_MARK = "<nul>"


@dataclass
class NulProvider:
    """The scripted model, except that `NUL_MARK` becomes U+0000 in its text and a ``\\u0000``
    escape in tool arguments (what a provider's JSON may carry)."""

    inner: RecordingProvider = field(default_factory=RecordingProvider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self.inner.stream(request):
            if isinstance(event, TextDelta):
                event = TextDelta(event.text.replace(NUL_MARK, "\x00"))
            elif isinstance(event, ToolCallDelta):
                arguments = event.arguments.replace(NUL_MARK, "\\u0000")
                event = dataclasses.replace(event, arguments=arguments)
            yield event


@tool
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo {text}"


async def test_nul_from_the_model_or_a_tool_is_replaced_on_every_store(
    client: Client, task_queue: str, tmp_path: Path, store: Store
) -> None:
    """PostgreSQL cannot hold U+0000: model and tool output carry U+FFFD instead, on both
    stores alike, and the run ends (it used to retry its store writes for ever)."""
    config = scripted_config(
        {
            "agent": [
                {"tool_calls": [{"name": "echo", "arguments": {"text": f"a{NUL_MARK}b"}}]},
                f"done {NUL_MARK} here",
            ]
        },
        agents=[AgentDefinition(id="agent", description="agent", tools=["echo"])],
        tools=[echo],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": NulProvider()}, store=store
    ) as env:
        result = await asyncio.wait_for(
            env.agents.run(build_request(entry_agent="agent", input="go")), 60
        )
        entries = store.load_entries("local", result.session_id)
        events = [e.event async for e in env.agents.events(result.run_id)]
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "done \ufffd here"
    # A tool result is JSON text: U+0000 in it is the escape ``\u0000``, which stores hold.
    assert [row.content for row in entries if row.role == "tool"] == ['"echo a\\u0000b"']
    deltas = "".join(e["content"] for e in events if e["type"] == "model_delta")
    assert "\x00" not in deltas and "\ufffd" in deltas


@pytest.mark.parametrize(
    ("fields", "field_name"),
    [
        ({"input": "a\x00b"}, "input"),
        ({"input": [{"role": "user", "content": "a\x00b"}]}, "input"),
        ({"input": "ok", "session": {"session_id": "s\x00"}}, "session.session_id"),
        ({"input": "ok", "metadata": {"note": "a\x00"}}, "metadata"),
    ],
)
def test_requests_with_nul_are_refused_naming_the_field(
    fields: dict[str, Any], field_name: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        build_request(entry_agent="agent", **fields)
    assert refused.value.field == field_name
    assert "NUL character (U+0000)" in refused.value.message


async def test_queued_messages_with_nul_are_refused_or_replaced(
    client: Client, task_queue: str, tmp_path: Path, store: Store
) -> None:
    """AgentClient refuses a message with NUL; one signalled by Temporal's own client is kept
    with U+FFFD (a signal cannot be refused), on both stores."""
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["first", "second"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}, store=store
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="hi"))
        await asyncio.wait_for(provider.started.wait(), 20)
        with pytest.raises(InvalidRequestError) as refused:
            await handle.send_message("bad\x00")
        await client.get_workflow_handle(handle.run_id).signal(
            SIGNAL_USER_MESSAGES, UserMessages(messages=("raw\x00signal",))
        )
        await handle.record()
        gate.set()
        result = await asyncio.wait_for(handle.result(), 60)
        entries = store.load_entries("local", result.session_id)
    assert refused.value.field == "messages.0"
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert ("user", "raw\ufffdsignal") in [(row.role, row.content) for row in entries]


async def test_cancel_ends_the_run_within_seconds_while_the_store_hangs_on_finish(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """finish_run is shielded from cancellation, but a cancelled run waits for it only for
    FINISH_GRACE: a store that hangs must not keep a cancelled run alive."""
    store = GateStore(f"sqlite:///{tmp_path / 'store.db'}", held="end_run")
    provider = RecordingProvider()
    provider.gate("agent", 1)  # the model "hangs" until the cancel
    config = scripted_config({"agent": ["never"]})
    try:
        async with agent_env(
            client, task_queue, config, tmp_path, providers={"scripted": provider}, store=store
        ) as env:
            handle = await env.agents.start(build_request(entry_agent="agent", input="wait"))
            await asyncio.wait_for(provider.started.wait(), 20)
            await handle.cancel()
            began = time.monotonic()
            result = await asyncio.wait_for(handle.result(), FINISH_GRACE.total_seconds() + 10)
            took = time.monotonic() - began
            assert store.entered.is_set()
    finally:
        store.release.set()
        store.close()
    assert result.outcome is RunOutcome.CANCELLED
    assert took < FINISH_GRACE.total_seconds() + 5


async def test_a_cancel_while_a_completed_runs_end_is_stored_leaves_it_completed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The run has answered; its end (completed) is being stored when the cancel arrives.
    Temporal refuses the workflow task that would complete the run (a new event came), and the
    run, taken again, sees the cancel first: it must still end completed, as stored (it used to
    return `cancelled` and overwrite the record while the events said `run_completed`)."""
    async with cancelled_while_held(client, task_queue, tmp_path, "end_run") as run:
        # The cancel is accepted (the server holds it while the workflow task that runs the
        # finish is open): the end's write may go on.
        run.store.release.set()
        result = await asyncio.wait_for(run.handle.result(), 30)
        events = [e async for e in run.env.agents.events(run.handle.run_id)]
        record = run.store.get_run_record(DEFAULT_PARTITION, run.handle.run_id)
    assert result.outcome is RunOutcome.COMPLETED
    assert result.output is not None and result.output.value == "done"
    assert record is not None and record.status is RunStatus.COMPLETED
    ends = [e.event["type"] for e in events if e.event["type"].startswith("run_")]
    assert ends == ["run_started", "run_completed"]


async def test_a_message_while_a_completed_runs_end_is_stored_leaves_the_stored_end(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A message arrives while the run's end (completed, "done") is being stored: Temporal
    refuses the workflow task that would complete the run, and the run, taken again, sees the
    message first and goes round once more. Its end stays the one stored: result, record and
    events all say "done" (the result used to say the later answer while the events said
    "done"); the turn for the message is refused before the model is called (it used to be
    answered after the stored end, invisibly: "later" in the session, no events), and the
    message stays in the session for the next run, as one that comes while a run ends."""
    store = GateStore(f"sqlite:///{tmp_path / 'store.db'}", held="end_run")
    config = scripted_config({"agent": ["done", "later"]})
    try:
        async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
            handle = await env.agents.start(build_request(entry_agent="agent", input="go"))
            assert await asyncio.to_thread(store.entered.wait, 20)
            await handle.send_message("a late message")
            store.release.set()
            result = await asyncio.wait_for(handle.result(), 30)
            events = [e async for e in env.agents.events(handle.run_id)]
            record = store.get_run_record(DEFAULT_PARTITION, handle.run_id)
            entries = store.load_entries(DEFAULT_PARTITION, result.session_id)
            history = await client.get_workflow_handle(handle.run_id).fetch_history()
    finally:
        store.release.set()
        store.close()
    assert result.outcome is RunOutcome.COMPLETED
    assert result.output is not None and result.output.value == "done"
    assert record is not None and record.output == result.output
    deltas = [e.event["content"] for e in events if e.event["type"] == "model_delta"]
    assert "".join(deltas) == "done"
    assert events[-1].event["type"] == "run_completed"
    assert [(row.role, row.content) for row in entries] == [
        ("user", "go"),
        ("assistant", "done"),
        ("user", "a late message"),
    ]
    refused = [
        event.activity_task_failed_event_attributes.failure
        for event in history.events
        if event.HasField("activity_task_failed_event_attributes")
    ]
    assert [failure.application_failure_info.type for failure in refused] == [RUN_ALREADY_ENDED]
    assert "had already ended (completed)" in refused[0].message


def has_error_end(store: Store, run_id: str) -> bool:
    return any(
        e.event["type"] == "model_completed" and e.event.get("error")
        for e in store.read_events(run_id, limit=10_000)
    )


async def test_an_answer_whose_write_commits_after_a_cancel_ends_its_attempt_once(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run is cancelled while the answer's write waits in its thread (held at a gate); the
    write then commits. The attempt has one end (the stored `model_completed`, not also a
    `cancelled` one) and no event is reported lost."""
    caplog.set_level(logging.INFO, logger="temporalio.activity")
    async with cancelled_while_held(
        client, task_queue, tmp_path, "append_entries_and_events"
    ) as run:
        # The attempt has taken the cancel: it says it waits for its write (or, were it not
        # to wait, it would store its `cancelled` end at once).
        await wait_until(
            lambda: (
                "cancelled during a store write" in caplog.text
                or has_error_end(run.store, run.handle.run_id)
            ),
            within=20,
            message="the cancel has reached the attempt during its write",
        )
        run.store.release.set()
        result = await asyncio.wait_for(run.handle.result(), 30)
        events = [e async for e in run.env.agents.events(run.handle.run_id)]
    assert result.outcome is RunOutcome.CANCELLED
    kinds = [(e.event["type"], e.event.get("error")) for e in events]
    assert [kind for kind in kinds if kind[0] == "model_completed"] == [("model_completed", None)]
    assert not any(kind == "events_lost" for kind, _ in kinds)
    assert unpaired(events) == []


async def test_a_stored_end_is_kept_when_handlers_outlive_the_finish_grace(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run's end is stored (completed) while a trusted call's update handler still waits
    for its child; a cancel then bounds that wait by FINISH_GRACE. The run ends as it was
    stored, and the log says the end was stored (not that it was not)."""
    provider = RecordingProvider()
    root_gate, worker_gate = provider.gate("root", 1), provider.gate("worker", 1)
    config = scripted_config(
        {"root": ["done"], "worker": ["worked"]},
        agents=[
            AgentDefinition(
                id="root", description="root agent", callable_agents=AccessPolicy.allow("worker")
            ),
            AgentDefinition(id="worker", description="worker agent"),
        ],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="root", input="wait"))
        await asyncio.wait_for(provider.started.wait(), 20)
        call = asyncio.create_task(
            env.agents.call_agent(
                handle.run_id, "slow", AgentCallRequest(target="worker", task="work")
            )
        )
        try:
            await wait_until(lambda: bool(provider.calls("worker")), message="the child's call")
            root_gate.set()
            await wait_until(
                lambda: any(
                    e.event["type"] == "run_completed" for e in env.store.read_events(handle.run_id)
                ),
                message="the root's stored end",
            )
            with caplog.at_level(logging.WARNING):
                await handle.cancel()
                result = await asyncio.wait_for(handle.result(), FINISH_GRACE.total_seconds() + 20)
        finally:
            worker_gate.set()
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.output is not None and result.output.value == "done"
    assert f"run {handle.run_id}: its end was stored" in caplog.text, caplog.text
    assert "was not stored" not in caplog.text


THINKING = ["I should look ", "the word up."]
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"  # what `anthropic_stream` signs its thinking with


def anthropic_thinking_check(seen: Seen) -> Reply:
    """The Messages API with extended thinking, as strict as Anthropic documents it: in a
    request that continues after tool use, the last assistant message must start with the
    thinking block of that turn, unmodified (text and signature)."""
    body = seen.body
    assert body.get("thinking", {}).get("type") == "enabled"
    assistants = [m for m in body["messages"] if m["role"] == "assistant"]
    if not assistants:
        return Reply(
            body=anthropic_stream([], [("toolu_01", "echo", ['{"text": "hi"}'])], thinking=THINKING)
        )
    first = assistants[-1]["content"][0]
    expected = {"type": "thinking", "thinking": "".join(THINKING), "signature": SIGNATURE}
    if first != expected:
        message = (
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            f"`{first.get('type')}`. When `thinking` is enabled, a final `assistant` message must "
            "start with a thinking block (preceeding the lastmost set of `tool_use` and "
            "`tool_result` blocks)."
        )
        if first.get("type") == "thinking":
            message = "messages.1.content.0: thinking block was modified: invalid signature"
        return Reply.error(
            400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        )
    return Reply(body=anthropic_stream(["The word is ", "hi."]))


async def test_anthropic_thinking_blocks_go_back_signed_after_tool_use(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTHERONE_TEST_THINKING_KEY", "sk-thinking")
    async with WireServer(anthropic_thinking_check) as server:
        profile = ModelProfile(
            id="claude",
            provider="anthropic",
            model="claude-sonnet-4-5",
            base_url=server.url,
            api_key_env="OTHERONE_TEST_THINKING_KEY",
            max_tokens=2048,
            other={"thinking": {"type": "enabled", "budget_tokens": 1024}},
        )
        config = RuntimeConfig(
            agents=[AgentDefinition(id="agent", description="agent", tools=["echo"])],
            models=[profile],
            tools=[echo],
        )
        async with agent_env(client, task_queue, config, tmp_path) as env:
            result = await asyncio.wait_for(
                env.agents.run(build_request(entry_agent="agent", input="Look it up")), 60
            )
            turn = await env.agents.get_run(result.run_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "The word is hi."
    assert len(server.requests) == 2 and turn.usage.model_calls == 2
    # Only the Anthropic request carries it: the neutral key never goes over the wire as such.
    assert "reasoning_blocks" not in json.dumps(server.requests[1].body)


SECRET = "secret-4f1c: do not log me"


async def test_a_store_that_refuses_a_write_fails_the_run_at_once_without_logging_user_data(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    store: Store,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A permanent driver error (here a constraint the database enforces) is not an outage:
    the run ends `storage_error` at once, the model is not called again, and no log line
    carries the statement's parameters (user data)."""
    refusing = RefusingStore(store.engine, marker=SECRET)
    provider = RecordingProvider()
    config = scripted_config({"agent": [f"the answer is {SECRET}"]})
    caplog.set_level(logging.INFO)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}, store=refusing
    ) as env:
        began = time.monotonic()
        result = await asyncio.wait_for(
            env.agents.run(build_request(entry_agent="agent", input="go")), 60
        )
        took = time.monotonic() - began
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.STORAGE_ERROR
    assert "IntegrityError" in result.failure.message or "NotNull" in result.failure.message
    assert SECRET not in result.failure.message
    assert len(provider.requests) == 1 and refusing.refused == 1
    assert took < 15
    assert SECRET not in caplog.text
    assert "store refused a write" in caplog.text


# --------------------------------------------------------------------------- event pairing

#: Start event type -> (end event types, the field that ties them).
PAIRS: dict[str, tuple[frozenset[str], str | None]] = {
    "run_started": (frozenset({"run_completed", "run_failed", "run_cancelled"}), None),
    "model_started": (frozenset({"model_completed"}), "attempt"),
    "tool_started": (frozenset({"tool_completed"}), "tool_call_id"),
    "agent_call_started": (frozenset({"agent_call_completed"}), "call_id"),
}


def unpaired(events: list[EventRecord]) -> list[str]:
    """Every started thing must have exactly one matching end, and no end comes unstarted."""
    opened: dict[tuple[str, str, str], int] = {}
    ended: dict[tuple[str, str, str], int] = {}
    for record in events:
        kind = record.event["type"]
        for start, (ends, field_name) in PAIRS.items():
            key_of = str(record.event.get(field_name)) if field_name else ""
            if field_name == "attempt":
                key_of = f"{record.event.get('turn')}/{record.event.get('attempt')}"
            key = (record.run_id, start, key_of)
            if kind == start:
                opened[key] = opened.get(key, 0) + 1
            elif kind in ends:
                ended[key] = ended.get(key, 0) + 1
    return [
        f"{run}: {start} {key}: {opened.get((run, start, key), 0)} started, "
        f"{ended.get((run, start, key), 0)} ended"
        for run, start, key in sorted(set(opened) | set(ended))
        if opened.get((run, start, key), 0) != 1 or ended.get((run, start, key), 0) != 1
    ]


def caller(**fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": "caller", "description": "calls", "callable_agents": ["worker"], **fields}
    )


def agent_calls(*ids: str) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"name": "agent.call", "id": i, "arguments": {"agent": "worker", "task": f"do {i}"}}
            for i in ids
        ]
    }


async def events_of(env: Any, run_id: str) -> list[EventRecord]:
    return [record async for record in env.agents.events(run_id)]


async def refused_everything(client: Client, task_queue: str, tmp: Path) -> list[EventRecord]:
    """A hallucinated tool, a malformed agent.call, and three calls of which one is refused by
    max_children_per_run and one by the tree's max_agent_calls (both after their check)."""
    first = {
        "tool_calls": [
            {"name": "no_such_tool", "arguments": {}},
            {"name": "agent.call", "arguments": {"agent": "worker"}},  # no task
            {"name": "echo", "arguments": {"text": "x"}},
        ]
    }
    config = scripted_config(
        {"caller": [first, agent_calls("a", "b", "c"), "done"], "worker": ["w"] * 3},
        agents=[
            caller(tools=["echo"], model_overrides=ModelOverrides(parallel_tool_calls=True)),
            AgentDefinition(id="worker", description="works"),
        ],
        tools=[echo],
        limits=RuntimeLimits(max_children_per_run=1, max_agent_calls=1),
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        result = await env.agents.run(build_request(entry_agent="caller", input="go"))
        assert result.outcome is RunOutcome.COMPLETED, result.failure
        return await events_of(env, result.run_id)


async def cancelled_mid_tools(client: Client, task_queue: str, tmp: Path) -> list[EventRecord]:
    started = asyncio.Event()
    lookup = tool_that_waits(started)
    calls = [{"name": "slow_lookup", "arguments": {"topic": t}} for t in "abc"]
    config = scripted_config(
        {"agent": [{"tool_calls": calls}]},
        agents=[
            AgentDefinition(
                id="agent",
                description="agent",
                tools=["slow_lookup"],
                model_overrides=ModelOverrides(parallel_tool_calls=True),
            )
        ],
        tools=[lookup],
        limits=RuntimeLimits(max_concurrent_tool_calls=1),  # two calls wait for a slot
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="go"))
        await asyncio.wait_for(started.wait(), 20)
        await handle.cancel()
        assert (await handle.result()).outcome is RunOutcome.CANCELLED
        return await events_of(env, handle.run_id)


async def cancelled_with_children(client: Client, task_queue: str, tmp: Path) -> list[EventRecord]:
    """Cancelled while a child's model call hangs, with a second (sequential) call left."""
    provider = RecordingProvider()
    provider.gate("worker", 1)  # never released
    config = scripted_config(
        {"caller": [agent_calls("a", "b")], "worker": ["never"]},
        agents=[caller(), AgentDefinition(id="worker", description="works")],
    )
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        handle = await env.agents.start(build_request(entry_agent="caller", input="go"))
        await asyncio.wait_for(provider.started.wait(), 20)
        await wait_until(lambda: len(provider.calls("worker")) == 1, message="child model call")
        await handle.cancel()
        assert (await handle.result()).outcome is RunOutcome.CANCELLED
        return await events_of(env, handle.run_id)


async def _over_the_tool_call_budget(
    client: Client, task_queue: str, tmp: Path, texts: list[str]
) -> list[EventRecord]:
    """A run ended by max_tool_calls (1) in a turn of one `echo` call per text, its calls
    unrun: the events of the run."""
    too_many = {"tool_calls": [{"name": "echo", "arguments": {"text": t}} for t in texts]}
    config = scripted_config(
        {"agent": [too_many]},
        agents=[AgentDefinition(id="agent", description="agent", tools=["echo"])],
        tools=[echo],
        limits=RuntimeLimits(max_tool_calls=1),
    )
    async with agent_env(client, task_queue, config, tmp) as env:
        run = env.agents.run(build_request(entry_agent="agent", input="go"))
        result = await asyncio.wait_for(run, 60)
        assert result.outcome is RunOutcome.BUDGET_EXCEEDED, result
        return await events_of(env, result.run_id)


async def failed_model_and_budget(client: Client, task_queue: str, tmp: Path) -> list[EventRecord]:
    """A run ended by max_tool_calls with its turn's calls unrun."""
    return await _over_the_tool_call_budget(client, task_queue, tmp, ["x", "y"])


async def budget_ends_a_turn_of_many_calls(
    client: Client, task_queue: str, tmp: Path
) -> list[EventRecord]:
    """A run ended by max_tool_calls in a turn of 1200 calls: its end owes an `IF_MISSING`
    start and end for each, and asks the store which are stored (SQLite refused the question
    as one statement: finish_run failed on every attempt)."""
    events = await _over_the_tool_call_budget(
        client, task_queue, tmp, [str(n) for n in range(1200)]
    )
    assert sum(e.event["type"] == "tool_completed" for e in events) == 1200
    return events


PAIRING_SCENARIOS = {
    "refused_everything": refused_everything,
    "cancelled_mid_tools": cancelled_mid_tools,
    "cancelled_with_children": cancelled_with_children,
    "budget_ends_the_turn": failed_model_and_budget,
    "budget_ends_a_turn_of_many_calls": budget_ends_a_turn_of_many_calls,
}


@pytest.mark.parametrize("scenario", sorted(PAIRING_SCENARIOS))
async def test_every_started_event_has_exactly_one_end(
    client: Client, task_queue: str, tmp_path: Path, scenario: str
) -> None:
    events = await PAIRING_SCENARIOS[scenario](client, task_queue, tmp_path)
    assert unpaired(events) == [], [(e.run_id[-12:], e.event) for e in events]
    kinds = {e.event["type"] for e in events}
    assert {"run_started", "tool_started"} <= kinds


async def test_a_cancelled_tool_stores_its_own_end_while_its_siblings_wait_for_a_slot(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The running call's activity is waited for although its siblings (waiting for a slot)
    are cancelled at once: its `tool_completed` ("cancelled") comes from the activity, before
    the run's end (asyncio.gather used to stop at the first cancelled sibling, and the run's
    end answered the running call itself, racing the activity's own events)."""
    events = await cancelled_mid_tools(client, task_queue, tmp_path)
    bodies = [e.event for e in events]
    ends = {b["tool_call_id"]: b for b in bodies if b["type"] == "tool_completed"}
    assert ends["call_1_0"]["error"] == "cancelled", bodies
    types = [b["type"] for b in bodies]
    assert bodies.index(ends["call_1_0"]) < types.index("run_cancelled"), bodies
    assert unpaired(events) == [], bodies


async def test_messages_over_the_queue_limit_are_refused_visibly(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """320 messages while the model answers: 256 wait in the queue, the 64 others are refused
    with a `user_messages_refused` event and a warning (they used to vanish silently)."""
    caplog.set_level(logging.WARNING)
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["first", "second"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="agent", input="hi"))
        await asyncio.wait_for(provider.started.wait(), 20)
        for batch in range(5):
            await handle.send_message([f"m{batch}-{n}" for n in range(64)])
        await handle.record()
        gate.set()
        result = await asyncio.wait_for(handle.result(), 60)
        events = [e.event async for e in env.agents.events(result.run_id)]
        entries = env.store.load_entries("local", result.session_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    queued = [row.content for row in entries if row.role == "user"][1:]
    assert len(queued) == MAX_QUEUED_MESSAGES and queued[-1] == "m3-63"
    refused = [e for e in events if e["type"] == "user_messages_refused"]
    assert sum(e["count"] for e in refused) == 64 and refused[0]["limit"] == 256
    assert "user message(s) refused" in caplog.text


@dataclass
class NoSummaries:
    """The scripted model, except that every summary (compaction) call fails for good."""

    inner: RecordingProvider = field(default_factory=RecordingProvider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if request.purpose == "summary":
            raise ProviderError("HTTP 400: the summary request was refused", retryable=False)
        async for event in self.inner.stream(request):
            yield event


async def test_a_failed_compaction_is_a_context_error(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    long_turn = {
        "text": "word " * 300,
        "tool_calls": [{"name": "echo", "arguments": {"text": "x"}}],
    }
    config = scripted_config(
        {"agent": [long_turn, long_turn, long_turn, "short"]},
        agents=[AgentDefinition(id="agent", description="agent", tools=["echo"])],
        tools=[echo],
    )
    providers = {"scripted": NoSummaries()}
    async with agent_env(client, task_queue, config, tmp_path, providers=providers) as env:
        result = await asyncio.wait_for(
            env.agents.run(
                build_request(entry_agent="agent", input="talk", session={"context_window": 1000})
            ),
            60,
        )
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None and result.failure.code is FailureCode.CONTEXT_ERROR
    assert "compaction" in result.failure.message and result.failure.retryable is False


async def test_session_busy_is_retryable(client: Client, task_queue: str, tmp_path: Path) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["first"]})
    providers = {"scripted": provider}
    async with agent_env(client, task_queue, config, tmp_path, providers=providers) as env:
        session = {"session_id": "shared"}
        first = await env.agents.start(
            build_request(entry_agent="agent", input="one", session=session)
        )
        await asyncio.wait_for(provider.started.wait(), 20)
        # A client without the store cannot refuse it beforehand: the run ends session_busy.
        blind = AgentClient(client, task_queue=task_queue)
        second = await asyncio.wait_for(
            blind.run(build_request(entry_agent="agent", input="two", session=session)), 30
        )
        gate.set()
        await first.result()
    assert second.outcome is RunOutcome.FAILED and second.failure is not None
    assert second.failure.code is FailureCode.SESSION_BUSY
    assert second.failure.retryable is True  # the seed's rule: the session frees itself


# --------------------------------------------------------------------------- refused starts


async def no_workflow(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as error:
        return error.status is RPCStatusCode.NOT_FOUND
    return False


async def test_unknown_agents_and_loose_limits_are_refused_before_a_workflow_starts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"agent": ["hi"]}, limits=RuntimeLimits(max_depth=2))
    agents = AgentClient(client, task_queue=task_queue, config=config)
    unknown = build_request(entry_agent="nobody", input="hi", idempotency_key="k-unknown")
    loose = build_request(
        entry_agent="agent", input="hi", limits={"max_depth": 5}, idempotency_key="k-loose"
    )
    with pytest.raises(InvalidRequestError) as refused_agent:
        await agents.start(unknown)
    with pytest.raises(InvalidRequestError) as refused_limits:
        await agents.start(loose)
    assert refused_agent.value.field == "entry_agent"
    assert "agent 'nobody' is not defined" in refused_agent.value.message
    assert refused_limits.value.field == "limits.max_depth"
    assert "only tighten" in refused_limits.value.message
    assert await no_workflow(client, root_run_id(unknown))
    assert await no_workflow(client, root_run_id(loose))


async def test_a_busy_session_refuses_the_start(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("agent", 1)
    config = scripted_config({"agent": ["first", "again"]})
    providers = {"scripted": provider}
    async with agent_env(client, task_queue, config, tmp_path, providers=providers) as env:
        session = {"session_id": "busy"}
        first_request = build_request(
            entry_agent="agent", input="one", session=session, idempotency_key="k-first"
        )
        first = await env.agents.start(first_request)
        await asyncio.wait_for(provider.started.wait(), 20)
        second = build_request(
            entry_agent="agent", input="two", session=session, idempotency_key="k-second"
        )
        with pytest.raises(SessionBusyError) as busy:
            await env.agents.start(second)
        # The same request again joins its own run (it holds the session): not busy.
        assert (await env.agents.start(first_request)).run_id == first.run_id
        gate.set()
        await first.result()
        later = await env.agents.run(second)  # free again: the refused key was never used
    assert busy.value.session_id == "busy" and busy.value.holder == first.run_id
    assert later.outcome is RunOutcome.COMPLETED


async def test_cli_refuses_an_unknown_agent_with_exit_2_and_starts_nothing(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    Store.open(env["OTHERONE_DATABASE_URL"]).close()  # the workers' store exists
    result = await otherone("run", "nobody", "hi", "--idempotency-key", "k-cli", env=env)
    assert_one_line_error(result, 2, "entry_agent", "not defined")
    request = build_request(entry_agent="nobody", input="hi", idempotency_key="k-cli")
    assert await no_workflow(client, root_run_id(request))


async def test_store_activities_have_a_bounded_total_time(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Retried store activities end within STORE_TOTAL_TIMEOUT in all (they used to retry for
    ever), so a store that stays broken ends the run `storage_error`."""
    config = scripted_config(
        {"caller": [agent_calls("a"), "done"], "worker": ["w"]},
        agents=[caller(), AgentDefinition(id="worker", description="works")],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="caller", input="go"))
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    bounds = {
        scheduled.activity_type.name: scheduled.schedule_to_close_timeout.ToSeconds()
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        for scheduled in [event.activity_task_scheduled_event_attributes]
    }
    total = STORE_TOTAL_TIMEOUT.total_seconds()
    assert result.outcome is RunOutcome.COMPLETED
    assert {name: bounds[name] for name in STORE_ACTIVITIES} == dict.fromkeys(
        STORE_ACTIVITIES, total
    )
    # prepare_run and finish_run run as local activities (markers, no timeouts in history):
    # their bound is `_store_activity`'s schedule_to_close_timeout, the same STORE_TOTAL_TIMEOUT.
    markers = [
        event
        for event in history.events
        if event.HasField("marker_recorded_event_attributes")
        and event.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    assert len(markers) == 2  # its prepare and its finish


STORE_ACTIVITIES = ("otherone.prepare_call",)


def test_watch_shows_lost_events_and_refused_messages() -> None:
    ev = Events()
    ev.add(ROOT, "agent", type="run_started")
    ev.add(ROOT, "agent", type="events_lost", count=7)
    ev.add(ROOT, "agent", type="user_messages_refused", count=3, limit=256)
    ev.add(ROOT, "agent", type="run_completed")
    state = fold(ev.records)
    notes = [activity.text for activity in state.activity]
    assert state.runs[ROOT].events_lost == 7
    assert "⚠ 7 event(s) lost (the store was unavailable)" in notes
    assert "⚠ 3 message(s) refused: the queue was full" in notes


async def test_temporal_cli_start_with_empty_input_ends_the_run(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`temporal workflow start --input '{}'`, as an operator would type it."""
    workflow_id = f"cli-raw-{uuid.uuid4().hex}"
    config = scripted_config({"agent": ["hi"]})
    async with agent_env(client, task_queue, config, tmp_path):
        process = await asyncio.create_subprocess_exec(
            str(find_temporal_binary()),
            "workflow",
            "start",
            "--address",
            address_of(temporal_env),
            "--task-queue",
            task_queue,
            "--type",
            WORKFLOW_NAME,
            "--workflow-id",
            workflow_id,
            "--input",
            "{}",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, output
        handle = client.get_workflow_handle(workflow_id, result_type=AgentRunResult)
        result = await asyncio.wait_for(handle.result(), 20)
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.INVALID_REQUEST
    assert "request: Field required" in result.failure.message


async def test_http_api_refuses_a_start_on_a_busy_session_with_409(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, api_config(), tmp_path) as api:
        # Another live run holds the session's writer lease (taken as prepare_run takes it):
        # live in Temporal too (a holder Temporal reports ended holds nothing), a workflow no
        # worker takes.
        holder = f"run-other-{uuid.uuid4().hex[:8]}"
        other = await client.start_workflow(
            WORKFLOW_NAME, {}, id=holder, task_queue=f"{task_queue}-nobody"
        )
        until = datetime.now(UTC) + timedelta(minutes=5)
        api.env.store.acquire_session("local", "held", holder, internal=False, lease_until=until)
        response = await api.http.post("/v1/runs", json=run_body(session={"session_id": "held"}))
        await other.terminate("the test ends")
    assert_problem(response, 409, "session_busy", "session.session_id")
    assert holder in response.json()["detail"]


PAID: list[str] = []


@tool(timeout_seconds=1)
def pay(order: str) -> str:
    """Pay an order (a side effect, then a receipt too big to travel inline)."""
    PAID.append(order)
    return "receipt " + "x" * 8192


async def test_a_tool_whose_result_store_write_waits_out_a_long_outage_runs_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The tool has done its work; storing its result meets a store that does not answer for
    longer than the tool's timeout + 30 s (what the activity's start-to-close timeout used to
    be). The attempt rides it out (heartbeating) instead of being timed out and retried: the
    payment is made once and the run completes (it used to pay twice, or, with one attempt,
    report a `tool_error` although the payment was made)."""
    PAID.clear()
    store = GateStore(
        f"sqlite:///{tmp_path / 'store.db'}", held="put_tool_result_and_events", bound=60
    )
    config = scripted_config(
        {"agent": [{"tool_calls": [{"name": "pay", "arguments": {"order": "o-1"}}]}, "paid"]},
        agents=[AgentDefinition(id="agent", description="pays", tools=AccessPolicy.allow("pay"))],
        tools=[pay],
    )
    try:
        async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
            handle = await env.agents.start(build_request(entry_agent="agent", input="pay"))
            assert await asyncio.to_thread(store.entered.wait, 20)
            began = time.monotonic()
            # The outage (the fault under test, not a wait for a condition): past the old
            # start-to-close timeout of 1 + 30 s.
            await asyncio.sleep(33)
            store.release.set()
            result = await asyncio.wait_for(handle.result(), 60)
            waited = time.monotonic() - began
    finally:
        store.release.set()
        store.close()
    assert waited > 31
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "paid"
    assert PAID == ["o-1"]


def test_an_update_cut_short_by_the_runs_end_says_the_run_ended() -> None:
    """A decision sent as the run closes (e.g. approve right after a deny ended it): Temporal
    answers NOT_FOUND "workflow update was aborted by closing workflow". The run exists: it is
    not active any more (409), not unknown (404, found by a user)."""
    aborted = RPCError(
        "workflow update was aborted by closing workflow", RPCStatusCode.NOT_FOUND, b""
    )
    assert isinstance(not_found_or(aborted, "r1", finished=True), RunNotActiveError)
    unknown = RPCError("workflow not found for ID: r1", RPCStatusCode.NOT_FOUND, b"")
    assert isinstance(not_found_or(unknown, "r1", finished=True), RunNotFoundError)
