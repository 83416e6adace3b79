"""`run_tool`: run one tool call (a user tool, a built-in memory tool or an MCP server's tool,
`otherone.activities.mcp_calls`) and store its result, which the workflow's history only
references; or, for a small result, hand it back inline (`ToolCallInput.inline`).
Classified tool errors go back to the model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import activity

from otherone.activities import capacity
from otherone.activities.artifacts import store_blob
from otherone.activities.context import tool_error_content
from otherone.activities.event_buffer import EventBuffer
from otherone.activities.hook_calls import after_tool_call, before_tool_call
from otherone.activities.lost_attempts import lost_tool_attempts, tool_completed_key
from otherone.activities.mcp_calls import McpToolCall
from otherone.activities.memory_tools import MEMORY_POLICY_METADATA_KEY
from otherone.activities.model_stream import valid_unicode
from otherone.activities.shared import ActivityContext
from otherone.activities.store_calls import brief_write, heartbeating
from otherone.activities.tool_events import result_error, tool_completed_body, tool_started_body
from otherone.activities.tool_images import ImageSaver, tool_result_with_images
from otherone.contracts import RunRef, ToolCallInput, ToolOutcome
from otherone.mcp_resources import RESOURCE_TOOLS
from otherone.mcp_servers import MCP_PREFIX
from otherone.parts import returns_images
from otherone.redaction import redact_keeping_json
from otherone.runs import ArtifactRef
from otherone.tools import ToolContext, ToolError, ToolErrorKind
from otherone.worker import genai_spans

#: How long a retry waits for Temporal's answer to "is the run cancelled?" before running.
CANCEL_CHECK_TIMEOUT = timedelta(seconds=5)


async def run_tool(context: ActivityContext, input: ToolCallInput) -> ToolOutcome:
    events = EventBuffer(context, input.run_ref)
    try:
        ref, call = input.run_ref, input.call
        snapshot = await context.snapshot(ref.snapshot_version)
        claim = capacity.tool_claim(snapshot, ref, call.id)
        wait, _ = await capacity.admit(
            context,
            claim,
            lambda wait: events.add(capacity.tool_waiting_event(ref, call.id, call.name, wait)),
        )
        if wait is not None:
            # Nothing ran: the run waits in its workflow (no slot held) and calls again.
            return ToolOutcome(tool_call_id=call.id, name=call.name, capacity_wait=wait)
        async with capacity.holding(context, claim):
            if call.name.startswith(MCP_PREFIX):
                return await _run_mcp_tool(context, input, events)
            return await _run_tool(context, input, events)
    finally:
        await events.close()  # whatever is still queued, before the attempt ends


async def _run_tool(
    context: ActivityContext, input: ToolCallInput, events: EventBuffer
) -> ToolOutcome:
    ref, call = input.run_ref, input.call
    spec = context.config.tools.get(call.name) or context.memory_tools.get(call.name)
    info = activity.info()
    if spec is None:
        return ToolOutcome(
            tool_call_id=call.id,
            name=call.name,
            error_kind=ToolErrorKind.FATAL,
            error=f"tool '{call.name}' is not registered on this worker",
        )
    # Written within `LATE_WRITE_SECONDS`, or at the end; after the ends of earlier attempts
    # a killed worker left open.
    lost = await lost_tool_attempts(context, ref, call, info.attempt)
    events.add(*lost, tool_started_body(call, info.attempt))
    tool_context = ToolContext(
        tool_call_id=call.id,
        tool_name=call.name,
        run_id=ref.run_id,
        root_run_id=ref.root_run_id,
        agent_id=ref.agent_id,
        session_id=ref.session_id,
        partition_key=ref.partition_key,
        idempotency_key=f"{ref.run_id}:{call.id}",
        attempt=info.attempt,
        metadata={MEMORY_POLICY_METADATA_KEY: await _memory_policy(context, ref)},
    )

    async def save_image(name: str, content: bytes, media_type: str) -> ArtifactRef:
        label = f"tool call {call.id} {name}"
        return await context.io(store_blob, context.store, ref, label, content, media_type)

    async def work() -> ToolOutcome:
        await _held_if_the_run_is_cancelled()
        hooked = await before_tool_call(context, ref, call, events)
        if isinstance(hooked, tuple):  # refused by a hook: the tool never runs
            return await _store_tool_result(context, input, *hooked, events)
        kind, content = await _invoke(
            spec.invoke,
            hooked.arguments,
            tool_context,
            spec.timeout_seconds,
            spec.max_attempts,
            save_image,
        )
        kind, content = await _after_hooks(context, input, kind, content, events)
        return await _store_tool_result(context, input, kind, _shown(content), events)

    return await _ended(input, work(), events)


async def _run_mcp_tool(
    context: ActivityContext, input: ToolCallInput, events: EventBuffer
) -> ToolOutcome:
    """An MCP tool of the run's snapshot, on this worker's session to its server."""
    ref, call = input.run_ref, input.call
    snapshot = await context.snapshot(ref.snapshot_version)
    target, schema = snapshot.mcp_tools.get(call.name), snapshot.tools.get(call.name)
    if target is None or schema is None:
        return ToolOutcome(
            tool_call_id=call.id,
            name=call.name,
            error_kind=ToolErrorKind.PERMISSION_DENIED,
            error=f"tool '{call.name}' is not among this run's MCP tools",
        )
    attempt = activity.info().attempt
    events.add(*await lost_tool_attempts(context, ref, call, attempt))
    events.add(tool_started_body(call, attempt))

    async def emit(body: dict[str, Any]) -> None:
        await events.add_now(body)  # progress: people are watching

    async def save_blob(name: str, content: bytes, media_type: str) -> ArtifactRef:
        label = f"tool call {call.id} {name}"
        return await context.io(store_blob, context.store, ref, label, content, media_type)

    runner = McpToolCall(context.mcp, emit=emit, save_blob=save_blob, heartbeating=heartbeating)

    async def work() -> ToolOutcome:
        await _held_if_the_run_is_cancelled()
        hooked = await before_tool_call(context, ref, call, events)
        if isinstance(hooked, tuple):  # refused by a hook: the server is never called
            return await _store_tool_result(context, input, *hooked, events)
        if target.tool in RESOURCE_TOOLS.values():
            kind, content = await runner.run_resources(
                hooked,
                target,
                schema,
                attempt,
                resources=snapshot.mcp_resources.get(target.server),
                text_limit_bytes=input.result_limit_bytes // 2,
            )
        else:
            kind, content = await runner.run(hooked, target, schema, attempt)
        kind, content = await _after_hooks(context, input, kind, content, events)
        return await _store_tool_result(context, input, kind, _shown(content), events)

    return await _ended(input, work(), events)


async def _after_hooks(
    context: ActivityContext,
    input: ToolCallInput,
    kind: ToolErrorKind | None,
    content: str,
    events: EventBuffer,
) -> tuple[ToolErrorKind | None, str]:
    """A successful result through the ``after_tool_call`` hooks (errors pass as they are)."""
    if kind is not None:
        return kind, content
    hooked = await after_tool_call(context, input.run_ref, input.call, content, events)
    return hooked if isinstance(hooked, tuple) else (None, hooked)


async def _held_if_the_run_is_cancelled() -> None:
    """A retry does not run the tool once the run has a cancel request: it waits (heartbeating)
    for its own cancellation, which the run sends when it takes the request.

    Temporal hands out a retry and the workflow task that carries the cancel independently: a
    worker killed mid-call, then restarted, could run the retry (timed out by its heartbeat)
    before the run learnt it was cancelled, so a tool the user had stopped ran (again). The
    first attempt is not checked: the run scheduled it, so it was not cancelled then (and a
    question to Temporal on every call would cost a round trip each). A check that fails
    (Temporal unreachable) lets the retry run, as before."""
    info = activity.info()
    workflow_id, run_id = info.workflow_id, info.workflow_run_id
    if info.attempt == 1 or workflow_id is None or run_id is None:
        return
    if not await _cancel_requested(workflow_id, run_id):
        return
    activity.logger.info(
        "tool call attempt %d not run: run %s has a cancel request", info.attempt, info.workflow_id
    )
    async with heartbeating(first_after=0):
        await asyncio.Event().wait()  # until the run's cancellation reaches this attempt


async def _cancel_requested(workflow_id: str, run_id: str) -> bool:
    try:
        handle = activity.client().get_workflow_handle(workflow_id, run_id=run_id)
        description = await handle.describe(rpc_timeout=CANCEL_CHECK_TIMEOUT)
    except Exception as error:  # only a guard: the retry runs as it always did
        activity.logger.warning("could not ask whether run %s is cancelled: %s", workflow_id, error)
        return False
    return description.raw_description.workflow_extended_info.cancel_requested


async def _ended(
    input: ToolCallInput, work: Awaitable[ToolOutcome], events: EventBuffer
) -> ToolOutcome:
    """Every `tool_started` gets its `tool_completed`: a cancelled or failed attempt too (the
    successful one's is written with the result, `_store_tool_result`)."""
    try:
        return await work
    except BaseException as error:
        if events.written_when_cancelled:
            raise  # the result and its `tool_completed` were stored all the same
        ended = (
            "cancelled"
            if isinstance(error, asyncio.CancelledError)
            else f"attempt failed: {type(error).__name__}: {error}"
        )
        # Written by `EventBuffer.close`; keyed, as the end a later attempt would store for
        # this one if it seemed lost (`otherone.activities.lost_attempts`).
        attempt = activity.info().attempt
        events.add(
            {
                **tool_completed_body(input.call, ended, attempt),
                **tool_completed_key(input.run_ref, input.call, attempt),
            }
        )
        raise


async def _memory_policy(context: ActivityContext, ref: RunRef) -> str:
    """The calling agent's memory policy, for tools (the seed passes it to every tool)."""
    snapshot = await context.snapshot(ref.snapshot_version)
    return snapshot.agent(ref.agent_id).memory.value


async def _invoke(
    invoke: Callable[..., Any],
    arguments: str,
    context: ToolContext,
    timeout_seconds: float,
    max_attempts: int,
    save_image: ImageSaver,
) -> tuple[ToolErrorKind | None, str]:
    """Run the tool; classified errors go back to the model, others retry then turn fatal."""
    try:
        # `asyncio.timeout`, not `wait_for`: no task of its own per call (on Python 3.11).
        async with heartbeating(), asyncio.timeout(timeout_seconds):
            result = await invoke(arguments, context)
            if returns_images(result):
                return None, await tool_result_with_images(result, save_image)
    except ToolError as error:
        return error.kind, tool_error_content(error.message)
    except TimeoutError:
        return ToolErrorKind.TIMED_OUT, tool_error_content(
            f"tool timed out after {timeout_seconds:g}s"
        )
    except Exception as error:
        if context.attempt < max_attempts:
            raise  # Temporal retries it; the tool got the same idempotency key
        return ToolErrorKind.FATAL, tool_error_content(f"{type(error).__name__}: {error}")
    return None, json.dumps(result, ensure_ascii=False)


async def _store_tool_result(
    context: ActivityContext,
    input: ToolCallInput,
    kind: ToolErrorKind | None,
    content: str,
    events: EventBuffer,
) -> ToolOutcome:
    ref, call, attempt = input.run_ref, input.call, activity.info().attempt
    genai_spans.note_tool_result(content)  # only when content capture is on
    size = len(content.encode())
    error = result_error(content) if kind is not None else None
    if size > input.result_limit_bytes:
        # The run ends (the seed's rule), but the result is kept for whoever investigates.
        artifact = await context.io(
            store_blob,
            context.store,
            ref,
            f"oversized result of tool call {call.id}",
            content.encode(),
            "application/json",
        )
        outcome = ToolOutcome(
            tool_call_id=call.id,
            name=call.name,
            result_bytes=size,
            oversized=True,
            error=f"{_oversized(size, input)}; stored as artifact {artifact.artifact_id}",
        )
        events.add(tool_completed_body(call, outcome.error, attempt))
        return outcome
    if await _inline(context, input, size) and events.drop_unwritten(
        tool_started_body(call, attempt)
    ):
        # Small, and nothing of the call stored yet: the result goes back in the outcome, and
        # its entry and events are written by whoever writes the run's next entries (no store
        # write on the tool's path). `PendingEntry.tool_arguments`, `deferred_tool_events`.
        return ToolOutcome(
            tool_call_id=call.id,
            name=call.name,
            error_kind=kind,
            error=error,
            content=content,
        )
    # The result, `tool_completed` and whatever else is queued: one transaction.
    succeeded = content if kind is None else None  # a tool error's message is its `error`
    events.add(tool_completed_body(call, error, attempt, content=succeeded))
    store, error_kind = context.store, kind.value if kind else None
    await events.write_with(
        lambda bodies: store.put_tool_result_and_events(
            ref, call.id, bodies, tool_name=call.name, content=content, error_kind=error_kind
        ),
        brief=brief_write(content),  # a result up to max_result_bytes: large ones in a thread
    )
    return ToolOutcome(
        tool_call_id=call.id, name=call.name, error_kind=kind, error=error, result_bytes=size
    )


def _shown(content: str) -> str:
    """A tool's result as it may be kept: valid Unicode, redacted of every secret the worker
    resolved (an MCP server echoing its credentials, a tool printing its environment) before
    it is measured, stored, streamed or returned to the model."""
    return redact_keeping_json(valid_unicode(content))


async def _inline(context: ActivityContext, input: ToolCallInput, size: int) -> bool:
    """Whether a result of ``size`` bytes goes back inline: the workflow takes inline results
    (`ToolCallInput.inline`) and the result and the arguments (both travel in the workflow's
    history then) fit in the run's `RuntimeLimits.inline_tool_result_bytes`."""
    if not input.inline:
        return False
    snapshot = await context.snapshot(input.run_ref.snapshot_version)
    return size + len(input.call.arguments.encode()) <= snapshot.limits.inline_tool_result_bytes


def _oversized(size: int, input: ToolCallInput) -> str:
    return f"tool result of {size} bytes exceeds max_result_bytes ({input.result_limit_bytes})"
