"""Our event envelopes as AG-UI protocol events (``?format=ag-ui``, package ``ag-ui-protocol``).

The mapping is a function of one envelope (and the tree's thread), so a stream resumed with
``Last-Event-ID`` continues with exactly the AG-UI events the uninterrupted stream would have
sent next:

| our event (root run) | AG-UI |
| --- | --- |
| ``run_started`` | ``RUN_STARTED`` (thread = the run's session) |
| ``model_started``, ``_delta``, ``_completed`` | ``TEXT_MESSAGE_START``, ``_CONTENT``, ``_END`` |
| ``thinking_delta`` | ``REASONING_MESSAGE_CHUNK`` (message ``<the turn's message id>.reasoning``) |
| ``tool_started`` | ``TOOL_CALL_START``, ``TOOL_CALL_ARGS``, ``TOOL_CALL_END`` |
| ``tool_completed`` | ``TOOL_CALL_RESULT`` (the error, or ``ok``: results stay in our store) |
| ``tool_denied`` | ``TOOL_CALL_START``, ``_ARGS``, ``_END``, ``TOOL_CALL_RESULT`` (``denied: …``) |
| ``run_completed`` / ``run_cancelled`` | ``RUN_FINISHED`` (outcome success / cancelled) |
| ``run_failed`` | ``RUN_ERROR`` (message and our failure code) |
| ``state_updated`` (``ui.set_state``) | ``STATE_SNAPSHOT`` (the new shared state) |
| anything else | ``CUSTOM`` named ``otherone.<type>`` with the event body |

A call a person denied never ran, yet the model made it and read the denial as its result: AG-UI
clients rebuild the conversation from the stream, where an assistant's tool call without its
result is invalid, so it appears as a call (the model's arguments) with the denial as the
result, all at the time of the denial.

A message id names the run, turn and attempt; a model call retried after streaming part of an
answer first sends ``CUSTOM otherone.superseded`` naming the message to drop (AG-UI cannot take
a message back). Tool call ids are unique in the stream: a descendant's are prefixed with its
run id (providers number calls per turn, so a parent and its child often share one), and a
tool's retried attempt is a call of its own (``<id>#attempt<n>``), each with one result. A
descendant's events carry ``subagent_run_id`` (its run id); its run_started / completed /
failed / cancelled become ``SUBAGENT_STARTED`` / ``SUBAGENT_FINISHED`` / ``SUBAGENT_ERROR``.
"""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningMessageChunkEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
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

__all__ = ["stopped_without_end", "to_ag_ui", "tool_call_events"]


def to_ag_ui(record: EventRecord, thread_id: str | None = None) -> list[BaseEvent]:
    """The AG-UI events of one envelope (possibly none: an empty delta). ``thread_id`` is the
    tree's conversation (the root's session), else the root run id."""
    body: dict[str, Any] = dict(record.event)
    kind = str(body.get("type", ""))
    is_root = record.run_id == record.root_run_id
    if kind.startswith("run_"):
        thread = thread_id or record.root_run_id
        lifecycle = (
            _root_lifecycle(record, body, thread) if is_root else _child_lifecycle(record, body)
        )
        if lifecycle is not None:
            return [lifecycle]
    sub = {} if is_root else {"subagent_run_id": record.run_id}
    message_id = _message_id(record.run_id, body.get("turn"), body.get("attempt"))
    if kind == "model_started":
        started = TextMessageStartEvent(message_id=message_id, role="assistant", **sub)
        superseded = body.get("supersedes_attempt")
        if superseded is None:
            return [started]
        dropped = _message_id(record.run_id, body.get("turn"), superseded)
        return [
            CustomEvent(name="otherone.superseded", value={"message_id": dropped}, **sub),
            started,
        ]
    if kind == "model_delta":
        text = str(body.get("content") or "")
        return [TextMessageContentEvent(message_id=message_id, delta=text, **sub)] if text else []
    if kind == "thinking_delta":  # a chunk: AG-UI clients open and close the message around it
        text = str(body.get("content") or "")
        reasoning = f"{message_id}.reasoning"
        return [ReasoningMessageChunkEvent(message_id=reasoning, delta=text, **sub)] if text else []
    if kind == "model_completed":
        return [TextMessageEndEvent(message_id=message_id, **sub)]
    if kind == "tool_started":
        return tool_call_events(record, body, sub)
    if kind == "state_updated" and is_root and isinstance(body.get("state"), dict):
        return [StateSnapshotEvent(snapshot=body["state"])]  # only roots share the state
    if kind == "tool_completed":
        if body.get("ran_in_client"):  # its result is the client's own tool message
            return []
        error = body.get("error")
        return [_tool_result(record, body, f"error: {error}" if error else "ok", sub)]
    if kind == "tool_denied":
        content = f"{body.get('decision') or 'denied'}: {body.get('error')}"
        return [*tool_call_events(record, body, sub), _tool_result(record, body, content, sub)]
    return [CustomEvent(name=f"otherone.{kind}", value=body, **sub)]


def stopped_without_end(root_run_id: str) -> RunErrorEvent:
    """The last event of a stream whose root stopped without an end of its own (terminated
    from outside, or reset): AG-UI clients wait for a RUN_FINISHED or RUN_ERROR."""
    return RunErrorEvent(
        message=f"run '{root_run_id}' stopped without ending (terminated from outside?)",
        code="terminated",
    )


def _message_id(run_id: str, turn: Any, attempt: Any) -> str:
    return f"{run_id}#turn{turn}.{attempt}"


def _tool_call_id(record: EventRecord, body: dict[str, Any]) -> str:
    """The call's id, unique in the tree's stream (see the module's note)."""
    call_id = str(body.get("tool_call_id"))
    attempt = body.get("attempt")
    if isinstance(attempt, int) and attempt > 1:
        call_id = f"{call_id}#attempt{attempt}"
    return _in_run(record.run_id, record.root_run_id, call_id)


def _in_run(run_id: str, root_run_id: str, call_id: str) -> str:
    return call_id if run_id == root_run_id else f"{run_id}#{call_id}"


def tool_call_events(
    record: EventRecord, body: dict[str, Any], sub: dict[str, str]
) -> list[BaseEvent]:
    """A call as the model made it (``body``: ``tool_call_id``, ``tool_name``, ``arguments``):
    TOOL_CALL_START, _ARGS and _END."""
    call_id = _tool_call_id(record, body)
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


def _tool_result(
    record: EventRecord, body: dict[str, Any], content: str, sub: dict[str, str]
) -> ToolCallResultEvent:
    call_id = _tool_call_id(record, body)
    return ToolCallResultEvent(
        message_id=f"{record.run_id}#tool{call_id}",
        tool_call_id=call_id,
        content=content,
        role="tool",
        **sub,
    )


def _root_lifecycle(record: EventRecord, body: dict[str, Any], thread: str) -> BaseEvent | None:
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
        parent = record.parent_run_id or record.root_run_id
        call_id = _string(body.get("agent_call_id"))
        return SubagentStartedEvent(
            subagent_run_id=record.run_id,
            name=record.agent_id,
            parent_subagent_run_id=None if parent == record.root_run_id else parent,
            # The caller's TOOL_CALL_START id for its agent call (prefixed as the caller's).
            parent_tool_call_id=None
            if call_id is None
            else _in_run(parent, record.root_run_id, call_id),
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
