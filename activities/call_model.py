"""`call_model`: one model turn of a run, in the order it happens.

1. Write the turn's pending entries; load the context (latest summary and the entries after it).
   A retry that finds the turn's answer already stored returns it: never call the model twice.
2. Build the request (system prompt, offered tools, generation settings) and compact the
   context if it nears the window (`compact_context`).
3. Stream the answer, writing deltas as batched events (`DeltaBuffer`), within the output limit.
4. Store the assistant entry, apply the run's result contract, and keep what goes back into
   the workflow's history under the inline payload limit (larger parts become artifacts).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from otherone.activities import capacity
from otherone.activities.approvals import human_tools, with_approvals
from otherone.activities.artifacts import needs_offload, offload_turn
from otherone.activities.compact_context import Summary, compact_context, stored_summary
from otherone.activities.context import (
    agent_call_tool_definition,
    generation_settings,
    messages_from_entries,
    model_choices,
    system_prompt_for,
    tool_definitions,
    turn_from_entry,
    wire_tool_calls,
)
from otherone.activities.decided_events import call_completed_events
from otherone.activities.event_buffer import EventBuffer
from otherone.activities.handoffs import handoff_tool_definition
from otherone.activities.hook_calls import after_model_call, before_model_call
from otherone.activities.lost_attempts import lost_model_attempts, model_completed_key
from otherone.activities.memory_tools import MemoryTools
from otherone.activities.model_stream import OutputLimitExceeded, TurnCollector
from otherone.activities.output import apply_result_contract
from otherone.activities.part_bytes import with_part_bytes
from otherone.activities.providers.base import (
    REASONING_KEY,
    ModelProvider,
    ModelRequest,
    ProviderError,
)
from otherone.activities.shared import ActivityContext, failure, pending_rows, tool_result_ids
from otherone.activities.sleep_tools import sleep_tools
from otherone.activities.spawn_tools import spawn_tool_definitions
from otherone.activities.spend import check_spend_limit, turn_spend
from otherone.activities.store_calls import brief_write, heartbeating
from otherone.client_tools import client_tool_definitions
from otherone.config import RuntimeSnapshot
from otherone.contracts import ModelCallInput, ModelTurn, RunRef
from otherone.contracts.turns import SAID_EXCERPT_CHARS
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.errors import FailureCode
from otherone.pricing import CallTokens, call_cost
from otherone.result_contracts import contract_instructions
from otherone.run_types import plain_decimal
from otherone.runs import NORMAL_FINISH_REASONS
from otherone.shared_state import SET_STATE_DEFINITION
from otherone.store import Compaction, EntryRow
from otherone.store.errors import RunAlreadyEnded
from otherone.worker import activity_metrics, genai_spans

#: The error type of a turn refused because its run had already ended (`RunAlreadyEnded`).
RUN_ALREADY_ENDED = "run_already_ended"
#: Deltas are written to the event store at most this often (batching keeps the store calm).
DELTA_FLUSH_SECONDS = 0.05


async def call_model(context: ActivityContext, input: ModelCallInput) -> ModelTurn:
    await context.emit_decided(input.run_ref, input.events)
    events = EventBuffer(context, input.run_ref)
    try:
        return await _call_model(context, input, events)
    finally:
        await events.close()  # whatever is still queued, before the attempt ends


async def _call_model(
    context: ActivityContext, input: ModelCallInput, events: EventBuffer
) -> ModelTurn:
    ref = input.run_ref
    assistant_key = f"{ref.run_id}:t{input.turn}:assistant"
    # Stored (oversized) tool results are copied into the transcript here: large data, which
    # a thread handles, as a long user message or a session this worker has not read yet (all
    # its entries since its last compaction); a turn's usual start is brief enough for the
    # event loop.
    brief = (
        not tool_result_ids(input.pending)
        and brief_write(*(entry.content for entry in input.pending))
        and context.store.contexts.holds((ref.partition_key, ref.session_id))
    )
    io = context.brief_io if brief else context.io
    try:
        done, rows, latest = await io(_prepare_context, context, input, assistant_key)
    except RunAlreadyEnded as refused:
        # Not retried: the workflow ends the run, and its finish finds the stored end.
        raise ApplicationError(
            refused.message,
            type=RUN_ALREADY_ENDED,
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        ) from None
    events.add(*call_completed_events(input.pending))
    # This turn's summary call, made by an attempt whose result was lost: it counts all the same.
    summarised = stored_summary(latest, ref, input.turn)
    if done is not None:
        # A retry after the turn was already stored: never call the model twice.
        done = _with_summary_usage(done, summarised)
        done = await with_approvals(
            context, ref, _with_output(done, input), client_tool_names(input)
        )
        return await _returnable(context, done, input)
    summary = latest.summary if latest is not None else None
    # An earlier attempt's worker died mid-call: its `model_started` gets its end first.
    attempt = _turn_attempt(input)
    events.add(*await lost_model_attempts(context, ref, input.turn, attempt))
    snapshot = await context.snapshot(ref.snapshot_version)
    profile = snapshot.models[input.model_profile_id]
    await check_spend_limit(context, ref.partition_key)
    claim = capacity.model_claim(snapshot, profile, ref, input.turn, rows)
    wait, waited_ms = await capacity.admit(
        context, claim, lambda wait: events.add(capacity.waiting_event(ref, input.turn, wait))
    )
    if wait is not None:
        # Nothing was asked of the provider: the run waits in its workflow (no slot held).
        return ModelTurn(capacity_wait=wait)
    if waited_ms:
        input = input.model_copy(update={"waited_ms": input.waited_ms + waited_ms})
    activity_metrics.note_capacity_wait(input.waited_ms)  # in its workflow and here
    async with capacity.holding(context, claim) as used:
        turn = await _answer(context, input, events, snapshot, rows, summary, summarised)
        used.append(_tokens_used(turn))
    turn = await with_approvals(context, ref, _with_output(turn, input), client_tool_names(input))
    return await _returnable(context, turn, input)


async def _answer(
    context: ActivityContext,
    input: ModelCallInput,
    events: EventBuffer,
    snapshot: RuntimeSnapshot,
    rows: list[EntryRow],
    summary: str | None,
    summarised: Summary | None,
) -> ModelTurn:
    """The turn's model call, its permits held: compact the context if it must, stream the
    answer, store it."""
    ref = input.run_ref
    assistant_key = f"{ref.run_id}:t{input.turn}:assistant"
    attempt = _turn_attempt(input)
    agent = snapshot.agent(ref.agent_id)
    profile = snapshot.models[input.model_profile_id]
    provider = context.provider_for(profile)
    # The contract's rules up front, so that the first answer can already meet them.
    system_prompt = system_prompt_for(snapshot, agent) + contract_instructions(
        input.result_contract
    )
    # Handoffs are for roots, and only while the run has some left.
    may_hand_off = ref.depth == 0 and input.handoff_allowed
    # A fallback offers the tools the run's own model would (an `inherit` target's choices).
    run_model = input.fallback_from or input.model_profile_id
    tools = _offered_tools(
        snapshot, agent, context.memory_tools, handoffs=may_hand_off, run_model=run_model
    )
    if input.shared_state:
        tools.append(SET_STATE_DEFINITION)
    taken = {str(tool["function"]["name"]) for tool in tools}
    tools += client_tool_definitions(input.client_tools, taken)
    request = ModelRequest(
        profile=profile,
        agent_id=agent.id,
        run_id=ref.run_id,
        turn=input.turn - input.turn_offset,  # the agent's own turn (after a handoff)
        attempt=activity.info().attempt,  # the profile's own (its error messages say it)
        messages=[],
        tools=tools,
        settings=generation_settings(profile, agent),
    )
    await events.flush()  # compaction writes its own events: keep them in order
    rows, summary, compaction = await compact_context(
        context, provider, request, input, system_prompt, rows, summary
    )
    compaction = compaction or summarised
    request = dataclasses.replace(
        request, messages=messages_from_entries(system_prompt, rows, summary)
    )
    # The hooks see (and may rewrite) what goes on the wire; the transcript keeps what was said.
    request, metadata = await before_model_call(context, snapshot, agent, request, events)
    genai_spans.note_model_request(request.messages)  # only when content capture is on
    queued = sum(1 for entry in input.pending if entry.queued)
    started: list[dict[str, Any]] = (
        [{"type": "user_message_queued", "count": queued}] if queued else []
    )
    # Written with the first delta (or the turn's end, whichever comes first).
    started_event = _model_started(input, attempt)
    if metadata:
        started_event["metadata"] = metadata
    events.add(*started, started_event)
    completed: dict[str, Any] = {
        "type": "model_completed",
        "turn": input.turn,
        "attempt": attempt,
        "model": profile.id,
    }
    try:
        wire = await with_part_bytes(context, request, ref)  # the hooks saw references only
        turn = priced(await _stream(context, provider, wire, input, events, attempt), profile)
        genai_spans.note_model_answer(
            turn.content, [(c.id, c.name, c.arguments) for c in turn.tool_calls], turn.finish_reason
        )
        # Audit hooks see the answer before it is kept (a refusal keeps nothing of it).
        noted = await after_model_call(context, snapshot, agent, request, turn, events)
        if noted:
            completed["metadata"] = noted
        # The answer, its last deltas and `model_completed`: one transaction.
        events.add({**completed, "usage": _usage(turn), "finish_reason": turn.finish_reason})
        row = _assistant_row(assistant_key, ref, turn, profile.id)
        store = context.store
        summariser = snapshot.policy.summary_model or input.model_profile_id
        spent = turn_spend(ref, turn, profile.id, compaction, summariser)
        await events.write_with(
            lambda bodies: store.append_entries_and_events(
                ref.partition_key, ref.session_id, [row], ref, bodies, spent
            ),
            brief=brief_write(*_written_texts(turn)),
        )
    except BaseException as error:
        if events.written_when_cancelled:
            raise  # the answer and its `model_completed` were stored all the same
        # Every `model_started` gets its `model_completed`: a failed or cancelled call too.
        # Keyed, as the end a later attempt would store for this one if it seemed lost.
        ended = "cancelled" if isinstance(error, asyncio.CancelledError) else str(error)
        events.add({**completed, "error": ended, **model_completed_key(ref, input.turn, attempt)})
        raise
    turn = turn.model_copy(update={"reasoning": ()})  # kept in the store, not in history
    return _with_summary_usage(turn, compaction)


def _tokens_used(turn: ModelTurn) -> int:
    """The call's tokens (its compaction's too), for the profile's tokens per minute."""
    total = turn.total_tokens or (turn.input_tokens or 0) + (turn.output_tokens or 0)
    return total + (turn.compaction_input_tokens or 0) + (turn.compaction_output_tokens or 0)


def _excerpt(text: str) -> str:
    """The start of ``text`` on one line, at most `SAID_EXCERPT_CHARS` characters."""
    line = " ".join(text.split())
    if len(line) <= SAID_EXCERPT_CHARS:
        return line
    return line[: SAID_EXCERPT_CHARS - 1].rstrip() + "…"


def _with_summary_usage(turn: ModelTurn, summary: Summary | None) -> ModelTurn:
    """``turn`` counting the turn's summary calls, if it made any: model calls of the run."""
    if summary is None:
        return turn
    return turn.model_copy(
        update={
            "compaction_calls": summary.calls,
            "compaction_input_tokens": summary.input_tokens,
            "compaction_output_tokens": summary.output_tokens,
            "compaction_cost": summary.cost,
        }
    )


def _prepare_context(
    context: ActivityContext, input: ModelCallInput, assistant_key: str
) -> tuple[ModelTurn | None, list[EntryRow], Compaction | None]:
    """Write pending entries (and the events inline tool results left to them); then the
    latest compaction, and the stored answer (a retry) or the entries after it."""
    ref = input.run_ref
    # One transaction: the referenced tool results, the pending entries, then the context.
    existing, compaction, entries = context.store.turn_context(
        ref.partition_key,
        ref.session_id,
        assistant_key,
        ref.run_id,
        tool_result_ids(input.pending),
        lambda stored: pending_rows(ref, input.pending, stored),
        events=context.deferred_events(ref, input.pending),
        # Only a turn that brings user messages can follow a stored end (`RunAlreadyEnded`).
        unless_ended=any(entry.queued for entry in input.pending),
    )
    if existing is not None:
        return turn_from_entry(existing), [], compaction
    return None, entries, compaction


def _offered_tools(
    snapshot: RuntimeSnapshot,
    agent: AgentDefinition,
    memory_tools: MemoryTools,
    *,
    handoffs: bool = True,
    run_model: str | None = None,
) -> list[dict[str, Any]]:
    """What the model sees: allowed tools, memory tools, `agent.call` if anyone is reachable,
    `agent.handoff` (if ``handoffs``: root runs with handoffs left) if anyone may take the
    conversation over."""
    names = snapshot.tool_names_for(agent)
    tools = tool_definitions(snapshot, names) + memory_tools.definitions(names)
    tools += human_tools(agent)
    tools += sleep_tools(snapshot, agent)
    reachable = snapshot.reachable_agents(agent)
    choices = model_choices(snapshot, reachable, run_model or snapshot.default_model)
    if reachable:
        tools.append(agent_call_tool_definition(reachable, choices))
    targets = snapshot.handoff_targets(agent) if handoffs else []
    if targets:
        choose = agent.handoff.model_may_choose_context
        tools.append(handoff_tool_definition(targets, may_choose_context=choose))
    if snapshot.may_spawn(agent):
        tools += spawn_tool_definitions(reachable, choices)
    return tools


def client_tool_names(input: ModelCallInput) -> frozenset[str]:
    """The client tools a call of this turn may name (`otherone.client_tools`)."""
    return frozenset(tool.name for tool in input.client_tools)


def _turn_attempt(input: ModelCallInput) -> int:
    """This attempt's number among the turn's: after those of the profiles that failed
    before this one (its fallback answers), so each attempt keeps its own events."""
    return input.attempt_offset + activity.info().attempt


def _model_started(input: ModelCallInput, attempt: int) -> dict[str, Any]:
    """Which profile answers (and, a fallback, for which); a retry's deltas replace the
    earlier attempts' text of the same turn: say so; and how long the call waited for fleet
    capacity, if it did."""
    event: dict[str, Any] = {
        "type": "model_started",
        "turn": input.turn,
        "attempt": attempt,
        "model": input.model_profile_id,
    }
    if input.fallback_from is not None:
        event["fallback_from"] = input.fallback_from
    if attempt > 1:
        event["supersedes_attempt"] = attempt - 1
    if input.waited_ms:
        event["waited_ms"] = input.waited_ms
    return event


async def _stream(
    context: ActivityContext,
    provider: ModelProvider,
    request: ModelRequest,
    input: ModelCallInput,
    events: EventBuffer,
    attempt: int,
) -> ModelTurn:
    ref = input.run_ref
    deltas = DeltaBuffer(events, input.turn, attempt)
    collector = TurnCollector(limit_bytes=input.result_limit_bytes)

    async def on_thinking(text: str) -> None:
        if ref.include_thinking_events:
            await deltas.add("thinking_delta", text)

    try:
        async with heartbeating():
            turn = await collector.consume(
                provider.stream(request),
                lambda text: deltas.add("model_delta", text),
                on_thinking,
            )
    except OutputLimitExceeded as error:
        raise failure(FailureCode.BUDGET_EXCEEDED, f"max_result_bytes: {error}") from error
    except ProviderError as error:
        if error.retry_after:
            await capacity.pause(context, request.profile.id, error.retry_after)
        delay = timedelta(seconds=error.retry_after) if error.retry_after else None
        raise failure(
            FailureCode.MODEL_ERROR,
            error.message,
            retryable=error.retryable,
            next_retry_delay=delay,
        ) from error
    finally:
        deltas.queue()  # written with the turn's end (or by `EventBuffer.close`)
    return turn


class DeltaBuffer:
    """Batches stream deltas into few event writes; each carries the activity attempt."""

    def __init__(self, events: EventBuffer, turn: int, attempt: int) -> None:
        self.events, self.turn, self.attempt = events, turn, attempt
        self.parts: list[tuple[str, str]] = []
        # The first delta goes out at once (first-token latency); later ones are batched.
        self.last_flush = float("-inf")

    async def add(self, kind: str, text: str) -> None:
        if self.parts and self.parts[-1][0] == kind:
            self.parts[-1] = (kind, self.parts[-1][1] + text)
        else:
            self.parts.append((kind, text))
        if time.monotonic() - self.last_flush >= DELTA_FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write the deltas so far as soon as the event loop is free (with whatever else the
        activity queued): the stream goes on meanwhile, and a turn that ends first writes
        them with its answer."""
        self.queue()
        self.last_flush = time.monotonic()
        self.events.write_soon()

    def queue(self) -> None:
        """Hand the deltas so far to the activity's `EventBuffer`."""
        parts, self.parts = self.parts, []
        self.events.add(
            *(
                {"type": kind, "content": text, "turn": self.turn, "attempt": self.attempt}
                for kind, text in parts
            )
        )


def _assistant_row(key: str, ref: RunRef, turn: ModelTurn, profile_id: str) -> EntryRow:
    return EntryRow(
        entry_key=key,
        role="assistant",
        content=turn.content,
        tool_calls=wire_tool_calls(turn.tool_calls) or None,
        usage={**_usage(turn), "finish_reason": turn.finish_reason, "model": profile_id},
        run_id=ref.run_id,
        meta={REASONING_KEY: list(turn.reasoning)} if turn.reasoning else None,
    )


def _written_texts(turn: ModelTurn) -> list[str]:
    """The texts of the turn's stored entry: its answer, its calls' arguments, its reasoning."""
    texts = [turn.content, *(call.arguments for call in turn.tool_calls)]
    if turn.reasoning:
        texts.append(json.dumps(list(turn.reasoning)))
    return texts


def _usage(turn: ModelTurn) -> dict[str, Any]:
    """The call's usage as its event and stored entry say it (a cost as a decimal string)."""
    usage: dict[str, Any] = {
        "input_tokens": turn.input_tokens,
        "output_tokens": turn.output_tokens,
        "total_tokens": turn.total_tokens,
    }
    if turn.cache_read_tokens is not None or turn.cache_write_tokens is not None:
        usage["cache_read_tokens"] = turn.cache_read_tokens
        usage["cache_write_tokens"] = turn.cache_write_tokens
    if turn.cost is not None:
        usage["cost"] = plain_decimal(turn.cost)
    return usage


def priced(turn: ModelTurn, profile: ModelProfile) -> ModelTurn:
    """``turn`` with its cost at ``profile``'s prices (`otherone.pricing`)."""
    tokens = CallTokens(
        input=turn.input_tokens or 0,
        output=turn.output_tokens or 0,
        cache_read=turn.cache_read_tokens or 0,
        cache_write=turn.cache_write_tokens or 0,
    )
    return turn.model_copy(update={"cost": call_cost(profile, tokens)})


def _with_output(turn: ModelTurn, input: ModelCallInput) -> ModelTurn:
    """Apply the run's result contract to a final answer."""
    if turn.tool_calls:
        return turn
    output, problem = apply_result_contract(turn.content, input.result_contract)
    reason = turn.finish_reason
    if reason is not None and reason not in NORMAL_FINISH_REASONS:
        output = output.model_copy(update={"finish_reason": reason})
    return turn.model_copy(update={"output": output, "output_error": problem})


async def _returnable(
    context: ActivityContext, turn: ModelTurn, input: ModelCallInput
) -> ModelTurn:
    """Keep what goes back into the workflow's history under the inline payload limit, and
    out of it what the workflow does not read (it is in the stored entry): the finish reason,
    and the text of a turn that calls tools (but for its first words, `ModelTurn.said`)."""
    if turn.finish_reason is not None or (turn.tool_calls and turn.content):
        text = "" if turn.tool_calls else turn.content
        said = _excerpt(turn.content) if turn.tool_calls else ""
        turn = turn.model_copy(update={"finish_reason": None, "content": text, "said": said})
    snapshot = await context.snapshot(input.run_ref.snapshot_version)
    if not needs_offload(turn, snapshot.policy.inline_payload_bytes):
        return turn
    return await context.io(offload_turn, context.store, input.run_ref, turn, input.turn)
