"""Human in the loop: tool approvals and questions as durable waits (real Temporal, real store)."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import io
import json
import signal
import socket
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from otherone.activities.approvals import approval_needs
from otherone.client import agent_client, approval_requests
from otherone.client.agent_client import AgentClient, RunHandle, build_request
from otherone.client.console import EventPrinter
from otherone.client.watch import WatchState, render_tree
from otherone.contracts import (
    QUERY_APPROVALS,
    UPDATE_DECIDE_APPROVAL,
    ApprovalDecision,
    ApprovalNeed,
    ApprovalRequest,
    EventRecord,
    ToolCallSpec,
)
from otherone.definitions import AgentDefinition, ModelOverrides, RuntimeLimits, RuntimePolicy
from otherone.errors import (
    ApprovalConflictError,
    ApprovalNotAllowedError,
    ApprovalNotFoundError,
    ConfigurationError,
    FailureCode,
    InvalidRequestError,
    RunNotActiveError,
    RunNotFoundError,
    UnavailableError,
)
from otherone.runs import RunOutcome, RunStatus
from otherone.search_attributes import CUSTOM_SEARCH_ATTRIBUTES, STATUS
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.tools import ToolDefinitionError, tool
from otherone.worker.app import connect
from otherone.worker.devserver import DevServer, find_temporal_binary, free_port
from tests.harness import AgentEnv, agent_env, scripted_config, wait_until
from tests.processes import BackgroundProcess, worker_module
from tests.providers import RecordingProvider
from tests.test_cli import assert_one_line_error, cli_env, otherone

REPO_ROOT = Path(__file__).resolve().parent.parent
SENT: list[dict[str, Any]] = []


@tool(approval="always")
def send_email(to: str, body: str) -> str:
    """Send an email."""
    SENT.append({"to": to, "body": body})
    return f"sent to {to}"


@tool(approval=lambda args: args["amount"] > 100)
def pay(amount: int) -> str:
    """Pay an amount."""
    SENT.append({"paid": amount})
    return f"paid {amount}"


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    SENT.append({"lookup": key})
    return f"value of {key}"


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def agent(agent_id: str = "agent", **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


def events(store: Store, root: str, kind: str) -> list[dict[str, Any]]:
    return [
        {**record.event, "run_id": record.run_id}
        for record in store.read_events(root, limit=10_000)
        if record.event["type"] == kind
    ]


async def open_requests(agents: AgentClient, root: str, count: int = 1) -> list[ApprovalRequest]:
    """Wait until the root's tree lists ``count`` open requests (visibility lags a little)."""
    found: list[ApprovalRequest] = []

    async def listed() -> bool:
        nonlocal found
        found = await agents.pending_approvals(root)
        return len(found) >= count

    await wait_until(listed, within=20, message=f"{count} open approval request(s)")
    return found


def tool_messages(provider: RecordingProvider) -> list[dict[str, Any]]:
    """The tool results the model read on its last call."""
    last = provider.requests[-1]
    return [message for message in last.messages if message.get("role") == "tool"]


def one_waiting_call() -> Any:
    """An agent whose first turn's `send_email` call waits for a person (and never ends)."""
    return scripted_config(
        {"agent": [{"tool_calls": [call("send_email", "mail", to="a", body="b")]}, "never"]},
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
    )


def two_mails(first: tuple[str, str], second: tuple[str, str]) -> Any:
    """An agent whose two turns each call `send_email` (call id, body), then answer "done"."""
    turns = [
        {"tool_calls": [call("send_email", cid, to="a", body=body)]}
        for cid, body in (first, second)
    ]
    return scripted_config(
        {"agent": [*turns, "done"]},
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
    )


async def start(env: AgentEnv, text: str = "go") -> RunHandle:
    return await env.agents.start(build_request(entry_agent="agent", input=text))


# --------------------------------------------------------------------------- decisions


async def test_a_tool_waits_for_approval_and_runs_once_approved(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    config = scripted_config(
        {"agent": [{"tool_calls": [call("send_email", "mail", to="bob", body="hi")]}, "sent"]},
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await start(env)
        [request] = await open_requests(env.agents, handle.run_id)
        assert (request.run_id, request.call_id, request.tool_name) == (
            handle.run_id,
            "mail",
            "send_email",
        )
        assert json.loads(request.arguments) == {"to": "bob", "body": "hi"}
        assert (await handle.record()).status is RunStatus.WAITING_FOR_APPROVAL
        workflow = client.get_workflow_handle(handle.run_id)
        described = await workflow.describe()
        assert described.typed_search_attributes.get(STATUS) == "waiting_for_approval"
        metadata = await workflow.query("__temporal_workflow_metadata")
        assert "send_email" in str(metadata)  # the Web UI's "current details"
        assert "decision on a tool call" in str(metadata)  # the update's description
        assert SENT == []  # nothing ran while waiting

        decided = await env.agents.approve(handle.run_id, "mail")
        assert decided.decision is not None and decided.decision.decision == "approved"
        result = await handle.result()

        assert result.outcome is RunOutcome.COMPLETED and result.text == "sent"
        assert SENT == [{"to": "bob", "body": "hi"}]
        assert result.usage.tool_calls == 1 and result.usage.model_calls == 2
        [requested] = events(env.store, handle.run_id, "approval_requested")
        assert requested["call_id"] == "mail" and requested["tool_name"] == "send_email"
        [audit] = events(env.store, handle.run_id, "approval_decided")
        assert audit["decision"] == "approved"
        assert audit["decided_by"] == client.identity  # the client's identity, not the model's
        assert await env.agents.pending_approvals(handle.run_id) == []


async def test_approval_with_edited_arguments_runs_the_edit_and_bad_edits_are_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    config = scripted_config(
        {"agent": [{"tool_calls": [call("send_email", "mail", to="all", body="hi")]}, "sent"]},
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await start(env)
        await open_requests(env.agents, handle.run_id)
        with pytest.raises(InvalidRequestError) as bad:
            await env.agents.approve(handle.run_id, "mail", {"to": 3})
        assert bad.value.field == "arguments" and "body" in bad.value.message
        with pytest.raises(InvalidRequestError) as deny_args:
            await env.agents.deny(handle.run_id, "mail", "")
        assert deny_args.value.field == "reason"
        assert len(await env.agents.pending_approvals(handle.run_id)) == 1  # still open

        await env.agents.approve(handle.run_id, "mail", {"to": "bob", "body": "edited"})
        result = await handle.result()
    assert result.outcome is RunOutcome.COMPLETED
    assert SENT == [{"to": "bob", "body": "edited"}]
    [audit] = events(env.store, handle.run_id, "approval_decided")
    assert json.loads(audit["arguments"]) == {"to": "bob", "body": "edited"}


async def test_a_denial_reaches_the_model_as_a_structured_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    provider = RecordingProvider()
    config = scripted_config(
        {"agent": [{"tool_calls": [call("send_email", "mail", to="all", body="x")]}, "ok"]},
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await start(env)
        await open_requests(env.agents, handle.run_id)
        await env.agents.deny(handle.run_id, "mail", "not to everyone")
        result = await handle.result()
    assert result.outcome is RunOutcome.COMPLETED
    assert SENT == []
    [message] = tool_messages(provider)
    body = json.loads(message["content"])
    assert body["status"] == "denied" and body["reason"] == "not to everyone"
    assert_denied_events(env.store, result.run_id, "mail", "denied")


def assert_denied_events(store: Store, run_id: str, call_id: str, decision: str) -> None:
    """A call nobody let run has one `tool_denied` and no start (a consumer counting
    `tool_started` counted it as run), in the store and as `otherone watch` shows it."""
    mine = [r for r in store.read_events(run_id) if r.event.get("tool_call_id") == call_id]
    assert [r.event["type"] for r in mine] == ["tool_denied"]
    [denied] = mine
    assert denied.event["decision"] == decision and denied.event["tool_name"] == "send_email"
    assert "nothing was executed" in denied.event["error"]
    state = WatchState(run_id)
    printed = io.StringIO()
    printer = EventPrinter(run_id, io.StringIO(), Console(file=printed, width=200))
    for record in store.read_events(run_id):
        state.apply(record)
        printer.handle(record)
    assert state.root is not None and state.root.tool_calls == 1  # as the run's usage counts
    how = "denied" if decision == "denied" else "not decided in time"
    line = f"⊘ send_email {how}: nothing was executed"
    assert line in [item.text for item in state.activity]
    assert line in printed.getvalue()


@pytest.mark.parametrize("effect", ["deny", "fail"])
async def test_an_approval_timeout_denies_or_fails_the_run(
    client: Client, task_queue: str, tmp_path: Path, effect: str
) -> None:
    SENT.clear()
    provider = RecordingProvider()
    rule = {"mode": "always", "timeout": 1, "on_timeout": effect}
    config = scripted_config(
        {"agent": [{"tool_calls": [call("lookup", "look", key="k")]}, "gave up"]},
        agents=[agent(tools=["lookup"], approval={"lookup": rule})],
        tools=[lookup],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
    assert SENT == []
    [audit] = events(env.store, result.run_id, "approval_decided")
    assert audit["decision"] == "timed_out"
    if effect == "deny":
        assert result.outcome is RunOutcome.COMPLETED and result.text == "gave up"
        [message] = tool_messages(provider)
        assert json.loads(message["content"])["status"] == "timed_out"
        [denied] = events(env.store, result.run_id, "tool_denied")
        assert (denied["tool_call_id"], denied["decision"]) == ("look", "timed_out")
        assert events(env.store, result.run_id, "tool_started") == []
    else:
        assert result.outcome is RunOutcome.FAILED
        assert result.failure is not None
        assert result.failure.code is FailureCode.APPROVAL_TIMED_OUT


async def test_the_run_deadline_ends_a_wait_nobody_answers(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"agent": [{"tool_calls": [call("send_email", "mail", to="a", body="b")]}, "never"]},
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
        limits=RuntimeLimits(run_timeout=timedelta(seconds=3)),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
    assert result.outcome is RunOutcome.TIMED_OUT
    assert events(env.store, result.run_id, "approval_requested") != []


async def test_cancelling_a_waiting_run_ends_it_cancelled(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = one_waiting_call()
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await start(env)
        await open_requests(env.agents, handle.run_id)
        await handle.cancel()
        result = await handle.result()
        assert result.outcome is RunOutcome.CANCELLED
        with pytest.raises(RunNotActiveError):
            await env.agents.approve(handle.run_id, "mail")


async def test_a_waiting_run_terminated_from_outside_is_not_listed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Terminated, a run keeps its last `OtheroneStatus` (nothing of ours ran to change it):
    its requests can never be decided, so they are not listed (a user found them listed, and
    `approve` then refused)."""
    config = one_waiting_call()
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await start(env)
        await open_requests(env.agents, handle.run_id)
        await client.get_workflow_handle(handle.run_id).terminate("by hand")

        async def unlisted() -> bool:
            return await env.agents.pending_approvals(handle.run_id) == []

        await wait_until(unlisted, within=20, message="the terminated run's request unlisted")


async def test_a_mixed_turn_runs_plain_calls_at_once_and_keeps_tool_call_order(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    provider = RecordingProvider()
    turn = {
        "tool_calls": [
            call("send_email", "first", to="a", body="1"),
            call("lookup", "plain", key="k"),
            call("pay", "big", amount=500),
            call("pay", "small", amount=5),
        ]
    }
    config = scripted_config(
        {"agent": [turn, "done"]},
        agents=[
            agent(
                tools=["send_email", "lookup", "pay"],
                model_overrides=ModelOverrides(parallel_tool_calls=True),
            )
        ],
        tools=[send_email, lookup, pay],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await start(env)
        pending = await open_requests(env.agents, handle.run_id, count=2)
        assert sorted(request.call_id for request in pending) == ["big", "first"]
        await wait_until(lambda: len(SENT) == 2, message="the calls that need nobody")
        assert {"lookup": "k"} in SENT and {"paid": 5} in SENT
        await env.agents.deny(handle.run_id, "big", "too much")
        await env.agents.approve(handle.run_id, "first")
        result = await handle.result()
    assert result.outcome is RunOutcome.COMPLETED
    assert {"to": "a", "body": "1"} in SENT and {"paid": 500} not in SENT
    messages = tool_messages(provider)
    assert [message["tool_call_id"] for message in messages] == ["first", "plain", "big", "small"]
    assert json.loads(messages[2]["content"])["status"] == "denied"


async def test_a_sequential_turn_runs_plain_calls_before_the_waiting_ones(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    turn = {
        "tool_calls": [call("send_email", "mail", to="a", body="1"), call("lookup", "k", key="k")]
    }
    config = scripted_config(
        {"agent": [turn, "done"]},
        agents=[agent(tools=["send_email", "lookup"])],
        tools=[send_email, lookup],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await start(env)
        await open_requests(env.agents, handle.run_id)
        await wait_until(lambda: SENT == [{"lookup": "k"}], message="the plain call")
        await env.agents.approve(handle.run_id, "mail")
        assert (await handle.result()).outcome is RunOutcome.COMPLETED
    assert SENT == [{"lookup": "k"}, {"to": "a", "body": "1"}]


async def test_an_approval_deep_in_a_tree_is_listed_and_decided_from_the_root(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    config = scripted_config(
        {
            "boss": [
                {"tool_calls": [call("agent.call", "ask", agent="worker", task="mail bob")]},
                "boss done",
            ],
            "worker": [{"tool_calls": [call("send_email", "mail", to="bob", body="x")]}, "sent"],
        },
        agents=[agent("boss", callable_agents=["worker"]), agent("worker", tools=["send_email"])],
        tools=[send_email],
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))
        [request] = await open_requests(env.agents, handle.run_id)
        assert request.run_id == f"{handle.run_id}/worker.ask" and request.agent_id == "worker"
        assert request.root_run_id == handle.run_id
        # Without a store, the runs themselves are asked: the same answer.
        bare = AgentClient(client, task_queue=task_queue)
        assert [r.call_id for r in await bare.pending_approvals(handle.run_id)] == ["mail"]
        other_tenant = AgentClient(client, task_queue=task_queue, partition_key="other")
        with pytest.raises(RunNotFoundError):
            await other_tenant.pending_approvals(handle.run_id)
        with pytest.raises(RunNotFoundError):
            await other_tenant.approve(request.run_id, request.call_id)
        await env.agents.approve(request.run_id, request.call_id)
        result = await handle.result()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "boss done"
    assert SENT == [{"to": "bob", "body": "x"}]


async def test_a_call_of_a_child_is_decided_with_the_root_id_when_unique_in_the_tree(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`otherone approve ROOT CALL` for a call a child waits on was refused ("run ROOT has no
    approval request"): it is decided in the one run of the tree that waits on it (the answer
    names that run); when several do (providers number calls per turn), the refusal names them."""
    SENT.clear()
    config = scripted_config(
        {
            "boss": [
                {
                    "tool_calls": [
                        call("agent.call", "one", agent="first", task="mail"),
                        call("agent.call", "two", agent="second", task="mail"),
                    ]
                },
                "boss done",
            ],
            "first": [{"tool_calls": [call("send_email", "mail", to="a", body="1")]}, "sent"],
            "second": [{"tool_calls": [call("send_email", "mail", to="b", body="2")]}, "sent"],
        },
        agents=[
            agent(
                "boss",
                callable_agents=["first", "second"],
                model_overrides=ModelOverrides(parallel_tool_calls=True),
            ),
            agent("first", tools=["send_email"]),
            agent("second", tools=["send_email"]),
        ],
        tools=[send_email],
    )
    env = cli_env(temporal_env.client.service_client.config.target_host, task_queue, tmp_path)
    async with agent_env(client, task_queue, config, tmp_path) as agents_env:
        agents = agents_env.agents
        handle = await agents.start(build_request(entry_agent="boss", input="go"))
        root = handle.run_id
        first, second = sorted(r.run_id for r in await open_requests(agents, root, count=2))
        with pytest.raises(ApprovalNotFoundError) as ambiguous:
            await agents.approve(root, "mail")
        assert ambiguous.value.waiting_in == (first, second)
        assert f"runs '{first}', '{second}' of its tree wait on a call 'mail'" in str(
            ambiguous.value
        )
        await agents.approve(first, "mail")
        approved = await otherone("approve", root, "mail", env=env)
        assert approved.code == 0, approved.describe()
        assert f"call mail (send_email) of run {second}: approved by" in approved.stderr
        with pytest.raises(ApprovalNotFoundError):
            await agents.approve(root, "nothing")  # no run of the tree waits on it
        result = await handle.result()
    assert result.outcome is RunOutcome.COMPLETED and result.text == "boss done"
    assert sorted(mail["body"] for mail in SENT) == ["1", "2"]


async def test_decisions_are_idempotent_conflicts_and_unknown_calls_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    config = two_mails(("mail", "b"), ("again", "c"))
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await start(env)
        await open_requests(env.agents, handle.run_id)
        with pytest.raises(ApprovalNotFoundError):
            await env.agents.approve(handle.run_id, "no-such-call")
        # To a plain Temporal client the refusal says it is final (a generic retry is no use).
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await client.get_workflow_handle(handle.run_id).execute_update(
                UPDATE_DECIDE_APPROVAL,
                ApprovalDecision(call_id="no-such-call", decision="approve", identity="me"),
            )
        assert isinstance(refused.value.cause, ApplicationError)
        assert refused.value.cause.non_retryable
        first, second = await asyncio.gather(
            env.agents.approve(handle.run_id, "mail"), env.agents.approve(handle.run_id, "mail")
        )
        assert first == second
        with pytest.raises(ApprovalConflictError, match="already approved"):
            await env.agents.deny(handle.run_id, "mail", "changed my mind")
        await open_requests(env.agents, handle.run_id)  # the second turn's request
        assert (await env.agents.approve(handle.run_id, "mail")) == first  # still idempotent
        await env.agents.deny(handle.run_id, "again", "enough")
        result = await handle.result()
        assert result.outcome is RunOutcome.COMPLETED
        with pytest.raises(RunNotActiveError):
            await env.agents.approve(handle.run_id, "again")
    assert SENT == [{"to": "a", "body": "b"}]
    assert len(events(env.store, handle.run_id, "approval_decided")) == 2


async def test_a_call_id_repeated_in_a_later_turn_is_asked_and_decided_again(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A provider may repeat a call id in a later turn (the same call: the same idempotency
    key); its new request takes a new decision instead of being answered with the old one."""
    SENT.clear()
    config = two_mails(("mail", "first"), ("mail", "second"))
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await start(env)
        await open_requests(env.agents, handle.run_id)
        first = await env.agents.approve(handle.run_id, "mail")
        assert first.arguments is not None and "first" in first.arguments

        async def second_request_open() -> bool:
            waiting = await env.agents.pending_approvals(handle.run_id)
            return any(r.arguments is not None and "second" in r.arguments for r in waiting)

        await wait_until(second_request_open, within=20, message="the repeated call's request")
        second = await asyncio.wait_for(env.agents.approve(handle.run_id, "mail"), 20)
        assert second.arguments is not None and "second" in second.arguments
        assert second.decision is not None and second.decision.decision == "approved"
        result = await asyncio.wait_for(handle.result(), 20)
    assert result.outcome is RunOutcome.COMPLETED and result.text == "done"
    assert SENT == [{"to": "a", "body": "first"}, {"to": "a", "body": "second"}]
    assert len(events(env.store, handle.run_id, "approval_decided")) == 2


# --------------------------------------------------------------------------- questions


async def test_human_ask_waits_for_the_answer_which_becomes_the_tool_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {
            "agent": [
                {"tool_calls": [call("human.ask", "q", question="Which city?")]},
                "Paris it is",
            ]
        },
        agents=[agent(ask_human=True)],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await start(env)
        [request] = await open_requests(env.agents, handle.run_id)
        offered = [tool["function"]["name"] for tool in provider.requests[0].tools]
        assert offered == ["human.ask"]
        assert request.kind == "question" and request.question == "Which city?"
        with pytest.raises(InvalidRequestError):
            await env.agents.approve(handle.run_id, "q")  # a question wants an answer
        await env.agents.answer(handle.run_id, "q", "Paris")
        result = await handle.result()
    assert result.text == "Paris it is"
    [message] = tool_messages(provider)
    assert json.loads(message["content"])["answer"] == "Paris"
    # A tool call like any: its start and end (AG-UI's TOOL_CALL_* too; a user found none).
    ends = [e["type"] for e in events(env.store, handle.run_id, "tool_started")]
    ends += [e["type"] for e in events(env.store, handle.run_id, "tool_completed")]
    assert ends == ["tool_started", "tool_completed"]


async def test_human_ask_is_refused_when_the_agent_does_not_offer_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"agent": [{"tool_calls": [call("human.ask", "q", question="?")]}, "ok"]},
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="go"))
    assert result.outcome is RunOutcome.COMPLETED
    assert events(env.store, result.run_id, "approval_requested") == []


# --------------------------------------------------------------------------- durability


async def test_a_wait_spans_continue_as_new_with_decisions_carried(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    config = scripted_config(
        {
            "agent": [
                {"tool_calls": [call("send_email", "one", to="a", body="1")]},
                {"tool_calls": [call("send_email", "two", to="a", body="2")]},
                "done",
            ]
        },
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
        policy=RuntimePolicy(continue_as_new_after_turns=1),
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await start(env)
        await open_requests(env.agents, handle.run_id)
        first = await env.agents.approve(handle.run_id, "one")
        workflow = client.get_workflow_handle(handle.run_id)

        async def second_history_waits() -> bool:
            description = await workflow.describe()
            info = description.raw_description.workflow_execution_info
            pending = await env.agents.pending_approvals(handle.run_id)
            return info.first_run_id != description.run_id and [r.call_id for r in pending] == [
                "two"
            ]

        await wait_until(second_history_waits, within=20, message="the next history's request")
        assert await env.agents.approve(handle.run_id, "one") == first  # carried over
        await env.agents.approve(handle.run_id, "two")
        result = await handle.result()
    assert result.outcome is RunOutcome.COMPLETED
    assert SENT == [{"to": "a", "body": "1"}, {"to": "a", "body": "2"}]


# --------------------------------------------------------------------------- declarations


def needs_of(
    agents: list[AgentDefinition],
    calls: list[dict[str, Any]],
    *,
    policy: RuntimePolicy | None = None,
    agent_id: str = "agent",
) -> dict[str, ApprovalNeed]:
    config = scripted_config(
        {agent_id: ["x"]}, agents=agents, tools=[send_email, pay, lookup], policy=policy
    )
    snapshot = config.snapshot()
    specs = {spec.name: spec for spec in config.tools}
    specs_calls = tuple(
        ToolCallSpec(id=c["id"], name=c["name"], arguments=json.dumps(c["arguments"]))
        for c in calls
    )
    found = approval_needs(snapshot, snapshot.agent(agent_id), specs, specs_calls)
    return {need.call_id: need for need in found}


ALL_TOOLS = ["send_email", "pay", "lookup"]


def test_tool_rules_predicates_and_agent_overrides() -> None:
    calls = [
        call("send_email", "mail", to="a", body="b"),
        call("pay", "small", amount=5),
        call("pay", "big", amount=500),
        call("pay", "broken", amount="lots"),
        call("lookup", "plain", key="k"),
    ]
    assert set(needs_of([agent(tools=ALL_TOOLS)], calls)) == {"mail", "big"}
    # The agent's own rules win over the tools' (never / always), with their settings.
    overridden = needs_of(
        [
            agent(
                tools=ALL_TOOLS,
                approval={
                    "send_email": "never",
                    "lookup": {"timeout": "PT1H", "on_timeout": "fail", "approvers": ["ops"]},
                },
            )
        ],
        calls,
    )
    assert set(overridden) == {"big", "plain"}
    assert overridden["plain"].timeout is not None
    assert overridden["plain"].timeout.total_seconds() == 3600
    assert (overridden["plain"].on_timeout, overridden["plain"].approvers) == ("fail", ("ops",))


def test_the_policy_forces_approval_across_agents_and_calls_to_agents_can_need_it() -> None:
    agents = [
        agent(tools=ALL_TOOLS, approval={"lookup": "never"}, callable_agents=["helper", "other"]),
        agent("helper"),
        agent("other"),
    ]
    calls = [
        call("lookup", "plain", key="k"),
        call("agent.call", "to-helper", agent="helper", task="t"),
        call("agent.call", "to-other", agent="other", task="t"),
    ]
    forced = needs_of(
        agents,
        calls,
        policy=RuntimePolicy(approval={"lookup": "always", "agent.call:helper": "always"}),
    )
    assert set(forced) == {"plain", "to-helper"}
    every_call = needs_of(agents, calls, policy=RuntimePolicy(approval={"agent.call": "always"}))
    assert set(every_call) == {"to-helper", "to-other"}


def test_approval_rules_in_otherone_toml_and_their_errors(tmp_path: Path) -> None:
    tools = tmp_path / "approval_tools.py"
    tools.write_text(
        "from otherone.tools import tool\n\n"
        "@tool\ndef send_email(to: str) -> str:\n    '''Send.'''\n    return to\n"
    )
    text = """
[runtime]
tools = ["approval_tools:send_email"]
[models.m]
provider = "scripted"
model = "x"
[agents.mailer]
description = "mails"
system_prompt = "You send mail."
tools = ["send_email"]
ask_human = true
approval = { send_email = "always", "human.ask" = { timeout = 60 } }
[policy]
approval = { send_email = { mode = "always", on_timeout = "fail" } }
"""
    path = tmp_path / "otherone.toml"
    path.write_text(text)
    config = load_config(path)
    mailer = config.agents["mailer"]
    assert mailer.ask_human and mailer.approval["send_email"].mode == "always"
    assert config.policy.approval["send_email"].on_timeout == "fail"
    path.write_text(text.replace('send_email = "always"', 'send_mail = "always"'))
    with pytest.raises(ConfigurationError) as unknown:
        load_config(path)
    assert unknown.value.field == "approval.send_mail"
    path.write_text(text.replace('send_email = "always"', 'send_email = "sometimes"'))
    with pytest.raises(ConfigurationError) as bad_mode:
        load_config(path)
    assert bad_mode.value.field is not None and "approval.send_email" in bad_mode.value.field


def test_a_bad_tool_approval_declaration_is_a_definition_error() -> None:
    def noop() -> None:
        """Nothing."""

    with pytest.raises(ToolDefinitionError, match="approval must be"):
        tool(approval="maybe")(noop)  # type: ignore[call-overload]
    with pytest.raises(ToolDefinitionError, match="approval_timeout_seconds"):
        tool(approval="always", approval_timeout_seconds=0)(noop)


# --------------------------------------------------------------------------- crashes and time


def approval_worker(
    address: str, task_queue: str, store_url: str, workdir: Path
) -> contextlib.AbstractAsyncContextManager[BackgroundProcess]:
    """`tests.approval_worker` in its own process, ready to poll; killed when the block ends."""
    return worker_module("tests.approval_worker", address, task_queue, store_url, workdir)


@pytest.mark.timeout(180)
async def test_a_waiting_run_survives_sigkill_and_takes_a_decision_sent_while_no_worker_runs(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    address = temporal_env.client.service_client.config.target_host
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store.open(store_url)
    agents = AgentClient(client, task_queue=task_queue, store=store)
    try:
        async with approval_worker(address, task_queue, store_url, tmp_path) as first:
            handle = await agents.start(build_request(entry_agent="mailer", input="mail bob"))
            await open_requests(agents, handle.run_id)
            first.send_signal(signal.SIGKILL)
            await first.exit_code()
        # No worker: the decision is sent now and applied when a worker comes back.
        decision = asyncio.create_task(agents.approve(handle.run_id, "mail"))
        assert await agents.pending_approvals(handle.run_id) != []
        async with approval_worker(address, task_queue, store_url, tmp_path):
            decided = await asyncio.wait_for(decision, 60)
            result = await asyncio.wait_for(handle.result(), 60)
    finally:
        store.close()
    assert decided.decision is not None and decided.decision.decision == "approved"
    assert result.outcome is RunOutcome.COMPLETED and result.text == "mailed"
    assert (tmp_path / "sent").read_text() == "bob\n"  # once


async def test_a_week_long_wait_in_the_time_skipping_server(tmp_path: Path) -> None:
    """A person answers after six days; the run's deadline (a week) still holds."""
    SENT.clear()
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(Path(sys.executable).parent / "temporal-test-server"),
        data_converter=pydantic_data_converter,
    )
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={
                key.name: IndexedValueType.ValueType(key.indexed_value_type)
                for key in CUSTOM_SEARCH_ATTRIBUTES
            },
        )
    )
    config = scripted_config(
        {"agent": [{"tool_calls": [call("send_email", "mail", to="a", body="b")]}, "done"]},
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
        limits=RuntimeLimits(run_timeout=timedelta(days=7), root_timeout=timedelta(days=7)),
    )
    try:
        async with agent_env(env.client, "week", config, tmp_path) as agents_env:
            handle = await start(agents_env)
            await open_requests_by_query(agents_env, handle.run_id)
            await env.sleep(timedelta(days=6))
            await agents_env.agents.approve(handle.run_id, "mail")
            result = await handle.result()
    finally:
        await env.shutdown()
    assert result.outcome is RunOutcome.COMPLETED
    assert result.usage.duration_millis >= timedelta(days=6).total_seconds() * 1000
    assert SENT == [{"to": "a", "body": "b"}]


async def open_requests_by_query(env: AgentEnv, run_id: str) -> None:
    """The run's own list (the time-skipping server has no advanced visibility)."""

    async def waiting() -> bool:
        requests = await env.agents.temporal.get_workflow_handle(run_id).query(
            QUERY_APPROVALS, result_type=tuple[ApprovalRequest, ...]
        )
        return any(request.is_open for request in requests)

    await wait_until(waiting, within=30, message="an open request")


async def test_the_temporal_cli_decides_with_the_documented_update(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {"agent": [{"tool_calls": [call("send_email", "mail", to="a", body="b")]}, "ok"]},
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
    )
    address = temporal_env.client.service_client.config.target_host
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await start(env)
        await open_requests(env.agents, handle.run_id)
        decision = {"call_id": "mail", "decision": "deny", "reason": "cli", "identity": "alice"}
        base = [str(find_temporal_binary()), "workflow"]
        where = ["--address", address, "--workflow-id", handle.run_id]
        update = await asyncio.create_subprocess_exec(
            *base, "update", "execute", *where, "--name", "decide_approval",
            "--input", json.dumps(decision),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        output, _ = await asyncio.wait_for(update.communicate(), 60)
        assert update.returncode == 0, output.decode()
        assert "denied" in output.decode()
        result = await handle.result()
        query = await asyncio.create_subprocess_exec(
            *base, "query", *where, "--name", "approvals", stdout=asyncio.subprocess.PIPE
        )
        listed, _ = await asyncio.wait_for(query.communicate(), 60)
    assert result.outcome is RunOutcome.COMPLETED
    assert json.loads(tool_messages(provider)[0]["content"])["reason"] == "cli"
    assert '"decided_by": "alice"' in listed.decode().replace('":"', '": "')
    [audit] = events(env.store, handle.run_id, "approval_decided")
    assert audit["decided_by"] == "alice"


async def test_an_agent_call_can_wait_for_approval_and_run_with_an_edited_task(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = scripted_config(
        {
            "boss": [
                {"tool_calls": [call("agent.call", "hire", agent="helper", task="delete all")]},
                "boss done",
            ],
            "helper": ["helped"],
        },
        agents=[
            agent("boss", callable_agents=["helper"], approval={"agent.call:helper": "always"}),
            agent("helper"),
        ],
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="boss", input="go"))
        [request] = await open_requests(env.agents, handle.run_id)
        assert request.tool_name == "agent.call"
        with pytest.raises(InvalidRequestError) as bad:
            await env.agents.approve(handle.run_id, "hire", {"agent": "helper"})
        assert bad.value.field == "arguments"
        await env.agents.approve(handle.run_id, "hire", {"agent": "helper", "task": "tidy up"})
        result = await handle.result()
    assert result.outcome is RunOutcome.COMPLETED
    [child_request] = provider.calls("helper")
    assert "tidy up" in json.dumps(child_request.messages)
    assert "delete all" not in json.dumps(child_request.messages)


async def test_only_the_named_approvers_may_decide_and_lifecycle_only_runs_still_list(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    rule = {"approvers": ["alice"]}
    config = scripted_config(
        {
            "boss": [
                {"tool_calls": [call("agent.call", "ask", agent="worker", task="mail")]},
                "done",
            ],
            "worker": [{"tool_calls": [call("send_email", "mail", to="a", body="b")]}, "sent"],
        },
        agents=[
            agent("boss", callable_agents=["worker"]),
            agent("worker", tools=["send_email"], approval={"send_email": rule}),
        ],
        tools=[send_email],
    )
    alice_client = await Client.connect(
        temporal_env.client.service_client.config.target_host,
        identity="alice",
        data_converter=pydantic_data_converter,
    )
    async with agent_env(client, task_queue, config, tmp_path) as env:
        handle = await env.agents.start(
            build_request(entry_agent="boss", input="go", event_visibility="root_only")
        )
        [request] = await open_requests(env.agents, handle.run_id)
        assert request.approvers == ("alice",)
        with pytest.raises(ApprovalNotAllowedError, match="may not decide"):
            await env.agents.approve(request.run_id, "mail")
        alice = AgentClient(alice_client, task_queue=task_queue, store=env.store)
        decided = await alice.approve(request.run_id, "mail")
        assert decided.decision is not None and decided.decision.decided_by == "alice"
        assert (await handle.result()).outcome is RunOutcome.COMPLETED
    assert SENT == [{"to": "a", "body": "b"}]


# --------------------------------------------------------------------------- CLI


async def test_the_cli_lists_approves_denies_and_answers(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    SENT.clear()
    parallel = {
        "tool_calls": [
            call("send_email", "mail", to="all", body="x"),
            call("pay", "big", amount=500),
        ]
    }
    config = scripted_config(
        {
            "agent": [
                parallel,
                {"tool_calls": [call("human.ask", "q", question="Which city?")]},
                "done",
            ]
        },
        agents=[
            agent(
                tools=["send_email", "pay"],
                ask_human=True,
                model_overrides=ModelOverrides(parallel_tool_calls=True),
            )
        ],
        tools=[send_email, pay],
    )
    env = cli_env(temporal_env.client.service_client.config.target_host, task_queue, tmp_path)

    async def cli(*args: str) -> Any:
        return await otherone(*args, env=env)

    async with agent_env(client, task_queue, config, tmp_path) as agents_env:
        handle = await start(agents_env)
        await open_requests(agents_env.agents, handle.run_id, count=2)
        listed = await cli("approvals", "--json")
        assert listed.code == 0, listed.describe()
        assert sorted(r["call_id"] for r in json.loads(listed.stdout)) == ["big", "mail"]
        table = await cli("approvals", handle.run_id)
        assert table.code == 0 and "send_email" in table.stdout and handle.run_id in table.stdout

        bad = await cli("approve", handle.run_id, "mail", "--arguments", "[1]")
        assert_one_line_error(bad, 2, "--arguments")
        unknown = await cli("approve", handle.run_id, "nope")
        assert_one_line_error(unknown, 3, "nope")
        edited = json.dumps({"to": "bob", "body": "x"})
        approved = await cli("approve", handle.run_id, "mail", "--arguments", edited)
        assert approved.code == 0 and "approved" in approved.stderr, approved.describe()
        denied = await cli("deny", handle.run_id, "big", "--reason", "too much")
        assert denied.code == 0, denied.describe()
        # The same decision from another command is the same decider's (`<user>@<host>`, not
        # the Temporal client's `<pid>@<host>`): accepted again, and so recorded.
        again = await cli("deny", handle.run_id, "big", "--reason", "too much")
        assert again.code == 0, again.describe()
        conflict = await cli("approve", handle.run_id, "big")
        assert_one_line_error(conflict, 9, "already denied")
        decided = [
            e.event
            for e in agents_env.store.read_events(handle.run_id)
            if e.event["type"] == "approval_decided"
        ]
        assert {e["decided_by"] for e in decided} == {f"{getpass.getuser()}@{socket.gethostname()}"}

        await wait_until(
            lambda: _has_call(agents_env.agents, handle.run_id, "q"), message="the question"
        )
        answered = await cli("answer", handle.run_id, "q", "Paris")
        assert answered.code == 0, answered.describe()
        result = await handle.result()
        none_left = await cli("approvals", handle.run_id)
    assert result.outcome is RunOutcome.COMPLETED
    assert SENT == [{"to": "bob", "body": "x"}]
    assert none_left.code == 0 and "no run waits" in none_left.stderr


async def _has_call(agents: AgentClient, run_id: str, call_id: str) -> bool:
    return any(request.call_id == call_id for request in await agents.pending_approvals(run_id))


async def test_the_demo_answers_its_approval_step_by_itself(tmp_path: Path) -> None:
    env = cli_env("127.0.0.1:1", "unused", tmp_path)  # the demo brings its own server
    demo = await otherone("demo", env=env, limit=120)
    assert demo.code == 0, demo.describe()
    assert "writer waits for a person's approval" in demo.stderr
    assert "waits for a person: agent.call" in demo.stderr
    assert "approved by" in demo.stderr
    assert "Here is your day in Paris." in demo.stdout


def test_watch_shows_a_run_waiting_for_a_person() -> None:
    root = "run-w"

    def record(sequence: int, **event: Any) -> EventRecord:
        return EventRecord(
            event_id=f"e{sequence}",
            sequence=sequence,
            timestamp=datetime(2026, 1, 1, tzinfo=UTC),
            root_run_id=root,
            run_id=root,
            parent_run_id=None,
            agent_id="mailer",
            depth=0,
            event=event,
        )

    state = WatchState(root)
    state.apply(record(1, type="run_started"))
    state.apply(
        record(2, type="approval_requested", call_id="m", tool_name="send_email", arguments="{}")
    )
    assert state.runs[root].status == "waiting_for_approval"
    view = rendered_tree(state)
    assert "waiting for approval" in view
    state.apply(
        record(3, type="approval_decided", call_id="m", decision="approved", decided_by="ann")
    )
    assert state.runs[root].status == "running"
    assert "approved by ann" in state.activity[-1].text


def rendered_tree(state: WatchState) -> str:
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(render_tree(state, datetime(2026, 1, 1, tzinfo=UTC)))
    output = console.file
    assert isinstance(output, io.StringIO)
    return output.getvalue()


@pytest.mark.timeout(180)
async def test_a_waiting_run_survives_a_temporal_server_restart(
    tmp_path: Path, task_queue: str
) -> None:
    SENT.clear()
    db_file, port = tmp_path / "temporal.db", free_port()
    config = scripted_config(
        {"agent": [{"tool_calls": [call("send_email", "mail", to="a", body="b")]}, "done"]},
        agents=[agent(tools=["send_email"])],
        tools=[send_email],
    )
    server = DevServer(db_file=db_file, port=port, headless=True)
    await server.start()
    try:
        temporal = await connect(server.address)
        async with agent_env(temporal, task_queue, config, tmp_path) as env:
            handle = await start(env)
            await open_requests(env.agents, handle.run_id)
            await server.stop()
            server = DevServer(db_file=db_file, port=port, headless=True)
            await server.start()  # same file, same port: the waiting run is still there
            [request] = await open_requests(env.agents, handle.run_id)
            await env.agents.approve(request.run_id, request.call_id)
            result = await asyncio.wait_for(handle.result(), 120)
    finally:
        await server.stop()
    assert result.outcome is RunOutcome.COMPLETED
    assert SENT == [{"to": "a", "body": "b"}]


async def test_bad_decisions_are_refused_before_reaching_the_run(client: Client) -> None:
    agents = AgentClient(client, task_queue="unused")
    cases: list[tuple[Any, str]] = [
        (agents.approve("run-x", ""), "call_id"),
        (agents.approve("run-x", "c", [1]), "arguments"),  # type: ignore[arg-type]
        (agents.deny("run-x", "c", "   "), "reason"),
        (agents.deny("run-x", "c", "bad \ud800"), "reason"),
        (agents.answer("run-x", "c", ""), "text"),
        (agents.approve("run-x", "c", {"to": "\ud800"}), "arguments.to"),
        (agents.approve("", "c"), "run_id"),
    ]
    for attempt, field in cases:
        with pytest.raises(InvalidRequestError) as refused:
            await attempt
        assert refused.value.field == field, (field, refused.value)
    with pytest.raises(RunNotFoundError):
        await agents.approve("run-does-not-exist", "c")
    with pytest.raises(InvalidRequestError) as bad_root:
        await agents.pending_approvals('x" OR 1=1')
    assert bad_root.value.field == "root_run_id"


async def test_the_interactive_demo_asks_and_a_denial_reaches_the_coordinator(
    tmp_path: Path,
) -> None:
    env = cli_env("127.0.0.1:1", "unused", tmp_path)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "otherone.client.cli", "demo", "--interactive",
        cwd=REPO_ROOT, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(b"n\n"), 120)
    assert process.returncode == 0, stderr.decode()
    assert "approve agent.call" in stdout.decode()  # the prompt
    assert "denied by" in stderr.decode()


async def test_a_decision_no_worker_takes_is_reported_not_waited_for(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no worker polling the run's queue, Temporal keeps an update waiting for one: the
    decision used to wait as long (`otherone approve` hung with no word). Now the caller is
    told within `DECISION_TIMEOUT`, naming the queue: the run's, not the deciding client's
    (`otherone approve` named the CLI's configured queue, wrong when the run is on another),
    as `otherone show` does when no worker answers its query."""
    monkeypatch.setattr(approval_requests, "DECISION_TIMEOUT", timedelta(seconds=2))
    monkeypatch.setattr(agent_client, "QUERY_TIMEOUT", timedelta(seconds=2))
    nobody = f"{task_queue}-no-worker"
    handle = await AgentClient(client, task_queue=nobody).start(
        build_request(entry_agent="agent", input="hello")
    )
    agents = AgentClient(client, task_queue=f"{task_queue}-configured")
    try:
        began = asyncio.get_running_loop().time()
        with pytest.raises(UnavailableError, match=f"is a worker polling '{nobody}'"):
            await asyncio.wait_for(agents.approve(handle.run_id, "call-1"), 30)
        assert asyncio.get_running_loop().time() - began < 15
        with pytest.raises(UnavailableError, match=f"is a worker polling '{nobody}'"):
            await asyncio.wait_for(agents.get_run(handle.run_id), 30)
    finally:
        await client.get_workflow_handle(handle.run_id).terminate("test over")
