"""A run's own contracts: its workflow input, its plan, what it carries to its next history,
its handoffs, its messages, its finish and its stored events."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import Field, JsonValue

from otherone.contracts.agent_calls import SpawnedCall
from otherone.contracts.approvals import ApprovalRequest
from otherone.contracts.guardrails import GuardrailPlan
from otherone.contracts.refs import RunRef, _Contract
from otherone.contracts.turns import PendingEntry
from otherone.contracts.webhooks import WebhookPlan
from otherone.definitions import HandoffPolicy, RuntimeLimits, TreeBudget
from otherone.parts import QueuedMessage
from otherone.run_types import Money
from otherone.runs import (
    AgentCallResult,
    AgentFailure,
    AgentOutput,
    AgentRunRequest,
    ForkOrigin,
    HandoffStep,
    ResultContract,
    RunRecord,
    RunStatus,
    RunUsage,
)


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
    #: A root started by `AgentClient.fork`: the run and turn it was forked from (recorded on
    #: its record and result; its session already shares the original's turns before it).
    forked_from: ForkOrigin | None = None

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
    queued: tuple[QueuedMessage, ...] = ()
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
    #: What the summary's model call cost (US dollars; None: not priced).
    cost: Money | None = None


class UserMessages(_Contract):
    """Signal payload: messages queued for the run, taken at the next safe point."""

    #: Text, or parts (`otherone.parts`: images and files by reference only, stored by
    #: `AgentClient.send_message` where they entered).
    messages: tuple[QueuedMessage, ...]


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
    #: The run's deadline while it is being prepared: an attempt that starts after it ends the
    #: run timed out at once. The workflow bounds the activity by the same deadline; this
    #: holds too where a retried local activity outlives that bound (a workflow task run
    #: again under load was seen to retry one for 90 s past a 4 s bound).
    give_up_at: datetime | None = None
    #: The workflow's first execution run id (`RunRecord.execution_id`): the run's record is
    #: this execution's, and another execution of the same id is refused. None: an older
    #: workflow's input (its record names no execution).
    execution_id: str | None = None
    #: The root's `RunInput.forked_from`, stored on its record.
    forked_from: ForkOrigin | None = None


class ToolSettings(_Contract):
    timeout_seconds: float
    max_attempts: int


class PlannedModel(_Contract):
    """A model profile a run's turns may be answered by: a fallback of its model."""

    profile_id: str
    #: ``provider/model``, for the Web UI's activity summaries.
    label: str
    #: Attempts of a call on it (its profile's `max_attempts`); None: `MODEL_RETRY`'s 5.
    attempts: int | None = None


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
    #: MCP servers the agent was granted tools of that offered none (server -> why), for the
    #: run's record (plans recorded before it: none).
    mcp_unavailable: dict[str, str] = {}
    #: Attempts of a model call on the run's model (its profile's `max_attempts`); None: 5,
    #: `MODEL_RETRY`'s (what plans recorded before it mean).
    model_attempts: int | None = None
    #: The profiles that answer a turn the run's model could not, in order (its profile's
    #: ``fallbacks``, each followed by its own): a deterministic decision of the workflow
    #: from the model call's typed failure (`otherone.workflows.model_fallbacks`).
    fallbacks: tuple[PlannedModel, ...] = ()
    #: The run's guardrails (None: none, as in plans recorded before guardrails existed).
    guardrails: GuardrailPlan | None = None
    #: `time.sleep` and `time.wake_at` are offered (the agent asks, the runtime policy allows).
    sleep: bool = False
    #: Where the run's record is POSTed when it ends (roots only; None: nowhere).
    webhook: WebhookPlan | None = None


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
    #: The run ended before its `prepare_run` returned (e.g. a child cancelled as it started):
    #: its `run_started` may be missing, so the end stores it (keyed: once) before its own.
    unprepared: bool = False


class RecordEventsInput(_Contract):
    """Activity input: store events the workflow decided now, not with its next activity
    (`sleep_started`, which watchers must see while the run sleeps). ``key`` makes a retried
    attempt store them once."""

    ref: RunRef
    events: tuple[dict[str, JsonValue], ...]
    key: str


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
