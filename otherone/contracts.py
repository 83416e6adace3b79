"""Typed inputs and outputs of every workflow, activity, signal and query.

Workflows and activities both import this module (and nothing else from each other), so the
workflow sandbox never loads I/O code. One input and one result type per entry point, so that
fields can be added compatibly later (the Temporal samples' advice).

Activity inputs carry *references* (run, session, snapshot version, tool call ids) rather than the
conversation: the transcript lives in the store, so workflow history grows linearly with the run.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    model_validator,
)

from otherone.definitions import HandoffPolicy, RuntimeLimits, TreeBudget
from otherone.runs import (
    AgentCallRequest,
    AgentCallResult,
    AgentFailure,
    AgentOutput,
    AgentRunRequest,
    AgentRunResult,
    EventVisibility,
    HandoffStep,
    ResultContract,
    RunRecord,
    RunStatus,
    RunUsage,
    unencodable_path,
)
from otherone.tools import ToolErrorKind
from otherone.workflow_names import MEMO_FINGERPRINT as MEMO_FINGERPRINT
from otherone.workflow_names import MEMO_IDEMPOTENCY_KEY as MEMO_IDEMPOTENCY_KEY
from otherone.workflow_names import QUERY_APPROVALS as QUERY_APPROVALS
from otherone.workflow_names import QUERY_RECORD as QUERY_RECORD
from otherone.workflow_names import QUERY_RUN_REF as QUERY_RUN_REF
from otherone.workflow_names import SIGNAL_SPAWNED_RUN_ENDED as SIGNAL_SPAWNED_RUN_ENDED
from otherone.workflow_names import SIGNAL_USER_MESSAGES as SIGNAL_USER_MESSAGES
from otherone.workflow_names import UPDATE_CALL_AGENT as UPDATE_CALL_AGENT
from otherone.workflow_names import UPDATE_DECIDE_APPROVAL as UPDATE_DECIDE_APPROVAL
from otherone.workflow_names import WORKFLOW_NAME as WORKFLOW_NAME

ACTIVITY_PREPARE_RUN = "otherone.prepare_run"
ACTIVITY_CALL_MODEL = "otherone.call_model"
ACTIVITY_RUN_TOOL = "otherone.run_tool"
ACTIVITY_FINISH_RUN = "otherone.finish_run"
ACTIVITY_PREPARE_CALL = "otherone.prepare_call"
ACTIVITY_RECORD_DECISION = "otherone.record_approval_decision"
ACTIVITY_HAND_OFF = "otherone.hand_off"
#: Ask Temporal which of some runs have ended (spawned children a caller did not start in its
#: current history, so it holds no handle that would tell it).
ACTIVITY_DESCRIBE_RUNS = "otherone.describe_runs"
#: Store activities (prepare, check a call, finish) heartbeat: a worker killed while running
#: one is noticed after this long, and the activity runs again elsewhere.
STORE_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
#: They ride out a database outage in place for up to 2 minutes (`ActivityContext.io`).
STORE_ACTIVITY_TIMEOUT = timedelta(minutes=5)
#: All attempts of a store activity together: a store that stays down or keeps refusing a write
#: ends the run (`storage_error`) instead of keeping it alive for ever.
STORE_TOTAL_TIMEOUT = timedelta(minutes=10)


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunRef(_Contract):
    """Who is acting: enough lineage for storage scoping and event envelopes."""

    run_id: str
    root_run_id: str
    parent_run_id: str | None = None
    #: The `agent.call` that started this run (children only).
    agent_call_id: str | None = None
    agent_id: str
    depth: int = 0
    partition_key: str
    session_id: str
    #: The run's fixed snapshot ("" only in the prepare step of a new root).
    snapshot_version: str
    include_thinking_events: bool = False
    #: The root request's event visibility; it filters the events of descendants only.
    event_visibility: EventVisibility = "all"

    def key(self) -> str:
        """A short digest of this reference: model and tool inputs carry it instead of the
        whole reference (written into history twice per turn); a worker resolves it from its
        cache (`otherone.activities.run_refs`) or, once, by `QUERY_RUN_REF`."""
        return hashlib.blake2b(self.model_dump_json().encode(), digest_size=5).hexdigest()


def resolved_ref(ref: RunRef | str) -> RunRef:
    """The reference of an input whose activity has resolved its compact key."""
    if isinstance(ref, str):
        raise TypeError(f"run reference '{ref}' was not resolved")
    return ref


class RunInput(_Contract):
    """Input of `AgentRunWorkflow` (roots and, later, children)."""

    run_id: str
    root_run_id: str
    request: AgentRunRequest
    parent_run_id: str | None = None
    agent_call_id: str | None = None
    depth: int = 0
    ancestry: tuple[str, ...] = ()
    #: Fixed by the root when it starts; children inherit it.
    snapshot_version: str | None = None
    #: Absolute deadline inherited from the caller (a child's never exceeds its parent's).
    deadline: datetime | None = None
    #: A child's result contract (from its agent call). A root's is its request's
    #: ``result_contract``; when both are set, this one wins.
    result_contract: ResultContract | None = None
    max_iterations: int | None = None
    internal_session: bool = False
    #: A child's allowance; None for a root (its budget comes from its limits).
    budget: TreeBudget | None = None
    caller_agent_id: str | None = None
    #: The caller's model, for targets whose model is ``inherit``.
    caller_model_profile_id: str | None = None
    #: Set when this history continues an earlier one of the same run.
    carry: CarryOver | None = None
    #: Started by `agent.spawn`: the run reports its result to its caller (a signal) when it
    #: ends, since the caller may have continued as new meanwhile.
    spawned: bool = False

    @property
    def effective_result_contract(self) -> ResultContract | None:
        """The contract the run's final answer must meet (None: any text)."""
        return self.result_contract or self.request.result_contract


class CarryOver(_Contract):
    """What a run hands to its next Temporal history when it continues as new.

    Everything the loop needs to go on exactly where it stopped: the plan, clocks, counters, the
    budget share, queued messages, entries not yet written and the results of agent calls (so a
    repeated call id still never runs a second child).
    """

    plan: RunPlan
    session_id: str
    started_at: datetime
    deadline_at: datetime
    iteration: int
    usage: RunUsage
    budget: TreeBudget
    queued: tuple[str, ...] = ()
    pending: tuple[PendingEntry, ...] = ()
    call_results: dict[str, AgentCallResult] = Field(default_factory=dict)
    children_started: int = 0
    generation: int = 1
    #: Approval requests of earlier histories (decided ones: a repeated decision stays
    #: idempotent, and the audit stays queryable).
    approvals: tuple[ApprovalRequest, ...] = ()
    #: Events the workflow decided and no activity has stored yet.
    events: tuple[dict[str, JsonValue], ...] = ()
    #: Output retries already taken (they are counted per run, not per history).
    output_retries_used: int = 0
    #: The handoffs of this run so far, oldest first (``agent.handoff``).
    handoffs: tuple[HandoffStep, ...] = ()
    #: Calls made with `agent.spawn`: the open ones are awaited again in the next history.
    spawns: tuple[SpawnedCall, ...] = ()


class HandOffInput(_Contract):
    """Activity input: store the turn's entries, shape the session for the next agent (its
    context policy), announce the handoff and plan the run under the next agent."""

    ref: RunRef
    #: The current agent's plan (queues, limits and model are carried from it).
    plan: RunPlan
    step: HandoffStep
    #: The number of this handoff in the run (1 for the first).
    number: int
    message: str | None = None
    last_turns: int = 3
    pending: tuple[PendingEntry, ...] = ()
    events: tuple[dict[str, JsonValue], ...] = ()
    #: The run's record so far (its lineage, timestamps, usage), rewritten for the next agent.
    record: RunRecord
    #: Answer with a `HandOffResult` (the plan and the summary's usage), not the bare plan
    #: (what workflows from before summaries were counted expect).
    with_usage: bool = False


class HandOffResult(_Contract):
    """Activity result: the plan under the next agent, and the tokens the ``summary``
    context's model call used (the run's budget and usage count them; the workflow reserves
    the model call itself before the activity, as for a turn). None: no model was called in
    this attempt, or the provider did not say."""

    plan: RunPlan
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None


class SpawnedCall(_Contract):
    """One `agent.spawn` of a run: its handle (the call id), its child and, once it ended (or
    was refused), its result."""

    call_id: str
    target: str
    #: The child's run id (= workflow id); None when the call was refused before a child ran.
    run_id: str | None = None
    result: AgentCallResult | None = None
    #: An `agent.await` (or status, cancel) has returned the result to the model.
    reported: bool = False


class DescribeRunsInput(_Contract):
    """Activity input: the runs (workflow ids) to ask Temporal about."""

    run_ids: tuple[str, ...]


class EndedRun(_Contract):
    """A run Temporal reports as ended: the status of its latest execution (``completed``,
    ``failed``, ``canceled``, ``terminated``, ``timed_out``; ``not_found`` when Temporal no
    longer knows it) and, when it completed, its result."""

    run_id: str
    status: str
    result: AgentRunResult | None = None


class EndedRuns(_Contract):
    """Activity result: the asked-about runs that have ended (running ones are left out)."""

    ended: tuple[EndedRun, ...] = ()


class SpawnEnded(_Contract):
    """Signal payload: a spawned child's result, sent by the child to its caller."""

    call_id: str
    result: AgentRunResult


class UserMessages(_Contract):
    """Signal payload: messages queued for the run, taken at the next safe point."""

    messages: tuple[str, ...]


class PrepareRunInput(_Contract):
    """``ref.snapshot_version`` is empty for a new root: the worker fixes its current snapshot."""

    ref: RunRef
    internal_session: bool
    request: AgentRunRequest
    #: Deadline inherited from the caller, if any; the session lease never outlives the run.
    inherited_deadline: datetime | None = None
    caller_model_profile_id: str | None = None
    #: A caller's `max_iterations` for this call (only tightens).
    max_iterations: int | None = None
    #: The run's result contract (`RunInput.effective_result_contract`), checked here for runs
    #: started by clients that do not check it.
    result_contract: ResultContract | None = None


class ToolSettings(_Contract):
    timeout_seconds: float
    max_attempts: int


class RunPlan(_Contract):
    """Everything the workflow needs to decide deterministically, resolved once on a worker."""

    snapshot_version: str
    agent_id: str
    agent_version: int
    model_profile_id: str
    model_label: str
    limits: RuntimeLimits
    max_iterations: int
    result_limit_bytes: int
    timeout: timedelta
    parallel_tool_calls: bool
    tools: dict[str, ToolSettings]
    #: Agents this run may call through ``agent.call`` (empty: the tool is not offered).
    reachable_agents: tuple[str, ...] = ()
    #: Agents this run may hand its conversation to (``agent.handoff``; roots only).
    handoff_targets: tuple[str, ...] = ()
    #: The agent's handoff policy (context policy, turns kept), when it has targets.
    handoff: HandoffPolicy | None = None
    #: Turns of the run played by earlier agents (before the latest handoff): this agent's
    #: own turn n is the run's turn ``turn_offset + n``.
    turn_offset: int = 0
    continue_as_new_after_turns: int = 500
    #: Task queues of this run's model calls and tool calls, fixed by the worker that prepared
    #: it (`otherone.worker.queues`). None: the run's own workflow task queue — what plans recorded
    #: before queues could be split mean too.
    model_task_queue: str | None = None
    tool_task_queue: str | None = None
    #: Times the run may answer again after breaking its result contract (0 in plans recorded
    #: before output retries existed: those runs never retry).
    output_retries: int = 0
    #: `agent.spawn`, `agent.await`, `agent.status` and `agent.cancel` are offered (the agent
    #: and the runtime policy allow spawning, and some agent is reachable).
    spawn: bool = False
    #: What happens to spawned children still running when the run completes.
    spawned_on_exit: Literal["cancel", "wait"] = "cancel"


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


class ToolCallSpec(_Contract):
    id: str
    name: str
    arguments: str


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

    @property
    def run_ref(self) -> RunRef:
        return resolved_ref(self.ref)


class ModelTurn(_Contract):
    content: str = ""
    tool_calls: tuple[ToolCallSpec, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
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

    def compaction_usage(self) -> ModelTurn:
        """The compaction's tokens, shaped as a turn's usage (for `UsageCounter`)."""
        used_in, used_out = self.compaction_input_tokens, self.compaction_output_tokens
        total = used_in + used_out if used_in is not None and used_out is not None else None
        return ModelTurn(input_tokens=used_in, output_tokens=used_out, total_tokens=total)


class ApprovalNeed(_Contract):
    """One tool call of a turn that waits for a person: an approval, or a `human.ask` question."""

    call_id: str
    kind: Literal["approval", "question"] = "approval"
    #: The question of a `human.ask` call.
    question: str | None = None
    approvers: tuple[str, ...] = ()
    timeout: timedelta | None = None
    on_timeout: Literal["deny", "fail"] = "deny"


class ApprovalOutcome(_Contract):
    """What was decided, by whom and when (``timed_out``: nobody decided in time)."""

    decision: Literal["approved", "denied", "answered", "timed_out"]
    #: Edited arguments (JSON text) an approval replaced the model's with.
    arguments: str | None = None
    reason: str | None = None
    #: The answer to a question.
    text: str | None = None
    decided_by: str
    decided_at: datetime


class ApprovalRequest(_Contract):
    """A tool call waiting for (or decided by) a person; `decision` None while it is open."""

    run_id: str
    root_run_id: str
    agent_id: str
    partition_key: str
    call_id: str
    tool_name: str
    arguments: str
    kind: Literal["approval", "question"] = "approval"
    question: str | None = None
    approvers: tuple[str, ...] = ()
    requested_at: datetime
    timeout_at: datetime | None = None
    on_timeout: Literal["deny", "fail"] = "deny"
    decision: ApprovalOutcome | None = None

    @property
    def is_open(self) -> bool:
        return self.decision is None


_DecisionText = Annotated[str, StringConstraints(min_length=1, max_length=64 * 1024)]


class ApprovalDecision(_Contract):
    """Update payload of `decide_approval`: approve (optionally with edited arguments), deny
    with a reason, or answer a `human.ask` question. ``identity`` names who decides (the
    client's identity; recorded in events and the store)."""

    call_id: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    decision: Literal["approve", "deny", "answer"]
    arguments: dict[str, JsonValue] | None = None
    reason: _DecisionText | None = None
    text: _DecisionText | None = None
    identity: Annotated[str, StringConstraints(max_length=256)] = ""

    @model_validator(mode="after")
    def _fields_fit_decision(self) -> Self:
        where = unencodable_path(self)
        if where is not None:
            raise ValueError(f"{where}: must be valid UTF-8 text (it holds a lone surrogate)")
        if self.arguments is not None and self.decision != "approve":
            raise ValueError("arguments: only an approval may edit the arguments")
        if self.decision == "deny" and (self.reason is None or not self.reason.strip()):
            raise ValueError("reason: a denial needs a reason")
        if self.decision == "answer" and (self.text is None or not self.text.strip()):
            raise ValueError("text: an answer needs text")
        if self.decision != "answer" and self.text is not None:
            raise ValueError("text: only an answer has text")
        return self


class RecordDecisionInput(_Contract):
    """Activity input: check edited arguments against the tool's schema, then record the
    decision (event `approval_decided`)."""

    ref: RunRef
    request: ApprovalRequest
    outcome: ApprovalOutcome


class CallAgentInput(_Contract):
    """Update payload of a trusted programmatic call (same idempotency by call id)."""

    call_id: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    request: AgentCallRequest


class PrepareCallInput(_Contract):
    caller: RunRef
    ancestry: tuple[str, ...]
    call_id: str
    request: AgentCallRequest
    limits: RuntimeLimits
    #: Events the workflow decided since its last activity (stored first).
    events: tuple[dict[str, JsonValue], ...] = ()
    #: Made with `agent.spawn` (announced as such): the caller does not wait for the child.
    spawned: bool = False
    #: The workflow id the child will have (announced in `agent_call_started`, so viewers need
    #: not know which id formula the run is on). None from runs recorded before it was sent.
    child_run_id: str | None = None
    #: The caller's model profile (a target whose model is ``inherit`` runs on it).
    caller_model_profile_id: str | None = None


class CallPlan(_Contract):
    """A checked agent call: who runs, with what input (task, context, parent excerpt)."""

    target_id: str
    child_input: str
    #: The child's Web UI details (markdown); None from checks recorded before they existed.
    details: str | None = None


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


class FinishRunInput(_Contract):
    ref: RunRef
    pending: tuple[PendingEntry, ...] = ()
    status: RunStatus
    usage: RunUsage
    failure: AgentFailure | None = None
    output: AgentOutput | None = None
    release_session: bool = True
    #: Events the workflow decided and no activity has stored yet.
    events: tuple[dict[str, JsonValue], ...] = ()
    #: The run's final record (stored for `otherone show`/lists without Temporal's retention).
    record: RunRecord | None = None


class EventRecord(_Contract):
    """One stored event envelope (schema_version 1)."""

    schema_version: Literal[1] = 1
    event_id: str
    sequence: int
    timestamp: datetime
    root_run_id: str
    run_id: str
    parent_run_id: str | None
    agent_id: str
    depth: int
    event: dict[str, JsonValue] = Field(default_factory=dict)


_SAFE_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def child_run_id(
    root_run_id: str, caller_run_id: str, call_id: str, target: str | None = None
) -> str:
    """Workflow id of the child started by ``call_id``: the same call id, the same child.

    With the ``target`` agent (runs on the `readable-child-ids` path):
    ``<caller>/<target>.<call id>``, e.g. ``invoice-42-3f9a1c0b7d2e4f6a/researcher.call_1``.
    Agent ids hold no ``.`` and call ids kept as they are hold no ``.`` or ``/``, so the id
    reads back unambiguously and stays unique per caller. Without ``target``: the formula
    before readable ids (``<caller>/<call id>``), still used by runs on the old path and by
    events stored before. Either way the call id is hashed when it holds other characters
    than letters, digits, ``_-``, and a deep tree whose id would grow too long falls back to
    ``<root>/<digest>`` (keeping the target when known).
    """
    digest = hashlib.sha256(f"{caller_run_id}\x00{call_id}".encode()).hexdigest()
    safe = call_id if _SAFE_CALL_ID.fullmatch(call_id) else f"h{digest[:24]}"
    if target is None:
        candidate = f"{caller_run_id}/{safe}"
        return candidate if len(candidate) <= 255 else f"{root_run_id}/{digest[:40]}"
    candidate = f"{caller_run_id}/{target}.{safe}"
    return candidate if len(candidate) <= 255 else f"{root_run_id}/{target}.h{digest[:40]}"


#: Activity inputs and results: written by our workers, read by our workers and workflows only,
#: so their payloads leave out the fields at their defaults (`otherone.payloads`).
COMPACT_PAYLOAD_TYPES: tuple[type[BaseModel], ...] = (
    PrepareRunInput,
    RunPlan,
    ModelCallInput,
    ModelTurn,
    ToolCallInput,
    ToolOutcome,
    PrepareCallInput,
    CallPlan,
    RecordDecisionInput,
    FinishRunInput,
)
