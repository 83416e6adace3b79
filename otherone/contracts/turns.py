"""One turn of a run: the model call, the tool calls it asks for, and the transcript entries
they leave for the workflow to have written."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import JsonValue

from otherone.client_tools import ClientTool
from otherone.contracts.approvals import ApprovalNeed
from otherone.contracts.refs import RunRef, _Contract, resolved_ref
from otherone.parts import Part
from otherone.run_types import Money
from otherone.runs import AgentOutput, ResultContract
from otherone.tools import ToolErrorKind

#: Longest excerpt of a tool-calling turn's text kept in its history (`ModelTurn.said`).
SAID_EXCERPT_CHARS = 200


class PendingEntry(_Contract):
    """A transcript entry the workflow wants written before the next model call.

    Tool results over `RuntimeLimits.inline_tool_result_bytes` are referenced
    (``tool_result_of``) rather than copied: the tool activity stored them, so they never pass
    through workflow history. Smaller ones are inline (``content``, ``tool_arguments``).
    """

    key: str
    role: Literal["user", "assistant", "system", "tool"]
    content: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_result_of: str | None = None
    error_kind: ToolErrorKind | None = None
    #: A user message that was queued by signal (counted in `user_message_queued` events).
    queued: bool = False
    #: Agent call ids whose result, inline in ``content`` (``results`` items and ``result``
    #: of the spawn tools), is replaced by the one their child stored, when it did: the model
    #: reads a spawned child's output as it reads an `agent.call` child's, not the artifact
    #: reference an output above the inline payload limit travels as.
    stored_results_of: tuple[str, ...] = ()
    #: The call's arguments, for a tool result that came back inline (`ToolOutcome.content`):
    #: its `tool_started`/`tool_completed` events are not stored yet; whoever writes this
    #: entry writes them with it, in the same transaction (so once, whatever is retried).
    tool_arguments: str | None = None
    #: A user message's parts (text, and images and files by `PartRef`, never their bytes);
    #: ``content`` is then their text. Empty: a text entry.
    parts: tuple[Part, ...] = ()


class ToolCallSpec(_Contract):
    id: str
    name: str
    arguments: str


#: How long an activity rides out a store outage in place (heartbeating) before its attempt
#: fails with a retryable `storage_error` (`ActivityContext.io`). A tool activity's
#: start-to-close timeout covers it on top of the tool's own: a tool that succeeded just before
#: an outage must not be timed out while its result is being stored, which would fail the call
#: although its side effect happened, or run it again.
STORE_OUTAGE_PATIENCE = timedelta(minutes=2)
#: The usual result limit (`RuntimeLimits.max_result_bytes`' default): as a default of the inputs
#: below, it is left out of their payloads (`otherone.payloads`).
DEFAULT_RESULT_LIMIT_BYTES = 256 * 1024


class ModelCallInput(_Contract):
    #: The run, or its `RunRef.key` (resolved by the activity before use: `run_ref`).
    ref: RunRef | str
    model_profile_id: str
    turn: int
    pending: tuple[PendingEntry, ...] = ()
    result_limit_bytes: int = DEFAULT_RESULT_LIMIT_BYTES
    #: The run's result contract, applied to a final answer (one without tool calls).
    result_contract: ResultContract | None = None
    #: The session's context window and the share of it that triggers a compaction.
    context_window: int = 8192
    compaction_threshold: float = 0.8
    #: Events the workflow decided since its last activity (refused tool calls, refused
    #: messages, ...): this activity stores them first (see `DecidedEvents`).
    events: tuple[dict[str, JsonValue], ...] = ()
    #: Turns played by earlier agents of the run (`RunPlan.turn_offset`): the model request's
    #: turn is the agent's own (``turn - turn_offset``).
    turn_offset: int = 0
    #: False once the run has used its ``max_handoffs``: `agent.handoff` is then not offered
    #: (a call would only be refused).
    handoff_allowed: bool = True
    #: How long the turn has waited for fleet capacity so far (`CapacityWait`): its
    #: `model_started` event says so.
    waited_ms: int = 0
    #: Attempts the turn's earlier profiles made before this one answers it as their
    #: fallback: this call's attempts are numbered after theirs in its events.
    attempt_offset: int = 0
    #: The turn's first profile (the run's model) when this call is its fallback.
    fallback_from: str | None = None
    #: Tools the client runs (a root's `AgentRunRequest.client_tools`): offered to the model,
    #: and a call to one waits for the client's result.
    client_tools: tuple[ClientTool, ...] = ()
    #: The root shares the front end's state: `ui.set_state` is offered.
    shared_state: bool = False

    @property
    def run_ref(self) -> RunRef:
        return resolved_ref(self.ref)


class CapacityWait(_Contract):
    """A model call refused a fleet permit for now (`otherone.store.capacity`): the run waits
    ``retry_in_ms`` (or until a `SIGNAL_CAPACITY_FREED`) in its workflow, holding no worker
    slot, and asks again. ``scope`` is what is short (``model@QUEUE``: the fleet's
    ``max_concurrent_model_calls``; ``profile:ID``: the model profile's own limits), ``reason``
    which limit (``max_concurrent``, ``requests_per_minute``, ``tokens_per_minute``,
    ``paused`` by a provider's 429, ``queued`` behind fairer claims)."""

    retry_in_ms: int
    scope: str
    reason: str


class ModelTurn(_Contract):
    content: str = ""
    tool_calls: tuple[ToolCallSpec, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    #: The parts of ``input_tokens`` read from and written to the provider's prompt cache.
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    #: What the call cost in US dollars at its profile's prices (None: not priced).
    cost: Money | None = None
    finish_reason: str | None = None
    #: The final answer under the run's result contract (None while tools are called).
    output: AgentOutput | None = None
    #: Why the final answer violates the result contract.
    output_error: str | None = None
    #: Tool calls of this turn that wait for a person (decided by the model-call activity, so
    #: that predicates over arguments never run in the workflow).
    approvals: tuple[ApprovalNeed, ...] = ()
    #: The provider's reasoning blocks to send back with this turn (Anthropic's signed thinking
    #: blocks). Stored with the assistant entry; never returned to the workflow.
    reasoning: tuple[dict[str, JsonValue], ...] = ()
    #: Summary model calls this attempt made to compact the context first (0 or 1), and their
    #: tokens: the run's usage and budgets count them too.
    compaction_calls: int = 0
    compaction_input_tokens: int | None = None
    compaction_output_tokens: int | None = None
    compaction_cost: Money | None = None
    #: The start of what the model said on a turn that also calls tools (its text is in the
    #: store, not in history): up to `SAID_EXCERPT_CHARS`, so `temporal workflow show` and the
    #: Web UI read as a conversation. The workflow never reads it.
    said: str = ""
    #: Set instead of an answer when the call could not get its fleet permits yet.
    capacity_wait: CapacityWait | None = None

    def compaction_usage(self) -> ModelTurn:
        """The compaction's tokens, shaped as a turn's usage (for `UsageCounter`)."""
        used_in, used_out = self.compaction_input_tokens, self.compaction_output_tokens
        total = used_in + used_out if used_in is not None and used_out is not None else None
        return ModelTurn(
            input_tokens=used_in,
            output_tokens=used_out,
            total_tokens=total,
            cost=self.compaction_cost,
        )


class ToolCallInput(_Contract):
    #: The run, or its `RunRef.key` (resolved by the activity before use: `run_ref`).
    ref: RunRef | str
    call: ToolCallSpec
    result_limit_bytes: int = DEFAULT_RESULT_LIMIT_BYTES
    #: Whether a small result may come back inline (`ToolOutcome.content`): up to the run's
    #: `RuntimeLimits.inline_tool_result_bytes`, when nothing of the call was stored yet (no
    #: store write on the tool's path). False (workflows from before it): every result is
    #: stored and referenced. (A flag, not the size: this input is in every call's history.)
    inline: bool = False

    @property
    def run_ref(self) -> RunRef:
        return resolved_ref(self.ref)


class ToolOutcome(_Contract):
    tool_call_id: str
    name: str
    error_kind: ToolErrorKind | None = None
    error: str | None = None
    result_bytes: int = 0
    oversized: bool = False
    #: The result itself, when it came back inline (`ToolCallInput.inline`): nothing was
    #: stored, not even the call's events (`PendingEntry.tool_arguments`); ``result_bytes`` is
    #: left out then (it is the content's size).
    content: str | None = None
    #: Set instead of a result when the call could not get its fleet permit yet (nothing ran).
    capacity_wait: CapacityWait | None = None
