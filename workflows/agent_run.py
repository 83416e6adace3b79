"""`AgentRunWorkflow`: one agent run, root or child, as a deterministic Temporal workflow.

The seed's loop, step by step: prepare (resolve the snapshot, take the session lease) → repeat up
to max_iterations: take queued user messages at a safe point → model call (activity) → no tool
calls: finish, unless messages were queued meanwhile → run tools (activities, in parallel when
allowed; `agent.call` starts a child run of this same workflow) → their results become the next
turn's pending entries → finish (activity).

Deadlines are Temporal timers, cancellation is Temporal cancellation; both end the run with a
structured `AgentRunResult`, never a workflow failure. No I/O and no clock here: the transcript
lives in the store and activities receive references to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from pydantic import JsonValue
from temporalio import workflow
from temporalio.common import (
    RawValue,
)
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
)

with workflow.unsafe.imports_passed_through():
    from otherone import search_attributes as attrs
    from otherone.config import AGENT_CALL_TOOL, AGENT_SPAWN_TOOL
    from otherone.contracts import (
        QUERY_APPROVALS,
        QUERY_RECORD,
        QUERY_RUN_REF,
        SIGNAL_SPAWNED_RUN_ENDED,
        SIGNAL_USER_MESSAGES,
        UPDATE_CALL_AGENT,
        UPDATE_DECIDE_APPROVAL,
        WORKFLOW_NAME,
        ApprovalDecision,
        ApprovalRequest,
        CallAgentInput,
        CarryOver,
        FinishRunInput,
        HandOffInput,
        HandOffResult,
        ModelTurn,
        PendingEntry,
        RunPlan,
        RunRef,
        SpawnEnded,
        ToolCallSpec,
    )
    from otherone.definitions import TreeBudget
    from otherone.errors import FailureCode
    from otherone.runs import (
        STATUS_FOR_OUTCOME,
        AgentCallResult,
        AgentFailure,
        AgentOutput,
        AgentRunResult,
        HandoffStep,
        RunOutcome,
        RunRecord,
        RunStatus,
    )
    from otherone.workflows.activity_options import (
        cancellation_swallowed,
        reraise_cancellation,
    )
    from otherone.workflows.agent_calls import (
        AgentCaller,
        failed_call,
    )
    from otherone.workflows.approvals import (
        RUN_ENDED,
        ApprovalGate,
        outcome_of,
    )
    from otherone.workflows.finishing import (
        BOUNDED_FINISH,
        FINISH_GRACE,
        STORED_END_OUTLIVES_HANDLERS,
        run_result,
        shielded,
        unstored_failure,
    )
    from otherone.workflows.handoffs import Handoffs, denial_of
    from otherone.workflows.messages import MessageQueue
    from otherone.workflows.model_steps import call_model
    from otherone.workflows.outcomes import (
        BudgetLedger,
        Claimants,
        DecidedEvents,
        Ending,
        RunEnded,
        UsageCounter,
        ended_before_result_entry,
        ended_before_result_events,
        failure_from_activity_error,
        input_entries,
        tool_result_entry,
    )
    from otherone.workflows.output_retries import OutputRetries, invalid_output
    from otherone.workflows.run_input import (
        decode_input,
        id_problem,
        missing_search_attributes,
        refused_result,
        run_ref,
    )
    from otherone.workflows.spawn_results import report_to_caller
    from otherone.workflows.spawns import Spawner
    from otherone.workflows.store_steps import finish_run, hand_off, prepare_run
    from otherone.workflows.tool_steps import ToolSteps, record_decision, tool_key

#: Patch id: a run cancelled while waiting for its children stops once they have ended, instead
#: of going on to another model call.
STOP_AFTER_CANCELLED_CHILDREN = "stop-after-cancelled-children"
#: Patch id: a model call that completed although the run was cancelled meanwhile (it was
#: waited for, to pair its events) does not lead to its tool calls: the run stops there.
STOP_WHEN_A_TURN_OUTLIVES_CANCEL = "stop-when-a-turn-outlives-cancel"
#: Patch id: a model call that completed with a final answer although the run was cancelled
#: meanwhile ends the run `cancelled` (not `completed`), with no further model call.
STOP_WHEN_AN_ANSWER_OUTLIVES_CANCEL = "stop-when-an-answer-outlives-cancel"
#: Patch id: a run whose input's run_id is not its workflow id (or a root whose root_run_id is
#: not its run id) is refused `invalid_request` instead of running under the wrong ids.
RUN_ID_IS_WORKFLOW_ID = "run-id-is-workflow-id"
#: Patch id: a run started without our search attributes (by `temporal workflow start`, say)
#: sets them itself.
SELF_DESCRIBED = "self-described"
#: Patch id: a final answer that breaks the result contract is told to the model, which answers
#: again (up to the plan's `output_retries`) before the run ends `invalid_agent_output`.
OUTPUT_RETRIES = "output-retries"
#: Patch id: the `summary` context's model call of a handoff counts against the run's
#: model-call and token budgets and in its usage.
HANDOFF_SUMMARY_USAGE = "handoff-summary-usage"


@workflow.defn(name=WORKFLOW_NAME)
class AgentRunWorkflow:
    @workflow.init
    def __init__(self, input: RawValue) -> None:
        # Taken raw and validated here: input that does not fit `RunInput` (e.g. a start from
        # Temporal's own client) would otherwise fail every workflow task, for ever.
        self._input, self._invalid_input = decode_input(input)
        self._pending: list[PendingEntry] = []
        self._usage = UsageCounter()
        self._status = RunStatus.CREATED
        self._iteration = 0
        self._session_id = self._input.request.session.session_id or ""
        self._started_at: datetime | None = None
        self._finished_at: datetime | None = None
        self._ending: Ending | None = None
        #: finish_run stored the end (what remains is waiting for update/signal handlers).
        self._end_stored = False
        self._plan: RunPlan | None = None
        self._ledger: BudgetLedger | None = None
        self._caller: AgentCaller | None = None
        self._deadline_at: datetime | None = None
        #: Turns done before this history began (continue-as-new carries the count).
        self._turns_at_start = 0
        self._gate = ApprovalGate(self._refresh_status)
        #: Events decided here (refused calls and messages), stored by the next activity.
        self._decided = DecidedEvents()
        self._messages = MessageQueue(self._input.run_id, self._decided)
        #: The tool calls of the current turn while they have no results yet (iteration, calls).
        self._open_calls: tuple[int, tuple[ToolCallSpec, ...]] | None = None
        #: The open calls' steps (what of them came back before the run ended).
        self._open_tools: ToolSteps | None = None
        self._output_retries = OutputRetries(0)
        #: `agent.handoff`: the chain so far and the handoff the current turn asked for.
        self._handoffs = Handoffs()
        #: `agent.spawn` calls, carried over continue-as-new (a child may signal before `run`).
        carry = self._input.carry
        self._spawns = Spawner(carry.spawns if carry is not None else ())

    # messages ----------------------------------------------------------------------------

    @workflow.signal(
        name=SIGNAL_USER_MESSAGES,
        description=(
            'User messages for this run: {"messages": ["...", ...]}. Queued and taken at the '
            "next safe point (before a model call); at most 256 wait at a time, the excess and "
            "malformed payloads are refused visibly (a warning and a user_messages_refused event)."
        ),
    )
    def user_messages(self, raw: RawValue) -> None:
        """Queue user messages; they are taken at the next safe point of the loop."""
        self._messages.receive(raw)

    @workflow.signal(
        name=SIGNAL_SPAWNED_RUN_ENDED,
        description="A child started by agent.spawn reports its result: SpawnEnded.",
    )
    def spawned_run_ended(self, ended: SpawnEnded) -> None:
        self._spawns.ended(ended)

    @workflow.update(
        name=UPDATE_CALL_AGENT,
        description=(
            'A trusted agent call on behalf of this run: {"call_id": "...", "request": '
            "AgentCallRequest}; idempotent by call id; returns an AgentCallResult."
        ),
    )
    async def call_agent(self, input: CallAgentInput) -> AgentCallResult:
        """A trusted programmatic agent call made on behalf of this run (idempotent by call id)."""
        await workflow.wait_condition(lambda: self._caller is not None or self._ending is not None)
        plan, caller = self._plan, self._caller
        if plan is None or caller is None or self._ending is not None or self._deadline_at is None:
            failure = AgentFailure(
                code=FailureCode.INVALID_CONFIGURATION, message="the caller run has ended"
            )
            return failed_call(input.call_id, input.request.target, failure)
        return await caller.call(
            plan,
            self._ref(plan),
            self._deadline_at,
            input.call_id,
            input.request,
            claimants=Claimants(1),
        )

    @call_agent.validator
    def _accept_call_agent(self, input: CallAgentInput) -> None:
        if self._ending is not None:
            raise ValueError(f"run '{self._input.run_id}' has ended")

    @workflow.update(
        name=UPDATE_DECIDE_APPROVAL,
        description=(
            "A person's decision on a tool call waiting for approval, or the answer to a "
            'human.ask question. Input: {"call_id": "...", "decision": "approve" | "deny" | '
            '"answer", "arguments": {...} (approve only: edited arguments, checked against the '
            'tool\'s schema), "reason": "..." (deny), "text": "..." (answer), "identity": '
            '"who decides"}. Returns the decided request. The same decision twice is '
            "idempotent; a different one, an unknown call id or an ended run is refused."
        ),
    )
    async def decide_approval(self, decision: ApprovalDecision) -> ApprovalRequest:
        call_id = decision.call_id
        await workflow.wait_condition(
            lambda: not self._gate.deciding(call_id) or self._ending is not None
        )
        if self._gate.deciding(call_id):  # the run ended while another decision was recorded
            raise ApplicationError(f"run '{self._input.run_id}' has ended", type=RUN_ENDED)
        self._gate.check(decision)  # again: a decision may have been recorded meanwhile
        request = self._gate.request(call_id)
        if request.decision is not None:
            return request  # the same decision again
        if self._ending is not None:
            raise ApplicationError(f"run '{self._input.run_id}' has ended", type=RUN_ENDED)
        outcome = outcome_of(decision, workflow.now())
        self._gate.begin(call_id)
        try:
            await record_decision(self._ref(self._plan), request, outcome)
        except ActivityError as error:
            self._gate.abandon(call_id)
            cause = error.cause
            if isinstance(cause, ApplicationError):
                raise ApplicationError(cause.message, type=cause.type) from None
            raise ApplicationError(f"the decision was not recorded: {cause or error}") from None
        return self._gate.settle(call_id, outcome)

    @decide_approval.validator
    def _accept_decision(self, decision: ApprovalDecision) -> None:
        if self._ending is not None:
            raise ApplicationError(f"run '{self._input.run_id}' has ended", type=RUN_ENDED)
        self._gate.check(decision)

    @workflow.query(
        name=QUERY_APPROVALS,
        description="Approval requests and questions of this run: open ones have no decision.",
    )
    def approvals(self) -> tuple[ApprovalRequest, ...]:
        return self._gate.requests()

    @workflow.query(
        name=QUERY_RECORD,
        description="The run's RunRecord: status, turn, usage, output, lineage.",
    )
    def record(self) -> RunRecord:
        ending = self._ending
        return RunRecord(
            run_id=self._input.run_id,
            root_run_id=self._input.root_run_id,
            parent_run_id=self._input.parent_run_id,
            agent_call_id=self._input.agent_call_id,
            agent_id=self._input.request.entry_agent,
            agent_definition_version=self._plan.agent_version if self._plan else None,
            session_id=self._session_id or None,
            partition_key=self._input.request.runtime_context.partition_key,
            status=self._status,
            depth=self._input.depth,
            iteration=self._iteration,
            started_at=self._started_at,
            finished_at=self._finished_at,
            usage=self._usage.snapshot(self._elapsed()),
            failure=ending.failure if ending else None,
            output=ending.output if ending else None,
            metadata=self._input.request.metadata,
            handoffs=self._handoffs.chain,
        )

    @workflow.query(
        name=QUERY_RUN_REF,
        description="The run's RunRef: what a worker needs to resolve a compact activity ref.",
    )
    def run_ref(self) -> RunRef:
        return self._ref(self._plan)

    # run ---------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: RawValue) -> AgentRunResult:
        self._started_at = workflow.now()
        if self._invalid_input is not None:
            return self._refused(self._invalid_input)
        wrong_ids = id_problem(self._input)
        if wrong_ids is not None and workflow.patched(RUN_ID_IS_WORKFLOW_ID):
            return self._refused(wrong_ids)
        self._describe_self()
        if not self._session_id and self._input.carry is None:
            self._session_id = f"session-{workflow.uuid4()}"
            workflow.upsert_search_attributes([attrs.SESSION_ID.value_set(self._session_id)])
        try:
            ending = await self._execute()
        except asyncio.CancelledError:  # cancelled while preparing, before the loop began
            ending = Ending.of(RunOutcome.CANCELLED)
        plan = self._plan
        on_exit = plan.spawned_on_exit if plan is not None else "cancel"
        await self._spawns.finish(ending.outcome, on_exit, self._deadline_at)
        result = await self._finish_shielded(ending, self._ref(self._plan))
        await report_to_caller(self._input, result)  # only a spawned run reports by signal
        return result

    def _describe_self(self) -> None:
        """Set the search attributes a client left out (a start by `temporal workflow start`
        or another SDK), so the run is listed, scoped and shown like one `AgentClient` started."""
        missing = missing_search_attributes(self._input, workflow.info().typed_search_attributes)
        if missing and workflow.patched(SELF_DESCRIBED):
            workflow.upsert_search_attributes(missing)

    def _refused(self, problem: str) -> AgentRunResult:
        """The input is not a run request: nothing was prepared, nothing is written."""
        failure = AgentFailure(code=FailureCode.INVALID_REQUEST, message=problem)
        self._ending = Ending.failed(failure)
        self._status = RunStatus.FAILED
        self._finished_at = workflow.now()
        workflow.logger.warning("run input refused: %s", problem)
        return refused_result(self._input, failure)

    async def _execute(self) -> Ending:
        if self._input.carry is not None:
            plan = self._resume(self._input.carry)
        else:
            prepared = await prepare_run(self._input, self._ref(None))
            if isinstance(prepared, Ending):
                return prepared
            plan = self._start(prepared)
        self._status = RunStatus.RUNNING
        return await self._run_until_deadline(plan, self._ref(plan))

    def _start(self, plan: RunPlan) -> RunPlan:
        budget = self._input.budget or TreeBudget.for_root(plan.limits)
        self._plan = plan
        self._ledger = BudgetLedger(budget, plan.limits)
        self._deadline_at = self._deadline(plan.timeout)
        self._caller = AgentCaller(
            self._input, self._ledger, self._children_changed, events=self._decided
        )
        self._pending = input_entries(self._input.run_id, self._input.request.input)
        self._output_retries = OutputRetries(plan.output_retries)
        self._spawns.bind(self._ledger, self._decided, self._refresh_status)
        return plan

    def _resume(self, carry: CarryOver) -> RunPlan:
        """Go on where the previous history of this run stopped (after continue-as-new)."""
        self._plan = carry.plan
        self._session_id = carry.session_id
        self._started_at = carry.started_at
        self._deadline_at = carry.deadline_at
        self._iteration = carry.iteration
        self._turns_at_start = carry.iteration
        self._usage = UsageCounter(carry.usage)
        self._ledger = BudgetLedger(carry.budget, carry.plan.limits)
        self._caller = AgentCaller(
            self._input, self._ledger, self._children_changed, events=self._decided
        )
        self._caller.restore(carry.call_results, carry.children_started)
        self._messages.restore(carry.queued)
        self._decided.items = [*carry.events, *self._decided.items]
        self._pending = list(carry.pending)
        self._gate.restore(carry.approvals)
        self._output_retries = OutputRetries(carry.plan.output_retries, carry.output_retries_used)
        self._handoffs = Handoffs(carry.handoffs)
        self._spawns.bind(self._ledger, self._decided, self._refresh_status)
        return carry.plan

    def _deadline(self, timeout: timedelta) -> datetime:
        assert self._started_at is not None
        deadline = self._started_at + timeout
        inherited = self._input.deadline
        return min(deadline, inherited) if inherited is not None else deadline

    async def _run_until_deadline(self, plan: RunPlan, ref: RunRef) -> Ending:
        assert self._deadline_at is not None
        remaining = (self._deadline_at - workflow.now()).total_seconds()
        try:
            return await asyncio.wait_for(self._loop(plan, ref), timeout=max(remaining, 0.001))
        except TimeoutError:
            return _timed_out()
        except asyncio.CancelledError:
            return Ending.of(RunOutcome.CANCELLED)

    async def _loop(self, plan: RunPlan, ref: RunRef) -> Ending:
        try:
            for iteration in range(self._iteration + 1, plan.max_iterations + 1):
                await self._maybe_continue_as_new(plan)
                self._iteration = iteration
                ending = await self._turn(plan, ref, iteration)
                if ending is not None:
                    return ending
                if self._handoffs.accepted is not None:
                    await self._hand_off(plan, ref)  # continues as new under the next agent
        except RunEnded as ended:
            return ended.ending
        return Ending.of(
            RunOutcome.BUDGET_EXCEEDED,
            AgentFailure(
                code=FailureCode.BUDGET_EXCEEDED,
                message=f"max_iterations ({plan.max_iterations}) exceeded",
            ),
        )

    async def _maybe_continue_as_new(self, plan: RunPlan) -> None:
        """At a turn boundary, hand over to a fresh history when this one has grown enough.

        Only when nothing is in flight: no child running and no trusted call being handled.
        """
        assert self._caller is not None
        turns = self._iteration - self._turns_at_start
        due = turns >= plan.continue_as_new_after_turns or (
            turns > 0 and workflow.info().is_continue_as_new_suggested()
        )
        if (
            not due
            or self._caller.active
            or self._gate.waiting
            or not workflow.all_handlers_finished()
        ):
            return
        workflow.continue_as_new(self._input.model_copy(update={"carry": self._carry_over(plan)}))

    def _carry_over(self, plan: RunPlan) -> CarryOver:
        assert self._ledger is not None and self._caller is not None
        assert self._started_at is not None and self._deadline_at is not None
        previous = self._input.carry.generation if self._input.carry else 0
        return CarryOver(
            plan=plan,
            session_id=self._session_id,
            started_at=self._started_at,
            deadline_at=self._deadline_at,
            iteration=self._iteration,
            usage=self._usage.snapshot(0),
            budget=self._ledger.left(),
            queued=tuple(self._messages.queued),
            pending=tuple(self._pending),
            call_results=self._caller.finished_results(),
            children_started=self._caller.started,
            generation=previous + 1,
            approvals=self._gate.carry(),
            events=tuple(self._decided.items),
            output_retries_used=self._output_retries.used,
            spawns=self._spawns.carry(),
            handoffs=self._handoffs.chain,
        )

    async def _hand_off(self, plan: RunPlan, ref: RunRef) -> None:
        """Pass the conversation to the agent the turn handed off to: the `hand_off` activity
        shapes the session and plans the run under it, then the run continues as new as that
        agent (`otherone.workflows.handoffs`). Reached only through `agent.handoff`. Returns
        (the agent goes on) only when the worker's authorizer denied the handoff."""
        accepted = self._handoffs.accepted
        assert accepted is not None and self._caller is not None
        # Children of trusted calls and update handlers finish under the agent that began them.
        caller = self._caller

        def settled() -> bool:
            return not caller.active and workflow.all_handlers_finished()

        await workflow.wait_condition(settled)
        step = accepted.step
        # Checked on the summary path only, so other handoffs leave no marker.
        counted = step.context == "summary" and workflow.patched(HANDOFF_SUMMARY_USAGE)
        if counted:
            assert self._ledger is not None
            # The summary is a model call of the run, reserved like a turn's: a spent budget
            # ends the run here (`budget_exceeded`), before any model is called.
            self._ledger.reserve_model_call()
            self._usage.model_calls += 1
        pending, self._pending = tuple(self._pending), []
        events = self._decided.take()
        handoff = HandOffInput(
            ref=ref,
            plan=plan,
            step=step,
            number=len(self._handoffs.chain) + 1,
            message=accepted.message,
            last_turns=accepted.last_turns,
            pending=pending,
            events=events,
            record=self.record(),
            with_usage=counted,
        )
        try:
            done = await hand_off(handoff)
        except ActivityError as error:
            self._pending = list(pending)  # not written: keep them for the final flush
            reraise_cancellation(error)
            denial = denial_of(error)
            if denial is None:
                failure = failure_from_activity_error(error, default=FailureCode.CONTEXT_ERROR)
                raise RunEnded(Ending.failed(failure)) from None
            self._hand_off_denied(denial, events, counted)
            return
        await self._continue_as_next_agent(plan, step, done, settled)

    def _hand_off_denied(
        self, denial: str, events: tuple[dict[str, JsonValue], ...], counted: bool
    ) -> None:
        """The authorizer said no: the agent goes on, told why."""
        if counted:
            assert self._ledger is not None
            self._ledger.release_model_call()  # no summary was written
            self._usage.model_calls -= 1
        self._pending, back = self._handoffs.denied(self._pending, events, denial)
        self._decided.items = [*back, *self._decided.items]

    async def _continue_as_next_agent(
        self,
        plan: RunPlan,
        step: HandoffStep,
        done: RunPlan | HandOffResult,
        settled: Callable[[], bool],
    ) -> None:
        next_plan = done.plan if isinstance(done, HandOffResult) else done
        if isinstance(done, HandOffResult):
            assert self._ledger is not None
            self._usage.add_tokens(done)
            self._ledger.spend_tokens(done.total_tokens)  # past the token budget: the run ends
        # The handing agent's spawned children end by its end policy: the next one starts clean.
        await self._spawns.hand_over(plan.spawned_on_exit, self._deadline_at)
        if cancellation_swallowed():
            raise asyncio.CancelledError()  # cancelled while they stopped: no handoff
        await workflow.wait_condition(settled)  # a trusted call may have come meanwhile
        self._handoffs.chain = (*self._handoffs.chain, step)
        self._handoffs.accepted = None
        workflow.upsert_search_attributes([attrs.AGENT_ID.value_set(step.to_agent)])
        request = self._input.request.model_copy(update={"entry_agent": step.to_agent})
        carry = self._carry_over(next_plan)
        workflow.continue_as_new(
            self._input.model_copy(update={"request": request, "carry": carry})
        )

    async def _turn(self, plan: RunPlan, ref: RunRef, iteration: int) -> Ending | None:
        """One iteration: model call, then either the answer or the tools' results."""
        assert self._ledger is not None and self._deadline_at is not None
        if workflow.now() >= self._deadline_at:
            # E.g. a child that hit the shared deadline returned first: this run is out of time too.
            raise RunEnded(_timed_out())
        self._take_queued(iteration)
        self._ledger.reserve_model_call()
        self._usage.model_calls += 1
        turn = await self._call_model(plan, ref, iteration)
        self._charge(turn)
        if not turn.tool_calls:
            return self._answered(plan, turn)
        await self._run_tools(plan, ref, iteration, turn)
        return None

    def _answered(self, plan: RunPlan, turn: ModelTurn) -> Ending | None:
        """A turn without tool calls: the run's ending, or None to go round once more."""
        if cancellation_swallowed() and workflow.patched(STOP_WHEN_AN_ANSWER_OUTLIVES_CANCEL):
            # The model answered instead of stopping when the run was cancelled: the answer is
            # in the session (the model call stored it), but the run ends cancelled and calls
            # no model again (for queued messages or an output retry).
            raise asyncio.CancelledError()
        if self._messages.queued:
            return None  # messages arrived while the model answered: go round once more
        return self._final_answer(plan, turn)

    def _charge(self, turn: ModelTurn) -> None:
        """The model call's usage, and its compactions', against the usage and the budget."""
        assert self._ledger is not None
        if turn.compaction_calls:  # only turns from workers that count compactions say so
            compaction = turn.compaction_usage()
            self._usage.model_calls += turn.compaction_calls
            self._usage.add_tokens(compaction)
            self._ledger.charge_model_calls(turn.compaction_calls)
            self._ledger.spend_tokens(compaction.total_tokens)
        self._usage.add_tokens(turn)
        self._ledger.spend_tokens(turn.total_tokens)

    async def _run_tools(self, plan: RunPlan, ref: RunRef, iteration: int, turn: ModelTurn) -> None:
        """The turn's tool calls, their results pending for the next model call (`tool_steps`).
        Raises `RunEnded` when a result ends the run, `CancelledError` when it was cancelled."""
        assert self._ledger is not None
        # Until their results are pending, the calls are open: a run ending meanwhile answers
        # them (`_answer_open_calls`), so the session never holds a call without a result.
        self._open_calls = (iteration, turn.tool_calls)
        if cancellation_swallowed() and workflow.patched(STOP_WHEN_A_TURN_OUTLIVES_CANCEL):
            # The model call finished instead of stopping when the run was cancelled; its tool
            # calls are answered `cancelled` as the run ends, none runs (or waits for a person).
            raise asyncio.CancelledError()
        self._ledger.reserve_tool_calls(len(turn.tool_calls))
        self._usage.tool_calls += len(turn.tool_calls)
        tools = self._open_tools = self._tool_steps(plan, ref, iteration)
        tools.open_approvals(turn.tool_calls, turn.approvals)
        # The seed counts every `agent.call` the model makes (a malformed one too); trusted
        # calls, made by a client, are not the run's own.
        self._usage.agent_calls += sum(
            1 for call in turn.tool_calls if call.name in (AGENT_CALL_TOOL, AGENT_SPAWN_TOOL)
        )
        steps = await tools.run(turn.tool_calls)
        entries, ending = tools.entries(turn.tool_calls, steps)
        self._pending.extend(entries)
        self._open_calls, self._open_tools = None, None
        if ending is not None:
            raise RunEnded(ending)
        if cancellation_swallowed() and workflow.patched(STOP_AFTER_CANCELLED_CHILDREN):
            raise asyncio.CancelledError()  # the run was cancelled while its children ended

    def _final_answer(self, plan: RunPlan, turn: ModelTurn) -> Ending | None:
        if turn.output_error is not None:
            if self._retry_output(plan, turn.output_error):
                return None  # the model answers again, told what was wrong
            return Ending.failed(invalid_output(turn, self._output_retries))
        # Turns recorded before result contracts existed carry no output: the text is the output.
        return Ending.completed(turn.output or AgentOutput(type="text", value=turn.content))

    def _retry_output(self, plan: RunPlan, problem: str) -> bool:
        """Tell the model why its answer breaks the contract, while retries and turns are left."""
        retries = self._output_retries
        if not retries.left or self._iteration >= plan.max_iterations:
            return False
        if not workflow.patched(OUTPUT_RETRIES):
            return False
        self._pending.append(retries.retry(self._input.run_id, self._iteration, problem))
        self._decided.add(retries.event(self._iteration, problem))
        return True

    def _take_queued(self, iteration: int) -> None:
        """A safe point: no tool call is waiting for its results, so user messages may enter."""
        self._pending.extend(self._messages.take(iteration))

    async def _call_model(self, plan: RunPlan, ref: RunRef, iteration: int) -> ModelTurn:
        pending, self._pending = tuple(self._pending), []
        events = self._decided.take()
        allowed = self._handoffs.left(plan) > 0
        try:
            return await call_model(
                self._input, plan, ref, iteration, pending, events, handoff_allowed=allowed
            )
        except ActivityError as error:
            self._pending = list(pending)  # not written: keep them for the final flush
            reraise_cancellation(error)
            failure = failure_from_activity_error(error, default=FailureCode.MODEL_ERROR)
            raise RunEnded(Ending.failed(failure)) from None

    def _children_changed(self, active: int) -> None:
        self._set_live_status(active)

    def _refresh_status(self) -> None:
        """The approval requests changed: status, and the Web UI's "current details" (metadata
        read by queries, no history event) naming what waits for whom."""
        self._set_live_status(self._caller.active if self._caller is not None else 0)
        workflow.set_current_details(self._gate.details())

    def _set_live_status(self, active_children: int) -> None:
        """running ⇄ waiting_for_child ⇄ waiting_for_approval, visible in the record and the
        search attributes (a person waited for matters most: it shows first)."""
        if self._ending is not None:
            return
        if self._gate.waiting:
            status = RunStatus.WAITING_FOR_APPROVAL
        elif active_children or self._spawns.awaiting:
            status = RunStatus.WAITING_FOR_CHILD
        else:
            status = RunStatus.RUNNING
        if status is not self._status:
            self._status = status
            workflow.upsert_search_attributes([attrs.STATUS.value_set(status.value)])

    def _answer_open_calls(self, ending: Ending) -> None:
        """Answer the tool calls of a turn the run ended in (cancel, deadline, budget): an
        assistant tool call without a result would make the session unusable (providers
        reject such a transcript)."""
        if self._open_calls is None:
            return
        iteration, calls = self._open_calls
        arrived = self._open_tools.arrived if self._open_tools is not None else {}
        self._open_calls, self._open_tools = None, None
        for index, call in enumerate(calls):
            key = tool_key(self._input.run_id, iteration, index)
            found = arrived.get(call.id)
            if found is not None:
                # It ran and handed its result back inline: the session gets the real result
                # (its events are written with the entry), as a stored one would win. The call
                # as it ran: its `tool_started` shows a person's edits to the arguments.
                ran, outcome = found
                self._pending.append(tool_result_entry(key, ran, outcome))
                continue
            entry = ended_before_result_entry(key, call, ending.outcome.value)
            self._pending.append(entry)
            agent_call = call.name in (AGENT_CALL_TOOL, AGENT_SPAWN_TOOL)
            self._decided.add(*ended_before_result_events(call, entry, agent_call=agent_call))

    # finish ------------------------------------------------------------------------------

    async def _finish_shielded(self, ending: Ending, ref: RunRef) -> AgentRunResult:
        """Finish even if a cancellation arrives meanwhile: a run always returns its structured
        result (`finishing.shielded`); a cancelled one ends anyway after `FINISH_GRACE`."""
        finishing = asyncio.ensure_future(self._finish(ending, ref))
        cancelled = ending.outcome is RunOutcome.CANCELLED
        result = await shielded(finishing, cancelled=cancelled)
        if result is None:
            return self._out_of_grace(ending)
        return result

    def _out_of_grace(self, ending: Ending) -> AgentRunResult:
        """`FINISH_GRACE` passed: either the end is not stored yet, or it is and update or
        signal handlers (e.g. a trusted call waiting for its child) were still running."""
        grace = FINISH_GRACE.total_seconds()
        if not self._end_stored:
            workflow.logger.warning(
                "run %s: its end was not stored within %ss of the cancellation",
                self._input.run_id,
                grace,
            )
            return self._unstored(ending, "finishing did not complete in time")
        workflow.logger.warning(
            "run %s: its end was stored (%s), but update or signal handlers were still running "
            "%ss after the cancellation: it ends without waiting for them",
            self._input.run_id,
            ending.outcome.value,
            grace,
        )
        if workflow.patched(STORED_END_OUTLIVES_HANDLERS):
            return self._result(ending)
        return self._unstored(ending, "finishing did not complete in time")  # older histories

    async def _finish(self, ending: Ending, ref: RunRef) -> AgentRunResult:
        self._ending = ending
        self._status = STATUS_FOR_OUTCOME[ending.outcome]
        self._finished_at = workflow.now()
        if self._caller is not None and ending.outcome is not RunOutcome.COMPLETED:
            self._caller.cancel_children()  # e.g. children of trusted calls still running
        self._answer_open_calls(ending)
        if self._plan is not None:
            self._take_queued(self._iteration + 1)  # keep late messages in the session
        try:
            await self._finish_activity(ref, ending)
        except ActivityError as error:
            if not workflow.patched(BOUNDED_FINISH):
                raise
            reraise_cancellation(error)
            failure = failure_from_activity_error(error, default=FailureCode.STORAGE_ERROR)
            return self._unstored(ending, failure.message)
        self._end_stored = True
        workflow.upsert_search_attributes([attrs.STATUS.value_set(self._status.value)])
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._result(ending)

    def _unstored(self, ending: Ending, reason: str) -> AgentRunResult:
        """The result of a run whose end could not be stored: a completed run fails with
        `storage_error` (its answer is not in the session); other endings stay as they are."""
        workflow.logger.warning("run %s: its end was not stored: %s", self._input.run_id, reason)
        if ending.outcome is RunOutcome.COMPLETED:
            ending = Ending.failed(unstored_failure(reason))
            self._ending = ending
            self._status = STATUS_FOR_OUTCOME[ending.outcome]
        workflow.upsert_search_attributes([attrs.STATUS.value_set(self._status.value)])
        return self._result(ending)

    def _result(self, ending: Ending) -> AgentRunResult:
        usage = self._usage.snapshot(self._elapsed())
        budget_remaining = self._ledger.left() if self._ledger else self._input.budget
        return run_result(self._input, self._session_id, ending, usage, budget_remaining)

    async def _finish_activity(self, ref: RunRef, ending: Ending) -> None:
        pending, self._pending = tuple(self._pending), []
        finish = FinishRunInput(
            ref=ref,
            pending=pending,
            events=self._decided.take(),
            status=self._status,
            usage=self._usage.snapshot(self._elapsed()),
            failure=ending.failure,
            output=ending.output,
            record=self.record(),
        )
        await finish_run(finish, cancelled=ending.outcome is RunOutcome.CANCELLED)

    def _tool_steps(self, plan: RunPlan, ref: RunRef, iteration: int) -> ToolSteps:
        assert self._caller is not None and self._deadline_at is not None
        return ToolSteps(
            plan,
            ref,
            iteration,
            caller=self._caller,
            deadline_at=self._deadline_at,
            gate=self._gate,
            decided=self._decided,
            spawns=self._spawns,
            handoffs=self._handoffs,
        )

    def _elapsed(self) -> int:
        if self._started_at is None:
            return 0
        end = self._finished_at or workflow.now()
        return int((end - self._started_at).total_seconds() * 1000)

    def _ref(self, plan: RunPlan | None) -> RunRef:
        return run_ref(self._input, self._session_id, plan)


def _timed_out() -> Ending:
    failure = AgentFailure(
        code=FailureCode.TIMED_OUT, message="run deadline passed", retryable=True
    )
    return Ending.of(RunOutcome.TIMED_OUT, failure)


__all__ = ["AgentRunWorkflow"]
