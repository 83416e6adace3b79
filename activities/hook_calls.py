"""Lifecycle hooks inside the model-call and tool activities (`otherone.hooks`).

They run where the call is made, on every attempt, so nothing of them reaches the workflow's
history but the call's own outcome: the run stays deterministic whatever a hook does. Order:
the runtime policy's hooks, then the agent's, each given the previous one's result. A refusal
or a hook error is an event (`hook_refused`, `hook_failed`) naming the hook and its stage.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import JsonValue

from otherone.activities.context import tool_error_content
from otherone.activities.event_buffer import EventBuffer
from otherone.activities.providers.base import ModelRequest
from otherone.activities.shared import ActivityContext, failure
from otherone.config import RuntimeSnapshot
from otherone.contracts import ModelTurn, RunRef, ToolCallSpec
from otherone.definitions import AgentDefinition
from otherone.errors import FailureCode
from otherone.hook_policy import stage_names
from otherone.hooks import (
    HookFailed,
    HookRefusal,
    ModelAnswerView,
    ModelCallView,
    ToolCallView,
    run_stage,
)
from otherone.tools import ToolErrorKind

#: What stands in for a tool's result when a hook refused the call or failed.
HookedOutcome = tuple[ToolErrorKind, str]


async def before_model_call(
    context: ActivityContext,
    snapshot: RuntimeSnapshot,
    agent: AgentDefinition,
    request: ModelRequest,
    events: EventBuffer,
) -> tuple[ModelRequest, dict[str, JsonValue]]:
    """The request as the hooks leave it, and the metadata they added. A refusal or a hook
    error fails the call for good (`hook_refused`, `hook_failed`): a retry would meet it again."""
    names = stage_names(snapshot.policy.hooks, agent.hooks, "before_model_call")
    if not names:
        return request, {}
    view = ModelCallView(
        run_id=request.run_id,
        agent_id=request.agent_id,
        turn=request.turn,
        attempt=request.attempt,
        messages=request.messages,
        tools=request.tools,
    )
    try:
        view = await run_stage(context.config.hooks, names, "before_model_call", view)
    except HookRefusal as refusal:
        events.add(_refused_event("before_model_call", refusal))
        message = f"hook '{refusal.hook}' refused the model call: {refusal.reason}"
        raise failure(FailureCode.HOOK_REFUSED, message) from None
    except HookFailed as error:
        events.add({"type": "hook_failed", "stage": "before_model_call", "error": str(error)})
        raise failure(FailureCode.HOOK_FAILED, str(error)) from None
    rewritten = dataclasses.replace(request, messages=view.messages, tools=view.tools)
    return rewritten, view.metadata


async def after_model_call(
    context: ActivityContext,
    snapshot: RuntimeSnapshot,
    agent: AgentDefinition,
    request: ModelRequest,
    turn: ModelTurn,
    events: EventBuffer,
) -> dict[str, JsonValue]:
    """The metadata the ``after_model_call`` hooks added to the answer's `model_completed`.
    A refusal or a hook error fails the call for good; the answer is not kept."""
    names = stage_names(snapshot.policy.hooks, agent.hooks, "after_model_call")
    if not names:
        return {}
    view = ModelAnswerView(
        run_id=request.run_id,
        agent_id=request.agent_id,
        turn=request.turn,
        attempt=request.attempt,
        text=turn.content,
        tool_calls=[call.model_dump() for call in turn.tool_calls],
        finish_reason=turn.finish_reason,
    )
    try:
        view = await run_stage(context.config.hooks, names, "after_model_call", view)
    except HookRefusal as refusal:
        events.add(_refused_event("after_model_call", refusal))
        message = f"hook '{refusal.hook}' refused the model's answer: {refusal.reason}"
        raise failure(FailureCode.HOOK_REFUSED, message) from None
    except HookFailed as error:
        events.add({"type": "hook_failed", "stage": "after_model_call", "error": str(error)})
        raise failure(FailureCode.HOOK_FAILED, str(error)) from None
    return view.metadata


async def before_tool_call(
    context: ActivityContext, ref: RunRef, call: ToolCallSpec, events: EventBuffer
) -> ToolCallSpec | HookedOutcome:
    """The call as the hooks leave it (its arguments maybe rewritten), or what stands in for
    its result: a refusal the model sees, or a fatal error naming the hook that failed."""
    names = await _names(context, ref, "before_tool_call")
    if not names:
        return call
    try:
        view = await run_stage(context.config.hooks, names, "before_tool_call", _view(ref, call))
    except HookRefusal as refusal:
        events.add({**_refused_event("before_tool_call", refusal), "tool_call_id": call.id})
        message = f"hook '{refusal.hook}' refused this call; nothing was executed: "
        return ToolErrorKind.PERMISSION_DENIED, tool_error_content(message + refusal.reason)
    except HookFailed as error:
        return _failed(events, "before_tool_call", call, error)
    return call.model_copy(update={"arguments": view.arguments})


async def after_tool_call(
    context: ActivityContext, ref: RunRef, call: ToolCallSpec, result: str, events: EventBuffer
) -> str | HookedOutcome:
    """A successful result as the hooks leave it (or a fatal error naming the one that failed;
    a refusal after the tool ran withholds its result from the model)."""
    names = await _names(context, ref, "after_tool_call")
    if not names:
        return result
    view = _view(ref, call).model_copy(update={"result": result})
    try:
        view = await run_stage(context.config.hooks, names, "after_tool_call", view)
    except HookRefusal as refusal:
        events.add({**_refused_event("after_tool_call", refusal), "tool_call_id": call.id})
        message = f"hook '{refusal.hook}' withheld this call's result: {refusal.reason}"
        return ToolErrorKind.PERMISSION_DENIED, tool_error_content(message)
    except HookFailed as error:
        return _failed(events, "after_tool_call", call, error)
    return view.result if view.result is not None else result


async def _names(context: ActivityContext, ref: RunRef, stage: str) -> tuple[str, ...]:
    snapshot = await context.snapshot(ref.snapshot_version)
    return stage_names(snapshot.policy.hooks, snapshot.agent(ref.agent_id).hooks, stage)


def _view(ref: RunRef, call: ToolCallSpec) -> ToolCallView:
    return ToolCallView(
        run_id=ref.run_id,
        agent_id=ref.agent_id,
        tool_name=call.name,
        tool_call_id=call.id,
        arguments=call.arguments,
    )


def _refused_event(stage: str, refusal: HookRefusal) -> dict[str, Any]:
    return {"type": "hook_refused", "hook": refusal.hook, "stage": stage, "reason": refusal.reason}


def _failed(
    events: EventBuffer, stage: str, call: ToolCallSpec, error: HookFailed
) -> HookedOutcome:
    """A broken hook ends the run (a fatal tool error naming it): its policy cannot be kept."""
    event = {"type": "hook_failed", "stage": stage, "tool_call_id": call.id, "error": str(error)}
    events.add(event)
    return ToolErrorKind.FATAL, tool_error_content(str(error))
