"""Our event envelopes as AG-UI protocol events (``?format=ag-ui``, package ``ag-ui-protocol``).

The mapping is stateless (a function of one envelope), so a stream resumed with
``Last-Event-ID`` produces exactly the AG-UI events it would have produced uninterrupted:

| our event (root run) | AG-UI |
| --- | --- |
| ``run_started`` | ``RUN_STARTED`` (thread = the root run id) |
| ``model_started``, ``_delta``, ``_completed`` | ``TEXT_MESSAGE_START``, ``_CONTENT``, ``_END`` |
| ``tool_started`` | ``TOOL_CALL_START``, ``TOOL_CALL_ARGS``, ``TOOL_CALL_END`` |
| ``tool_completed`` | ``TOOL_CALL_RESULT`` (the error, or ``ok``: results stay in our store) |
| ``run_completed`` / ``run_cancelled`` | ``RUN_FINISHED`` (outcome success / cancelled) |
| ``run_failed`` | ``RUN_ERROR`` (message and our failure code) |
| anything else | ``CUSTOM`` named ``otherone.<type>`` with the event body |

A message id names the run, turn and attempt. A descendant's events carry ``subagent_run_id``
(its run id); its run_started / completed /
failed / cancelled become ``SUBAGENT_STARTED`` / ``SUBAGENT_FINISHED`` / ``SUBAGENT_ERROR``.
"""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from otherone.contracts import EventRecord

__all__ = ["to_ag_ui"]


def to_ag_ui(record: EventRecord) -> list[BaseEvent]:
    """The AG-UI events of one envelope (possibly none: an empty delta)."""
    body: dict[str, Any] = dict(record.event)
    kind = str(body.get("type", ""))
    is_root = record.run_id == record.root_run_id
    if kind.startswith("run_"):
        lifecycle = _root_lifecycle(record, body) if is_root else _child_lifecycle(record, body)
        if lifecycle is not None:
            return [lifecycle]
    sub = {} if is_root else {"subagent_run_id": record.run_id}
    message_id = f"{record.run_id}#turn{body.get('turn')}.{body.get('attempt')}"
    if kind == "model_started":
        return [TextMessageStartEvent(message_id=message_id, role="assistant", **sub)]
    if kind == "model_delta":
        text = str(body.get("content") or "")
        return [TextMessageContentEvent(message_id=message_id, delta=text, **sub)] if text else []
    if kind == "model_completed":
        return [TextMessageEndEvent(message_id=message_id, **sub)]
    if kind == "tool_started":
        return _tool_started(body, sub)
    if kind == "tool_completed":
        call_id = str(body.get("tool_call_id"))
        error = body.get("error")
        return [
            ToolCallResultEvent(
                message_id=f"{record.run_id}#tool{call_id}",
                tool_call_id=call_id,
                content=f"error: {error}" if error else "ok",
                role="tool",
                **sub,
            )
        ]
    return [CustomEvent(name=f"otherone.{kind}", value=body, **sub)]


def _tool_started(body: dict[str, Any], sub: dict[str, str]) -> list[BaseEvent]:
    call_id = str(body.get("tool_call_id"))
    arguments = body.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    events: list[BaseEvent] = [
        ToolCallStartEvent(tool_call_id=call_id, tool_call_name=str(body.get("tool_name")), **sub)
    ]
    if arguments:
        events.append(ToolCallArgsEvent(tool_call_id=call_id, delta=arguments, **sub))
    events.append(ToolCallEndEvent(tool_call_id=call_id, **sub))
    return events


def _root_lifecycle(record: EventRecord, body: dict[str, Any]) -> BaseEvent | None:
    thread = record.root_run_id
    kind = body["type"]
    if kind == "run_started":
        return RunStartedEvent(thread_id=thread, run_id=record.run_id)
    if kind == "run_completed":
        return RunFinishedEvent(
            thread_id=thread, run_id=record.run_id, outcome=RunFinishedSuccessOutcome()
        )
    if kind == "run_cancelled":
        return RunFinishedEvent(
            thread_id=thread, run_id=record.run_id, outcome=RunFinishedCancelledOutcome()
        )
    if kind == "run_failed":
        message, code = _failure(body)
        return RunErrorEvent(message=message, code=code)
    return None


def _child_lifecycle(record: EventRecord, body: dict[str, Any]) -> BaseEvent | None:
    kind = body["type"]
    if kind == "run_started":
        parent = record.parent_run_id
        return SubagentStartedEvent(
            subagent_run_id=record.run_id,
            name=record.agent_id,
            parent_subagent_run_id=None if parent == record.root_run_id else parent,
            parent_tool_call_id=_string(body.get("agent_call_id")),
        )
    if kind == "run_completed":
        return SubagentFinishedEvent(subagent_run_id=record.run_id)
    if kind == "run_cancelled":
        return SubagentErrorEvent(
            subagent_run_id=record.run_id, message="cancelled", code="cancelled"
        )
    if kind == "run_failed":
        message, code = _failure(body)
        return SubagentErrorEvent(subagent_run_id=record.run_id, message=message, code=code)
    return None


def _failure(body: dict[str, Any]) -> tuple[str, str]:
    failure = body.get("failure")
    status = str(body.get("status") or "failed")
    if isinstance(failure, dict):
        return str(failure.get("message") or status), str(failure.get("code") or status)
    return status, status


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None
