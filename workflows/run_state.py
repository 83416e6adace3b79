"""`RunState`: the mutable state of one agent run, owned by its `AgentRunWorkflow` instance.

What the run's steps read and write: its input, plan, counters (iteration, usage, budget
ledger), the entries pending for the next model call, the events decided here, its status and
ending, and the collaborators that keep their own state (approval gate, message queue, agent
caller, spawns, handoffs). The loop (`turns`), the handoff step (`handoff_steps`), the update
handlers (`run_updates`) and the end (`finishing`) take it as their first argument.

Only deterministic bookkeeping here: no activity, timer or wait. Its few commands (status search
attribute upserts) are made where the workflow made them before it was split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from otherone import search_attributes as attrs
    from otherone.contracts import (
        CarryOver,
        PendingEntry,
        RunInput,
        RunPlan,
        RunRef,
        ToolCallSpec,
    )
    from otherone.definitions import TreeBudget
    from otherone.runs import RunRecord, RunStatus
    from otherone.workflows.budgets import BudgetLedger, UsageCounter
    from otherone.workflows.handoffs import Handoffs
    from otherone.workflows.outcomes import (
        DecidedEvents,
        Ending,
        input_entries,
        shared_state_entry,
        shares_state,
    )
    from otherone.workflows.output_retries import OutputRetries

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.agent_calls import AgentCaller
from otherone.workflows.approvals import ApprovalGate
from otherone.workflows.capacity_waits import CapacityWaits
from otherone.workflows.messages import MessageQueue
from otherone.workflows.run_input import run_ref
from otherone.workflows.sleeps import Sleeps
from otherone.workflows.spawns import Spawner
from otherone.workflows.tool_steps import ToolSteps


@dataclass(eq=False)
class RunState:
    """One run's state across its steps (and, through `carry_over`, across continue-as-new)."""

    input: RunInput
    pending: list[PendingEntry] = field(default_factory=list)
    usage: UsageCounter = field(default_factory=UsageCounter)
    status: RunStatus = RunStatus.CREATED
    iteration: int = 0
    session_id: str = field(init=False)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    ending: Ending | None = None
    #: finish_run stored the end (what remains is waiting for update/signal handlers).
    end_stored: bool = False
    plan: RunPlan | None = None
    ledger: BudgetLedger | None = None
    caller: AgentCaller | None = None
    deadline_at: datetime | None = None
    #: Turns done before this history began (continue-as-new carries the count).
    turns_at_start: int = 0
    gate: ApprovalGate = field(init=False)
    #: Events decided here (refused calls and messages), stored by the next activity.
    decided: DecidedEvents = field(default_factory=DecidedEvents)
    messages: MessageQueue = field(init=False)
    #: The tool calls of the current turn while they have no results yet (iteration, calls).
    open_calls: tuple[int, tuple[ToolCallSpec, ...]] | None = None
    #: The open calls' steps (what of them came back before the run ended).
    open_tools: ToolSteps | None = None
    output_retries: OutputRetries = field(default_factory=lambda: OutputRetries(0))
    #: `agent.handoff`: the chain so far and the handoff the current turn asked for.
    handoffs: Handoffs = field(default_factory=Handoffs)
    #: `agent.spawn` calls, carried over continue-as-new (a child may signal before `run`).
    spawns: Spawner = field(init=False)
    #: Calls waiting for fleet capacity (model and tool permits).
    capacity: CapacityWaits = field(init=False)
    #: `time.sleep` / `time.wake_at` calls sleeping now (none at continue-as-new: a sleep lasts
    #: within its turn).
    sleeps: Sleeps = field(init=False)

    def __post_init__(self) -> None:
        self.session_id = self.input.request.session.session_id or ""
        self.gate = ApprovalGate(self.refresh_status)
        self.capacity = CapacityWaits(self.details)
        self.messages = MessageQueue(self.input.run_id, self.decided)
        self.sleeps = Sleeps(self.refresh_status, lambda: bool(self.messages.queued))
        carry = self.input.carry
        self.spawns = Spawner(carry.spawns if carry is not None else ())

    # start and resume --------------------------------------------------------------------

    def start(self, plan: RunPlan) -> RunPlan:
        """A new run, prepared: its plan, budget, deadline and input entries."""
        budget = self.input.budget or TreeBudget.for_root(plan.limits)
        self.plan = plan
        self.ledger = BudgetLedger(budget, plan.limits)
        self.deadline_at = self._deadline(plan.timeout)
        self.caller = self._agent_caller(self.ledger)
        self.pending = input_entries(self.input.run_id, self.input.request.input)
        if shares_state(self.input):
            self.pending.insert(0, shared_state_entry(self.input))
        self.output_retries = OutputRetries(plan.output_retries)
        self.spawns.bind(self.ledger, self.decided, self.refresh_status)
        return plan

    def resume(self, carry: CarryOver) -> RunPlan:
        """Go on where the previous history of this run stopped (after continue-as-new)."""
        self.plan = carry.plan
        self.session_id = carry.session_id
        self.started_at = carry.started_at
        self.deadline_at = carry.deadline_at
        self.iteration = carry.iteration
        self.turns_at_start = carry.iteration
        self.usage = UsageCounter(carry.usage)
        self.ledger = BudgetLedger(carry.budget, carry.plan.limits)
        self.caller = self._agent_caller(self.ledger)
        self.caller.restore(carry.call_results, carry.children_started)
        self.messages.restore(carry.queued)
        self.decided.items = [*carry.events, *self.decided.items]
        self.pending = list(carry.pending)
        self.gate.restore(carry.approvals)
        self.output_retries = OutputRetries(carry.plan.output_retries, carry.output_retries_used)
        self.handoffs = Handoffs(carry.handoffs)
        self.spawns.bind(self.ledger, self.decided, self.refresh_status)
        return carry.plan

    def _agent_caller(self, ledger: BudgetLedger) -> AgentCaller:
        return AgentCaller(self.input, ledger, self.set_live_status, events=self.decided)

    def _deadline(self, timeout: timedelta) -> datetime:
        assert self.started_at is not None
        deadline = self.started_at + timeout
        inherited = self.input.deadline
        return min(deadline, inherited) if inherited is not None else deadline

    def carry_over(self, plan: RunPlan) -> CarryOver:
        """What the next history of this run starts from (continue-as-new, handoffs)."""
        assert self.ledger is not None and self.caller is not None
        assert self.started_at is not None and self.deadline_at is not None
        previous = self.input.carry.generation if self.input.carry else 0
        return CarryOver(
            plan=plan,
            session_id=self.session_id,
            started_at=self.started_at,
            deadline_at=self.deadline_at,
            iteration=self.iteration,
            usage=self.usage.snapshot(0),
            budget=self.ledger.left(),
            queued=tuple(self.messages.queued),
            pending=tuple(self.pending),
            call_results=self.caller.finished_results(),
            children_started=self.caller.started,
            generation=previous + 1,
            approvals=self.gate.carry(),
            events=tuple(self.decided.items),
            output_retries_used=self.output_retries.used,
            spawns=self.spawns.carry(),
            handoffs=self.handoffs.chain,
        )

    # what the run shows ------------------------------------------------------------------

    def record(self) -> RunRecord:
        """The run's RunRecord (the `record` query, and what the store keeps of the run)."""
        ending = self.ending
        return RunRecord(
            run_id=self.input.run_id,
            root_run_id=self.input.root_run_id,
            parent_run_id=self.input.parent_run_id,
            agent_call_id=self.input.agent_call_id,
            agent_id=self.input.request.entry_agent,
            agent_definition_version=self.plan.agent_version if self.plan else None,
            session_id=self.session_id or None,
            partition_key=self.input.request.runtime_context.partition_key,
            status=self.status,
            depth=self.input.depth,
            iteration=self.iteration,
            started_at=self.started_at,
            finished_at=self.finished_at,
            usage=self.usage.snapshot(self.elapsed()),
            failure=ending.failure if ending else None,
            output=ending.output if ending else None,
            metadata=self.input.request.metadata,
            handoffs=self.handoffs.chain,
            # Data only (no command depends on it): the plan in the history says it.
            mcp_unavailable=self.plan.mcp_unavailable if self.plan else {},
            execution_id=workflow.info().first_execution_run_id,
            forked_from=self.input.forked_from,
        )

    def ref(self, plan: RunPlan | None) -> RunRef:
        return run_ref(self.input, self.session_id, plan)

    def elapsed(self) -> int:
        if self.started_at is None:
            return 0
        end = self.finished_at or workflow.now()
        return int((end - self.started_at).total_seconds() * 1000)

    def take_queued(self, iteration: int) -> None:
        """A safe point: no tool call is waiting for its results, so user messages may enter."""
        self.pending.extend(self.messages.take(iteration))

    def refresh_status(self) -> None:
        """The approval requests changed: status, and the Web UI's "current details" (metadata
        read by queries, no history event) naming what waits for whom."""
        self.set_live_status(self.caller.active if self.caller is not None else 0)
        workflow.set_current_details(self.details())

    def details(self) -> str:
        """The Web UI's "current details": who the run waits for, and its sleeps."""
        return "\n\n".join(part for part in (self.gate.details(), self.sleeps.details()) if part)

    def set_live_status(self, active_children: int) -> None:
        """running ⇄ waiting_for_child ⇄ waiting_for_approval ⇄ sleeping, visible in the record
        and the search attributes (a person waited for matters most: it shows first)."""
        if self.ending is not None:
            return
        if self.gate.waiting:
            status = RunStatus.WAITING_FOR_APPROVAL
        elif active_children or self.spawns.awaiting:
            status = RunStatus.WAITING_FOR_CHILD
        elif self.sleeps.sleeping:
            status = RunStatus.SLEEPING
        else:
            status = RunStatus.RUNNING
        if status is not self.status:
            self.status = status
            workflow.upsert_search_attributes([attrs.STATUS.value_set(status.value)])
