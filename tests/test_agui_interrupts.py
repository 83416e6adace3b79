"""AG-UI interrupts (`otherone.api.agui_interrupts`): a run of ``POST /v1/ag-ui/{agent}`` whose
tree comes to wait for a person ends its AG-UI run with ``RUN_FINISHED`` (outcome
``interrupt``), and the client's next ``RunAgentInput`` with ``resume`` approves, denies or
answers, then streams what the tree does next, exactly after what was sent. Real API server,
worker, store and dev server; the bodies are the ones `@ag-ui/client`'s HttpAgent sends."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.definitions import AccessPolicy, AgentDefinition
from otherone.partitions import DEFAULT_PARTITION
from otherone.tools import tool
from tests.api_env import ApiEnv, api_env
from tests.harness import scripted_config, wait_until
from tests.test_api import _agent_input, _post_ag_ui

pytestmark = pytest.mark.timeout(120)


@tool(approval="always")
def send_note(to: str, text: str) -> str:
    """Send a note.

    Args:
        to: Who gets it.
        text: What it says.
    """
    return f"sent to {to}"


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


SCRIPT: dict[str, list[Any]] = {
    "mailer": [
        {
            "text": "Sending both.",
            "tool_calls": [
                _call("n1", "send_note", to="bo", text="hi"),
                _call("n2", "send_note", to="al", text="yo"),
            ],
        },
        "Both handled.",
    ],
    "asker": [{"tool_calls": [_call("q", "human.ask", question="Which city?")]}, "Paris it is."],
    "talker": ["Noted."],
}


def _config() -> Any:
    agents = [
        AgentDefinition(
            id="mailer", description="Sends notes", tools=AccessPolicy.allow("send_note")
        ),
        AgentDefinition.model_validate({"id": "asker", "description": "Asks", "ask_human": True}),
        AgentDefinition(id="talker", description="Talks"),
    ]
    return scripted_config(SCRIPT, agents=agents, tools=[send_note])


def _hello(text: str = "go") -> dict[str, Any]:
    return {"id": f"m-{uuid.uuid4().hex[:6]}", "role": "user", "content": text}


def _types(events: list[Any]) -> list[str]:
    return [event.type.value for event in events]


def _resume(thread: str, run: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {**_agent_input(thread, run, [_hello()]), "resume": entries}


async def _interrupted(api: ApiEnv, agent: str, thread: str) -> tuple[str, list[Any], list[Any]]:
    status, events = await _post_ag_ui(api, agent, _agent_input(thread, "r1", [_hello()]))
    assert status == 200, events
    assert _types(events)[0] == "RUN_STARTED" and _types(events)[-1] == "RUN_FINISHED"
    outcome = events[-1].outcome
    assert outcome is not None and outcome.type == "interrupt", events[-1]
    return events[0].run_id, events, list(outcome.interrupts)


async def test_approvals_end_the_ag_ui_run_and_resume_decides_them(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, _config(), tmp_path) as api:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        run_id, first, interrupts = await _interrupted(api, "mailer", thread)
        # Both calls of the turn wait: one interrupt each, with what a front end shows.
        assert sorted(i.metadata["call_id"] for i in interrupts) == ["n1", "n2"]
        note = next(i for i in interrupts if i.metadata["call_id"] == "n1")
        assert note.reason == "tool_approval" and note.tool_call_id == "n1"
        assert note.message == "mailer wants to call send_note"
        assert note.metadata["arguments"] == {"to": "bo", "text": "hi"}
        assert note.response_schema["required"] == ["approved"]
        text = "".join(e.delta for e in first if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert text == "Sending both."

        # Malformed entries are refused, naming the entry, before any decision is sent.
        for entry, field in (
            ({"interruptId": "nonsense", "status": "resolved"}, "resume.0.interruptId"),
            ({"interruptId": note.id, "status": "resolved", "payload": {}}, "resume.0.payload"),
        ):
            status, [problem] = await _post_ag_ui(api, "mailer", _resume(thread, "r2", [entry]))
            assert (status, problem["field"]) == (422, field), problem

        # Approve one, deny the other: the stream goes on after what the first one sent.
        other = next(i for i in interrupts if i.metadata["call_id"] == "n2")
        entries = [
            {"interruptId": note.id, "status": "resolved", "payload": {"approved": True}},
            {
                "interruptId": other.id,
                "status": "resolved",
                "payload": {"approved": False, "reason": "not al"},
            },
        ]
        status, second = await _post_ag_ui(api, "mailer", _resume(thread, "r2", entries))
        assert status == 200, second
        assert _types(second)[0] == "RUN_STARTED" and second[0].run_id == run_id
        assert second[-1].type.value == "RUN_FINISHED" and second[-1].outcome.type == "success"
        assert "TEXT_MESSAGE_START" not in _types(second)[:2]  # turn 1 is not sent again
        results = {e.tool_call_id: e.content for e in second if e.type.value == "TOOL_CALL_RESULT"}
        assert results["n1"] == "ok" and results["n2"].startswith("denied: "), results
        text = "".join(e.delta for e in second if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert text == "Both handled."
        first_ids = {e.message_id for e in first if e.type.value == "TEXT_MESSAGE_START"}
        second_ids = {e.message_id for e in second if e.type.value == "TEXT_MESSAGE_START"}
        assert not first_ids & second_ids

        # The same resume again (a client's retry): accepted, the same events.
        status, again = await _post_ag_ui(api, "mailer", _resume(thread, "r2", entries))
        assert status == 200, again
        assert _types(again) == _types(second), again


async def test_a_question_is_an_interrupt_answered_by_resume(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, _config(), tmp_path) as api:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        _, _, [question] = await _interrupted(api, "asker", thread)
        assert (question.reason, question.message) == ("input_required", "Which city?")
        assert question.response_schema["required"] == ["answer"]
        entry = {"interruptId": question.id, "status": "resolved", "payload": {"answer": "Paris"}}
        status, events = await _post_ag_ui(api, "asker", _resume(thread, "r2", [entry]))
        assert status == 200 and events[-1].outcome.type == "success", events
        [result] = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
        assert result.tool_call_id == "q"
        text = "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert text == "Paris it is."


async def test_a_client_that_opts_out_keeps_the_stream_open_while_a_person_decides(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """``forwardedProps.otherone.interrupts: false``: the stream waits with the run (as before
    interrupts), and a decision through the REST endpoint lets it finish."""
    async with api_env(client, task_queue, _config(), tmp_path) as api:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        body = {
            **_agent_input(thread, "r1", [_hello()]),
            "forwardedProps": {"otherone": {"interrupts": False}},
        }
        streaming = asyncio.ensure_future(_post_ag_ui(api, "asker", body))

        async def asked() -> bool:
            return bool((await api.http.get("/v1/approvals")).json())

        await wait_until(asked, message="the question")
        [request] = (await api.http.get("/v1/approvals")).json()
        decided = await api.http.post(
            f"/v1/runs/{request['run_id']}/approvals/q",
            json={"decision": "answer", "text": "Rome"},
        )
        assert decided.status_code == 200, decided.text
        status, events = await asyncio.wait_for(streaming, 60)
    assert status == 200
    assert events[-1].type.value == "RUN_FINISHED" and events[-1].outcome.type == "success"
    assert all(
        e.outcome is None or e.outcome.type != "interrupt"
        for e in events
        if e.type.value == "RUN_FINISHED"
    )


async def test_the_front_ends_context_reaches_the_model_with_the_turn(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, _config(), tmp_path) as api:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        body = {
            **_agent_input(thread, "r1", [_hello("what am I looking at?")]),
            "context": [
                {"description": "current page", "value": "/invoices/42"},
                {"description": "user's selection", "value": "line 3"},
            ],
        }
        status, events = await _post_ag_ui(api, "talker", body)
        assert status == 200 and events[-1].type.value == "RUN_FINISHED", events
        entries = api.env.store.load_entries(DEFAULT_PARTITION, thread)
    system = [entry.content for entry in entries if entry.role == "system"]
    assert system == [
        "Context from the application:\n- current page: /invoices/42\n- user's selection: line 3"
    ], [(entry.role, entry.content) for entry in entries]
    assert [entry.role for entry in entries][-2:] == ["user", "assistant"]
