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
from collections.abc import Coroutine, Iterable
from datetime import datetime, timedelta
from typing import Any

from pydantic import JsonValue, ValidationError
from temporalio import workflow
from temporalio.common import (
    RawValue,
    RetryPolicy,
    SearchAttributeKey,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    is_cancelled_exception,
)
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from otherone import search_attributes as attrs
    from otherone.config import AGENT_CALL_TOOL, AGENT_SPAWN_TOOL
    from otherone.contracts import (
        ACTIVITY_CALL_MODEL,
        ACTIVITY_FINISH_RUN,
        ACTIVITY_HAND_OFF,
        ACTIVITY_PREPARE_RUN,
        ACTIVITY_RECORD_DECISION,
        ACTIVITY_RUN_TOOL,
        QUERY_APPROVALS,
        QUERY_RECORD,
        QUERY_RUN_REF,
        SIGNAL_SPAWNED_RUN_ENDED,
        SIGNAL_USER_MESSAGES,
        STORE_ACTIVITY_TIMEOUT,
        STORE_HEARTBEAT_TIMEOUT,
        STORE_TOTAL_TIMEOUT,
        UPDATE_CALL_AGENT,
        UPDATE_DECIDE_APPROVAL,
        WORKFLOW_NAME,
        ApprovalDecision,
        ApprovalOutcome,
        ApprovalRequest,
        CallAgentInput,
        CarryOver,
        FinishRunInput,
        HandOffInput,
        HandOffResult,
        ModelCallInput,
        ModelTurn,
        PendingEntry,
        PrepareRunInput,
        RecordDecisionInput,
        RunInput,
        RunPlan,
        RunRef,
        SpawnEnded,
        ToolCallInput,
        ToolCallSpec,
        ToolOutcome,
        UserMessages,
    )
    from otherone.definitions import TreeBudget
    from otherone.errors import FailureCode
    from otherone.mcp_servers import MCP_PREFIX
    from otherone.runs import (
        STATUS_FOR_OUTCOME,
        AgentCallResult,
        AgentFailure,
        AgentOutput,
        AgentRunRequest,
        AgentRunResult,
        RunOutcome,
        RunRecord,
        RunStatus,
        storable_text,
    )
    from otherone.tools import ToolErrorKind
    from otherone.workflows.agent_calls import (
        AgentCallArgumentsError,
        AgentCaller,
        failed_call,
        parse_agent_call,
    )
    from otherone.workflows.approvals import (
        RUN_ENDED,
        ApprovalGate,
        answer_entry,
        denied_entry,
        new_request,
        outcome_of,
    )
    from otherone.workflows.handoffs import Handoffs, denial_of
    from otherone.workflows.outcomes import (
        BudgetLedger,
        Claimants,
        DecidedEvents,
        Ending,
        RunEnded,
        UsageCounter,
        agent_call_entry,
        ended_before_result_entry,
        ended_before_result_events,
        failure_from_activity_error,
        input_entries,
        invalid_arguments_entry,
        not_run_entry,
        permission_denied_entry,
        refused_tool_events,
        tool_completed_event,
        tool_result_entry,
        tool_started_event,
    )
    from otherone.workflows.output_retries import OutputRetries, invalid_output
    from otherone.workflows.spawns import Spawner, report_to_caller

#: Store activities are quick; they retry on their own schedule (database restarts), within
#: `STORE_TOTAL_TIMEOUT` in all (each attempt rides out a short outage in place).
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
MODEL_CALL_TIMEOUT = timedelta(minutes=10)
#: Activities heartbeat every second and workers send them every second
#: (`otherone.worker.app.HEARTBEAT_THROTTLE`), so cancellation reaches a streaming model call in
#: ~1-2 s.
#: The timeout itself only detects a dead or stalled worker: long enough that a busy process
#: (hundreds of runs in one event loop) does not lose attempts of model calls, which cost tokens.
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
MAX_QUEUED_MESSAGES = 256
#: Queued messages travel inline in the next model call's input: together they stay well under
#: Temporal's 2 MB payload limit (the rest of that input is small).
MAX_QUEUED_BYTES = 1024 * 1024
#: Patch id: agent call results reach the caller's model by reference (stored by the child).
CALL_RESULTS_BY_REFERENCE = "call-results-by-reference"
#: Patch id: a run cancelled while waiting for its children stops once they have ended, instead
#: of going on to another model call.
STOP_AFTER_CANCELLED_CHILDREN = "stop-after-cancelled-children"
#: Patch id: the calls of a sequential turn left when the run is cancelled are not started.
SKIP_CALLS_AFTER_CANCELLATION = "skip-calls-after-cancellation"
#: Patch id: a turn's parallel tool calls run at most `max_concurrent_tool_calls` at a time.
TOOL_CONCURRENCY_LIMIT = "tool-concurrency-limit"
#: Patch id: an MCP tool call whose activity failed for good (its worker died on the last
#: attempt, say) is a tool error the model sees, not the end of the run: a server is
#: third-party code, and the seed lets the model route around a broken one.
MCP_FAILURES_TO_MODEL = "mcp-failures-to-model"
#: Patch id: a run cancelled while preparing waits for prepare_run to stop (so finishing cannot
#: race its session lease) and ends `cancelled`.
CANCELLABLE_PREPARE = "cancellable-prepare"
#: Patch id: a cancelled model or tool activity is waited for: it stores its own end event
#: (`model_completed`, `tool_completed`) before the run's end is announced.
PAIRED_EVENTS = "paired-activity-events"
#: Patch id: a cancelled run's finishing is bounded (`FINISH_GRACE`) and a failed finish_run
#: ends the run with its result instead of failing the workflow.
BOUNDED_FINISH = "bounded-finish"
#: How long a cancelled run waits for its end to be stored.
FINISH_GRACE = timedelta(seconds=10)
#: Patch id: a model call that completed although the run was cancelled meanwhile (it was
#: waited for, to pair its events) does not lead to its tool calls: the run stops there.
STOP_WHEN_A_TURN_OUTLIVES_CANCEL = "stop-when-a-turn-outlives-cancel"
#: Patch id: a run whose input's run_id is not its workflow id (or a root whose root_run_id is
#: not its run id) is refused `invalid_request` instead of running under the wrong ids.
RUN_ID_IS_WORKFLOW_ID = "run-id-is-workflow-id"
#: Patch id: a run started without our search attributes (by `temporal workflow start`, say)
#: sets them itself.
SELF_DESCRIBED = "self-described"
#: Patch id: a final answer that breaks the result contract is told to the model, which answers
#: again (up to the plan's `output_retries`) before the run ends `invalid_agent_output`.
OUTPUT_RETRIES = "output-retries"
#: Patch id: a cancelled turn's parallel tool calls are all waited for (not only until the
#: first of them is cancelled), so every cancelled tool stores its end before the run's end.
WAIT_FOR_CANCELLED_TOOLS = "wait-for-cancelled-tools"
#: Patch id: the `summary` context's model call of a handoff counts against the run's
#: model-call and token budgets and in its usage.
HANDOFF_SUMMARY_USAGE = "handoff-summary-usage"
#: prepare_run and finish_run run as local activities (no task round trip through the server).
LOCAL_PREPARE_FINISH = "local-prepare-finish"
#: What one tool call of a turn produced: an activity's outcome, an entry decided here
#: (refusal, agent call result, a person's denial or answer), nothing allowed, or the run's end
#: (an approval that timed out with effect `fail`).
ToolStep = ToolOutcome | PendingEntry | Ending | None


@workflow.defn(name=WORKFLOW_NAME)
class AgentRunWorkflow:
    @workflow.init
    def __init__(self, input: RawValue) -> None:
        # Taken raw and validated here: input that does not fit `RunInput` (e.g. a start from
        # Temporal's own client) would otherwise fail every workflow task, for ever.
        self._input, self._invalid_input = _decode_input(input)
        self._queued: list[str] = []
        self._pending: list[PendingEntry] = []
        self._usage = UsageCounter()
        self._status = RunStatus.CREATED
        self._iteration = 0
        self._session_id = self._input.request.session.session_id or ""
        self._started_at: datetime | None = None
        self._finished_at: datetime | None = None
        self._ending: Ending | None = None
        self._plan: RunPlan | None = None
        self._ledger: BudgetLedger | None = None
        self._caller: AgentCaller | None = None
        self._deadline_at: datetime | None = None
        #: Turns done before this history began (continue-as-new carries the count).
        self._turns_at_start = 0
        self._gate = ApprovalGate(self._refresh_status)
        #: Call ids of the current turn that wait for a person.
        self._turn_gated: frozenset[str] = frozenset()
        #: Events decided here (refused calls and messages), stored by the next activity.
        self._decided = DecidedEvents()
        #: The tool calls of the current turn while they have no results yet (iteration, calls).
        self._open_calls: tuple[int, tuple[ToolCallSpec, ...]] | None = None
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
        """Queue user messages; they are taken at the next safe point of the loop.

        At most `MAX_QUEUED_MESSAGES` wait at a time (they live in workflow state); the excess
        is refused visibly: a warning now, a `user_messages_refused` event with the next
        model call or the run's end. The payload is decoded here, not by the SDK, which would
        drop a malformed one with nothing on the run to show for it.
        """
        payload = self._decode_messages(raw)
        if payload is None:
            return
        refused = 0
        for message in payload.messages:
            if not message.strip():
                continue
            size = len(message.encode("utf-8", "surrogatepass"))
            if (
                len(self._queued) < MAX_QUEUED_MESSAGES
                and self._queued_bytes() + size <= MAX_QUEUED_BYTES
            ):
                # AgentClient refuses such text; a signal from elsewhere gets it replaced.
                self._queued.append(storable_text(message.strip()))
            else:
                refused += 1
        if refused:
            self._decided.add(
                {
                    "type": "user_messages_refused",
                    "count": refused,
                    "limit": MAX_QUEUED_MESSAGES,
                    "limit_bytes": MAX_QUEUED_BYTES,
                }
            )
            workflow.logger.warning(
                "run %s: %d user message(s) refused: at most %d messages or %d bytes wait",
                self._input.run_id,
                refused,
                MAX_QUEUED_MESSAGES,
                MAX_QUEUED_BYTES,
            )

    @workflow.signal(
        name=SIGNAL_SPAWNED_RUN_ENDED,
        description="A child started by agent.spawn reports its result: SpawnEnded.",
    )
    def spawned_run_ended(self, ended: SpawnEnded) -> None:
        self._spawns.ended(ended)

    def _queued_bytes(self) -> int:
        return sum(len(text.encode("utf-8", "surrogatepass")) for text in self._queued)

    def _decode_messages(self, raw: RawValue) -> UserMessages | None:
        try:
            decoded = workflow.payload_converter().from_payload(raw.payload, UserMessages)
        except Exception as error:  # malformed JSON, or not a UserMessages
            problem = (
                _validation_problems(error)
                if isinstance(error, ValidationError)
                else f"{type(error).__name__}: {error}"
            )
            self._decided.add({"type": "user_messages_refused", "count": 1, "reason": problem})
            workflow.logger.warning(
                "run %s: a user_messages signal was refused: %s", self._input.run_id, problem
            )
            return None
        return decoded if isinstance(decoded, UserMessages) else None

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
            await self._record_decision(request, outcome)
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
        wrong_ids = _id_problem(self._input)
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
        missing = _missing_search_attributes(self._input, workflow.info().typed_search_attributes)
        if missing and workflow.patched(SELF_DESCRIBED):
            workflow.upsert_search_attributes(missing)

    def _refused(self, problem: str) -> AgentRunResult:
        """The input is not a run request: nothing was prepared, nothing is written."""
        failure = AgentFailure(code=FailureCode.INVALID_REQUEST, message=problem)
        self._ending = Ending.failed(failure)
        self._status = RunStatus.FAILED
        self._finished_at = workflow.now()
        workflow.logger.warning("run input refused: %s", problem)
        return AgentRunResult(
            run_id=self._input.run_id,
            root_run_id=self._input.root_run_id,
            agent_id=self._input.request.entry_agent,
            session_id="",
            outcome=RunOutcome.FAILED,
            failure=failure,
        )

    async def _execute(self) -> Ending:
        if self._input.carry is not None:
            plan = self._resume(self._input.carry)
        else:
            prepared = await self._prepare()
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
        self._queued = [*carry.queued, *self._queued]
        self._decided.items = [*carry.events, *self._decided.items]
        self._pending = list(carry.pending)
        self._gate.restore(carry.approvals)
        self._output_retries = OutputRetries(carry.plan.output_retries, carry.output_retries_used)
        self._handoffs = Handoffs(carry.handoffs)
        self._spawns.bind(self._ledger, self._decided, self._refresh_status)
        return carry.plan

    async def _prepare(self) -> RunPlan | Ending:
        input = self._input
        # Wait for a cancelled prepare to stop before finishing: finish_run releases the session
        # lease, which a prepare still going on could otherwise take after the release.
        cancellation = (
            ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
            if workflow.patched(CANCELLABLE_PREPARE)
            else ActivityCancellationType.TRY_CANCEL
        )
        try:
            plan: RunPlan = await _store_activity(
                ACTIVITY_PREPARE_RUN,
                PrepareRunInput(
                    ref=self._ref(None),
                    internal_session=input.internal_session,
                    request=input.request,
                    inherited_deadline=input.deadline,
                    caller_model_profile_id=input.caller_model_profile_id,
                    max_iterations=input.max_iterations,
                    result_contract=input.effective_result_contract,
                ),
                result_type=RunPlan,
                cancellation_type=cancellation,
                summary=f"prepare {input.request.entry_agent}",
            )
        except ActivityError as error:
            _reraise_cancellation(error)  # `run` ends the run cancelled, not failed
            # Prepare is store work: running out of time is a storage error.
            return Ending.failed(
                failure_from_activity_error(error, default=FailureCode.STORAGE_ERROR)
            )
        if (
            cancellation is ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
            and _cancellation_swallowed()
        ):
            # Prepare completed just as the run was cancelled, and handed its result back: the
            # run was cancelled all the same.
            raise asyncio.CancelledError()
        return plan

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
            queued=tuple(self._queued),
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
        try:
            done: RunPlan | HandOffResult = await workflow.execute_activity(
                ACTIVITY_HAND_OFF,
                HandOffInput(
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
                ),
                result_type=HandOffResult if counted else RunPlan,
                start_to_close_timeout=MODEL_CALL_TIMEOUT,  # a summary is a model call
                heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
                retry_policy=MODEL_RETRY,
                summary=f"hand off {step.from_agent} → {step.to_agent} ({step.context})",
            )
        except ActivityError as error:
            self._pending = list(pending)  # not written: keep them for the final flush
            _reraise_cancellation(error)
            denial = denial_of(error)
            if denial is not None:  # the authorizer said no: the agent goes on, told why
                if counted:
                    assert self._ledger is not None
                    self._ledger.release_model_call()  # no summary was written
                    self._usage.model_calls -= 1
                self._pending, back = self._handoffs.denied(self._pending, events, denial)
                self._decided.items = [*back, *self._decided.items]
                return
            failure = failure_from_activity_error(error, default=FailureCode.CONTEXT_ERROR)
            raise RunEnded(Ending.failed(failure)) from None
        next_plan = done.plan if isinstance(done, HandOffResult) else done
        if isinstance(done, HandOffResult):
            assert self._ledger is not None
            self._usage.add_tokens(done)
            self._ledger.spend_tokens(done.total_tokens)  # past the token budget: the run ends
        # The handing agent's spawned children end by its end policy: the next one starts clean.
        await self._spawns.hand_over(plan.spawned_on_exit, self._deadline_at)
        if _cancellation_swallowed():
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
        if turn.compaction_calls:  # only turns from workers that count compactions say so
            compaction = turn.compaction_usage()
            self._usage.model_calls += turn.compaction_calls
            self._usage.add_tokens(compaction)
            self._ledger.charge_model_calls(turn.compaction_calls)
            self._ledger.spend_tokens(compaction.total_tokens)
        self._usage.add_tokens(turn)
        self._ledger.spend_tokens(turn.total_tokens)
        if not turn.tool_calls:
            if self._queued:
                return None  # messages arrived while the model answered: go round once more
            return self._final_answer(plan, turn)
        # Until their results are pending, the calls are open: a run ending meanwhile answers
        # them (`_answer_open_calls`), so the session never holds a call without a result.
        self._open_calls = (iteration, turn.tool_calls)
        if _cancellation_swallowed() and workflow.patched(STOP_WHEN_A_TURN_OUTLIVES_CANCEL):
            # The model call finished instead of stopping when the run was cancelled; its tool
            # calls are answered `cancelled` as the run ends, none runs (or waits for a person).
            raise asyncio.CancelledError()
        self._ledger.reserve_tool_calls(len(turn.tool_calls))
        self._usage.tool_calls += len(turn.tool_calls)
        self._open_approvals(ref, turn)
        # The seed counts every `agent.call` the model makes (a malformed one too); trusted
        # calls, made by a client, are not the run's own.
        self._usage.agent_calls += sum(
            1 for call in turn.tool_calls if call.name in (AGENT_CALL_TOOL, AGENT_SPAWN_TOOL)
        )
        steps = await self._run_tools(plan, ref, turn.tool_calls)
        entries, ending = self._tool_entries(ref, iteration, turn.tool_calls, steps)
        self._pending.extend(entries)
        self._open_calls = None
        if ending is not None:
            raise RunEnded(ending)
        if _cancellation_swallowed() and workflow.patched(STOP_AFTER_CANCELLED_CHILDREN):
            raise asyncio.CancelledError()  # the run was cancelled while its children ended
        return None

    def _open_approvals(self, ref: RunRef, turn: ModelTurn) -> None:
        """Open a request for every call of the turn that waits for a person (all at once, so
        they are decided in any order while the other calls run)."""
        calls = {call.id: call for call in turn.tool_calls}
        needs = [need for need in turn.approvals if need.call_id in calls]
        self._turn_gated = frozenset(need.call_id for need in needs)
        if needs:
            now = workflow.now()
            self._gate.open(new_request(ref, calls[need.call_id], need, now) for need in needs)

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
        for index, message in enumerate(self._queued):
            self._pending.append(
                PendingEntry(
                    key=f"{self._input.run_id}:t{iteration}:user:{index}",
                    role="user",
                    content=message,
                    queued=True,
                )
            )
        self._queued.clear()

    async def _call_model(self, plan: RunPlan, ref: RunRef, iteration: int) -> ModelTurn:
        pending, self._pending = tuple(self._pending), []
        events = self._decided.take()
        try:
            turn: ModelTurn = await workflow.execute_activity(
                ACTIVITY_CALL_MODEL,
                ModelCallInput(
                    ref=ref.key(),  # resolved by the worker (`otherone.activities.run_refs`)
                    model_profile_id=plan.model_profile_id,
                    turn=iteration,
                    pending=pending,
                    result_limit_bytes=plan.result_limit_bytes,
                    result_contract=self._input.effective_result_contract,
                    context_window=self._input.request.session.context_window,
                    compaction_threshold=self._input.request.session.threshold_percentage,
                    events=events,
                    turn_offset=plan.turn_offset,
                    handoff_allowed=self._handoffs.left(plan) > 0,
                ),
                result_type=ModelTurn,
                task_queue=plan.model_task_queue,  # None: this workflow's own queue
                start_to_close_timeout=MODEL_CALL_TIMEOUT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=MODEL_RETRY,
                cancellation_type=_paired_cancellation(),
                summary=f"model {plan.model_label} turn {iteration}",
            )
        except ActivityError as error:
            self._pending = list(pending)  # not written: keep them for the final flush
            _reraise_cancellation(error)
            failure = failure_from_activity_error(error, default=FailureCode.MODEL_ERROR)
            raise RunEnded(Ending.failed(failure)) from None
        return turn

    # tools -------------------------------------------------------------------------------

    async def _run_tools(
        self, plan: RunPlan, ref: RunRef, calls: tuple[ToolCallSpec, ...]
    ) -> list[ToolStep]:
        """Run the turn's tool calls, in parallel when the agent allows it."""
        agent_calls = sum(
            1 for call in calls if self._is_agent_call(plan, call) or Spawner.is_spawn(plan, call)
        )
        parallel = plan.parallel_tool_calls and len(calls) > 1
        claimants = Claimants(agent_calls if parallel else 1)
        if parallel:
            limit = plan.limits.max_concurrent_tool_calls
            if len(calls) - agent_calls > limit and workflow.patched(TOOL_CONCURRENCY_LIMIT):
                slots = asyncio.Semaphore(limit)
                return await _all_steps(
                    self._run_tool_in(slots, plan, ref, call, claimants) for call in calls
                )
            return await _all_steps(self._run_tool(plan, ref, call, claimants) for call in calls)
        return await self._run_in_order(plan, ref, calls, claimants)

    async def _run_in_order(
        self,
        plan: RunPlan,
        ref: RunRef,
        calls: tuple[ToolCallSpec, ...],
        claimants: Claimants,
    ) -> list[ToolStep]:
        """One call after the other; once the run is cancelled (a child's result swallowed
        the cancellation), the calls left are answered as not run instead of started.

        Calls waiting for a person go last (in their order), so the others are not held up;
        the results keep the tool-call order."""
        order = sorted(range(len(calls)), key=lambda index: calls[index].id in self._turn_gated)
        steps: dict[int, ToolStep] = {}
        for index in order:
            call = calls[index]
            if (
                steps
                and _cancellation_swallowed()
                and workflow.patched(SKIP_CALLS_AFTER_CANCELLATION)
            ):
                steps[index] = not_run_entry(call)
            else:
                steps[index] = await self._run_tool(plan, ref, call, claimants)
        return [steps[index] for index in range(len(calls))]

    async def _run_tool_in(
        self,
        slots: asyncio.Semaphore,
        plan: RunPlan,
        ref: RunRef,
        call: ToolCallSpec,
        claimants: Claimants,
    ) -> ToolStep:
        """A tool call that waits for one of the run's `max_concurrent_tool_calls` slots
        (agent calls do not: children are bounded by max_children_per_run and allowances)."""
        if self._is_agent_call(plan, call) or Spawner.handles(plan, call):
            return await self._run_tool(plan, ref, call, claimants)
        approved = await self._approved(ref, call)  # a wait for a person holds no slot
        if not isinstance(approved, ToolCallSpec):
            return approved
        # No `async with`/`finally`: on cache eviction the coroutine is closed outside the
        # workflow's event loop. A slot is only lost when the run is ending anyway.
        await slots.acquire()
        step = await self._execute_tool(plan, ref, approved, claimants)
        slots.release()
        return step

    @staticmethod
    def _is_agent_call(plan: RunPlan, call: ToolCallSpec) -> bool:
        return call.name == AGENT_CALL_TOOL and bool(plan.reachable_agents)

    async def _run_tool(
        self, plan: RunPlan, ref: RunRef, call: ToolCallSpec, claimants: Claimants
    ) -> ToolStep:
        approved = await self._approved(ref, call)
        if not isinstance(approved, ToolCallSpec):
            return approved
        return await self._execute_tool(plan, ref, approved, claimants)

    async def _approved(self, ref: RunRef, call: ToolCallSpec) -> ToolCallSpec | ToolStep:
        """The call to run (with a person's edits), or what stands in for it: a denial, an
        answer, or the run's end. Calls that need nobody pass straight through."""
        if call.id not in self._turn_gated:
            return call
        request = await self._gate.wait(call.id)
        if request is None:
            request = await self._time_out(ref, call.id)
        outcome = request.decision
        assert outcome is not None
        if outcome.decision == "approved":
            if outcome.arguments is None:
                return call
            return call.model_copy(update={"arguments": outcome.arguments})
        if outcome.decision == "answered":
            return answer_entry(call, request)
        if outcome.decision == "timed_out" and request.on_timeout == "fail":
            failure = AgentFailure(
                code=FailureCode.APPROVAL_TIMED_OUT,
                message=f"nobody decided call '{call.id}' of tool '{call.name}' in time",
            )
            return Ending.failed(failure)
        return denied_entry(call, request)

    async def _time_out(self, ref: RunRef, call_id: str) -> ApprovalRequest:
        """Nobody decided in time: record it (audit), unless a decision is already on its way."""
        outcome = ApprovalOutcome(
            decision="timed_out", decided_by="otherone:timeout", decided_at=workflow.now()
        )
        self._gate.begin(call_id)
        try:
            await self._record_decision(self._gate.request(call_id), outcome)
        except ActivityError as error:
            try:
                _reraise_cancellation(error)  # the audit record is best effort; the wait is over
            except asyncio.CancelledError:
                self._gate.abandon(call_id)  # else a decision waiting on it would never go on
                raise
        except asyncio.CancelledError:
            self._gate.abandon(call_id)
            raise
        return self._gate.settle(call_id, outcome)

    async def _record_decision(self, request: ApprovalRequest, outcome: ApprovalOutcome) -> None:
        """Check edited arguments against the tool's schema and record the decision (events,
        store). Refused arguments raise (an `ActivityError` with the `invalid_arguments` type).
        """
        await workflow.execute_activity(
            ACTIVITY_RECORD_DECISION,
            RecordDecisionInput(ref=self._ref(self._plan), request=request, outcome=outcome),
            start_to_close_timeout=STORE_ACTIVITY_TIMEOUT,
            schedule_to_close_timeout=STORE_TOTAL_TIMEOUT,
            heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"{outcome.decision} {request.tool_name}",
        )

    async def _execute_tool(
        self, plan: RunPlan, ref: RunRef, call: ToolCallSpec, claimants: Claimants
    ) -> ToolStep:
        if self._is_agent_call(plan, call):
            return await self._agent_call(plan, ref, call, claimants)
        if Handoffs.is_handoff(plan, call):
            return self._handoff_call(plan, ref, call)
        if Spawner.handles(plan, call):
            assert self._caller is not None and self._deadline_at is not None
            return await self._spawns.run_tool(
                self._caller, plan, ref, self._deadline_at, call, claimants
            )
        settings = plan.tools.get(call.name)
        if settings is None:
            return None  # disallowed or hallucinated: nothing runs
        try:
            outcome: ToolOutcome = await workflow.execute_activity(
                ACTIVITY_RUN_TOOL,
                ToolCallInput(ref=ref.key(), call=call, result_limit_bytes=plan.result_limit_bytes),
                result_type=ToolOutcome,
                task_queue=plan.tool_task_queue,  # None: this workflow's own queue
                start_to_close_timeout=timedelta(seconds=settings.timeout_seconds + 30),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                # Waiting for a cancelled tool to stop means its `tool_completed` is stored
                # before the run's end decides which events its calls still owe.
                cancellation_type=_paired_cancellation(),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1), maximum_attempts=settings.max_attempts
                ),
                summary=f"tool {call.name}",
            )
        except ActivityError as error:
            _reraise_cancellation(error)
            failure = failure_from_activity_error(error, default=FailureCode.TOOL_ERROR)
            if call.name.startswith(MCP_PREFIX) and workflow.patched(MCP_FAILURES_TO_MODEL):
                return ToolOutcome(
                    tool_call_id=call.id,
                    name=call.name,
                    error_kind=ToolErrorKind.RECOVERABLE,
                    error=f"the call of MCP tool '{call.name}' failed: {failure.message}",
                )
            return ToolOutcome(
                tool_call_id=call.id,
                name=call.name,
                error_kind=ToolErrorKind.FATAL,
                error=failure.message,
            )
        return outcome

    async def _agent_call(
        self, plan: RunPlan, ref: RunRef, call: ToolCallSpec, claimants: Claimants
    ) -> PendingEntry:
        """`agent.call`: a child run; its structured result goes back to the model."""
        assert self._caller is not None and self._deadline_at is not None
        key = f"{ref.run_id}:agent-call:{call.id}"
        try:
            request = parse_agent_call(call.arguments)
        except AgentCallArgumentsError as error:
            return invalid_arguments_entry(key, call, str(error))
        self._decided.add(tool_started_event(call))  # stored by the call's check, first
        result = await self._caller.call(plan, ref, self._deadline_at, call.id, request, claimants)
        failed = result.failure.message if result.failure else None
        self._decided.add(tool_completed_event(call, failed))
        stored = self._caller.stored_by_child(call.id) and workflow.patched(
            CALL_RESULTS_BY_REFERENCE
        )
        return agent_call_entry(key, call, result, stored_by_child=stored)

    def _handoff_call(self, plan: RunPlan, ref: RunRef, call: ToolCallSpec) -> PendingEntry:
        """`agent.handoff`: accepted (it takes effect after this turn) or refused; either way a
        tool result for the model."""
        key = f"{ref.run_id}:handoff:{call.id}"
        entry = self._handoffs.decide(plan, key, call, self._iteration)
        if entry.error_kind is None:  # refusals are announced with the turn's other results
            self._decided.add(tool_started_event(call), tool_completed_event(call, None))
        return entry

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

    def _tool_entries(
        self,
        ref: RunRef,
        iteration: int,
        calls: tuple[ToolCallSpec, ...],
        steps: list[ToolStep],
    ) -> tuple[list[PendingEntry], Ending | None]:
        """Results in tool-call order, every call answered; and the ending a fatal or oversized
        result brings (the first one's)."""
        entries: list[PendingEntry] = []
        ending: Ending | None = None
        for index, (call, step) in enumerate(zip(calls, steps, strict=True)):
            key = _tool_key(ref.run_id, iteration, index)
            if step is None:
                entries.append(permission_denied_entry(key, call))
                self._decided.add(*refused_tool_events(call, entries[-1]))
            elif isinstance(step, Ending):  # e.g. an approval nobody gave, whose rule fails
                entries.append(ended_before_result_entry(key, call, step.outcome.value))
                self._decided.add(*refused_tool_events(call, entries[-1]))
                ending = ending or step
            elif isinstance(step, PendingEntry):
                entries.append(step.model_copy(update={"key": key}))
                if step.error_kind is not None:  # refused or not run: no activity announced it
                    self._decided.add(*refused_tool_events(call, step))
            else:
                ending = ending or _run_ending(call, step)
                entries.append(tool_result_entry(key, call, step))
        return entries, ending

    def _answer_open_calls(self, ending: Ending) -> None:
        """Answer the tool calls of a turn the run ended in (cancel, deadline, budget): an
        assistant tool call without a result would make the session unusable (providers
        reject such a transcript)."""
        if self._open_calls is None:
            return
        iteration, calls = self._open_calls
        self._open_calls = None
        for index, call in enumerate(calls):
            key = _tool_key(self._input.run_id, iteration, index)
            entry = ended_before_result_entry(key, call, ending.outcome.value)
            self._pending.append(entry)
            agent_call = call.name in (AGENT_CALL_TOOL, AGENT_SPAWN_TOOL)
            self._decided.add(*ended_before_result_events(call, entry, agent_call=agent_call))

    # finish ------------------------------------------------------------------------------

    async def _finish_shielded(self, ending: Ending, ref: RunRef) -> AgentRunResult:
        """Finish even if a cancellation arrives meanwhile (e.g. from a parent whose deadline
        passed while this run was already ending): a run always returns its structured result.

        A cancelled run waits at most `FINISH_GRACE` for its end to be stored (a store that is
        down or refuses the writes must not keep a cancelled run alive): then it ends anyway.
        """
        finishing = asyncio.ensure_future(self._finish(ending, ref))
        bounded = workflow.patched(BOUNDED_FINISH)
        cancelled = ending.outcome is RunOutcome.CANCELLED
        while True:
            try:
                if bounded and cancelled:
                    grace = FINISH_GRACE.total_seconds()
                    return await asyncio.wait_for(asyncio.shield(finishing), grace)
                return await asyncio.shield(finishing)
            except asyncio.CancelledError:
                cancelled = True
            except TimeoutError:
                finishing.cancel()
                workflow.logger.warning(
                    "run %s: its end was not stored within %ss of the cancellation",
                    self._input.run_id,
                    FINISH_GRACE.total_seconds(),
                )
                return self._unstored(ending, "finishing did not complete in time")

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
            _reraise_cancellation(error)
            failure = failure_from_activity_error(error, default=FailureCode.STORAGE_ERROR)
            return self._unstored(ending, failure.message)
        workflow.upsert_search_attributes([attrs.STATUS.value_set(self._status.value)])
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._result(ending)

    def _unstored(self, ending: Ending, reason: str) -> AgentRunResult:
        """The result of a run whose end could not be stored: a completed run fails with
        `storage_error` (its answer is not in the session); other endings stay as they are."""
        workflow.logger.warning("run %s: its end was not stored: %s", self._input.run_id, reason)
        if ending.outcome is RunOutcome.COMPLETED:
            failure = AgentFailure(
                code=FailureCode.STORAGE_ERROR,
                message=f"the run's end could not be stored: {reason}",
                retryable=True,
            )
            ending = Ending.failed(failure)
            self._ending = ending
            self._status = STATUS_FOR_OUTCOME[ending.outcome]
        workflow.upsert_search_attributes([attrs.STATUS.value_set(self._status.value)])
        return self._result(ending)

    def _result(self, ending: Ending) -> AgentRunResult:
        return AgentRunResult(
            run_id=self._input.run_id,
            root_run_id=self._input.root_run_id,
            agent_id=self._input.request.entry_agent,
            session_id=self._session_id,
            outcome=ending.outcome,
            failure=ending.failure,
            output=ending.output,
            usage=self._usage.snapshot(self._elapsed()),
            metadata=self._input.request.metadata,
            budget_remaining=self._ledger.left() if self._ledger else self._input.budget,
            artifacts=_artifacts_of(ending.output),
        )

    async def _finish_activity(self, ref: RunRef, ending: Ending) -> None:
        """Flush pending entries, release the session lease (only if this run holds it), and
        record the end."""
        pending, self._pending = tuple(self._pending), []
        await _store_activity(
            ACTIVITY_FINISH_RUN,
            FinishRunInput(
                ref=ref,
                pending=pending,
                events=self._decided.take(),
                status=self._status,
                usage=self._usage.snapshot(self._elapsed()),
                failure=ending.failure,
                output=ending.output,
                record=self.record(),
            ),
            result_type=None,
            cancellation_type=ActivityCancellationType.TRY_CANCEL,
            summary=f"finish {self._status.value}",
            # A cancelled run waits for its finish only FINISH_GRACE, a server timer; a local
            # activity in progress holds the workflow task (and so that timer) open.
            may_be_local=ending.outcome is not RunOutcome.CANCELLED,
        )

    def _elapsed(self) -> int:
        if self._started_at is None:
            return 0
        end = self._finished_at or workflow.now()
        return int((end - self._started_at).total_seconds() * 1000)

    def _ref(self, plan: RunPlan | None) -> RunRef:
        input = self._input
        return RunRef(
            run_id=input.run_id,
            root_run_id=input.root_run_id,
            parent_run_id=input.parent_run_id,
            agent_call_id=input.agent_call_id,
            agent_id=input.request.entry_agent,
            depth=input.depth,
            partition_key=input.request.runtime_context.partition_key,
            session_id=self._session_id,
            snapshot_version=plan.snapshot_version if plan else (input.snapshot_version or ""),
            include_thinking_events=input.request.include_thinking_events,
            event_visibility=input.request.event_visibility,
        )


def _decode_input(raw: RawValue | RunInput) -> tuple[RunInput, str | None]:
    """The run's input, or a stand-in naming this workflow and why the input was refused.

    A subclass registered in its place (a changed version, as a deploy brings) may declare
    ``RunInput`` and hand over the decoded input.
    """
    if isinstance(raw, RunInput):
        return raw, None
    try:
        decoded = workflow.payload_converter().from_payload(raw.payload, RunInput)
    except ValidationError as error:
        return _stand_in(), f"invalid run input: {_validation_problems(error)}"
    except Exception as error:  # not JSON at all, or an encoding we do not know
        return _stand_in(), f"invalid run input: {type(error).__name__}: {error}"
    if not isinstance(decoded, RunInput):
        return _stand_in(), "invalid run input: not a RunInput object"
    return decoded, None


def _id_problem(input: RunInput) -> str | None:
    """Why the input's ids cannot be this run's: the workflow id is the run id of every run
    (the store, events and children are keyed by it), and a root is its own root."""
    workflow_id = workflow.info().workflow_id
    if input.run_id != workflow_id:
        return f"invalid run input: run_id: must be the workflow id '{workflow_id}'"
    if input.parent_run_id is None and input.root_run_id != input.run_id:
        return f"invalid run input: root_run_id: a root run's must be its run id '{workflow_id}'"
    return None


def _missing_search_attributes(
    input: RunInput, present: TypedSearchAttributes
) -> list[SearchAttributeUpdate[Any]]:
    """Our search attributes of this run that its start did not set."""
    wanted: list[tuple[SearchAttributeKey[Any], Any]] = [
        (attrs.AGENT_ID, input.request.entry_agent),
        (attrs.DEPTH, input.depth),
        (attrs.PARTITION, input.request.runtime_context.partition_key),
        (attrs.STATUS, RunStatus.RUNNING.value),
    ]
    if input.agent_call_id is not None:
        wanted.append((attrs.CALL_ID, input.agent_call_id))
    return [key.value_set(value) for key, value in wanted if present.get(key) is None]


def _stand_in() -> RunInput:
    """Ids for the refusal's result and record: the workflow id is the run id of every run."""
    run_id = workflow.info().workflow_id
    request = AgentRunRequest.model_construct(entry_agent="", input="")
    return RunInput.model_construct(run_id=run_id, root_run_id=run_id, request=request)


def _validation_problems(error: ValidationError, limit: int = 5) -> str:
    """`field.path: message` for the first few problems (the input itself is not repeated)."""
    problems = [
        f"{'.'.join(str(part) for part in item['loc']) or '(input)'}: {item['msg']}"
        for item in error.errors()[:limit]
    ]
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def _artifacts_of(output: AgentOutput | None) -> tuple[JsonValue, ...]:
    """The result's artifact list: the output's, when it was too big to travel inline."""
    if output is None or output.artifact is None:
        return ()
    return (output.artifact.model_dump(mode="json"),)


def _timed_out() -> Ending:
    failure = AgentFailure(
        code=FailureCode.TIMED_OUT, message="run deadline passed", retryable=True
    )
    return Ending.of(RunOutcome.TIMED_OUT, failure)


async def _all_steps(steps: Iterable[Coroutine[Any, Any, ToolStep]]) -> list[ToolStep]:
    """The steps of a turn's parallel tool calls, run together.

    On cancellation `asyncio.gather` raises as soon as the first call is cancelled (a call
    still waiting for a slot is at once), while the others' activities are still stopping:
    their `tool_completed` would then race the run's end. Waiting for every call to stop keeps
    `PAIRED_EVENTS`' promise (patch `WAIT_FOR_CANCELLED_TOOLS`: older histories moved on).
    """
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        return list(await asyncio.gather(*tasks))
    except asyncio.CancelledError:
        if workflow.patched(WAIT_FOR_CANCELLED_TOOLS):
            await workflow.wait(tasks)
        raise


def _paired_cancellation() -> ActivityCancellationType:
    """How model and tool activities are cancelled: waited for (so their end events are
    stored before the run's), except in histories from before that rule."""
    if workflow.patched(PAIRED_EVENTS):
        return ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
    return ActivityCancellationType.TRY_CANCEL


def _tool_key(run_id: str, iteration: int, index: int) -> str:
    return f"{run_id}:t{iteration}:tool:{index}"


def _run_ending(call: ToolCallSpec, outcome: ToolOutcome) -> Ending | None:
    """A fatal or oversized result ends the run (the seed's rule)."""
    if outcome.oversized:
        failure = AgentFailure(
            code=FailureCode.BUDGET_EXCEEDED, message=f"max_result_bytes: {outcome.error}"
        )
        return Ending.failed(failure)
    if outcome.error_kind is ToolErrorKind.FATAL:
        message = f"tool '{call.name}' failed fatally: {outcome.error}"
        return Ending.failed(AgentFailure(code=FailureCode.TOOL_ERROR, message=message))
    return None


def _cancellation_swallowed() -> bool:
    """Was this run cancelled while it awaited something that returned normally anyway?

    Awaiting a child turns the run's cancellation into a cancellation request to the child;
    when the child then ends with its structured (`cancelled`) result, the await returns that
    result and the CancelledError is gone. The task's cancel count remembers the request.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _reraise_cancellation(error: ActivityError) -> None:
    """An activity cancelled because the run is cancelled (or timed out) ends the loop as such.

    Also when the activity, waited for after the cancellation request, ended otherwise (e.g.
    its worker died and it timed out): the run was cancelled all the same.
    """
    if is_cancelled_exception(error) or _cancellation_swallowed():
        raise asyncio.CancelledError() from error


async def _store_activity(
    name: str,
    input: Any,
    *,
    result_type: type | None,
    cancellation_type: ActivityCancellationType,
    summary: str,
    may_be_local: bool = True,
) -> Any:
    """prepare_run / finish_run: a local activity on new histories (`LOCAL_PREPARE_FINISH`),
    which saves the round trips of an activity task through the server."""
    if may_be_local and workflow.patched(LOCAL_PREPARE_FINISH):
        try:
            return await workflow.execute_local_activity(
                name,
                input,
                result_type=result_type,
                start_to_close_timeout=STORE_ACTIVITY_TIMEOUT,
                schedule_to_close_timeout=STORE_TOTAL_TIMEOUT,
                retry_policy=STORE_RETRY,
                cancellation_type=cancellation_type,
                summary=summary,
            )
        except ApplicationError as failure:
            # A local activity's own error arrives bare (a remote one's inside an ActivityError,
            # as do a local one's timeout and cancellation): wrap it so callers see one shape.
            raise ActivityError(
                f"local activity {name} failed",
                scheduled_event_id=0,
                started_event_id=0,
                identity="",
                activity_type=name,
                activity_id="",
                retry_state=RetryState.NON_RETRYABLE_FAILURE,
            ) from failure
    return await workflow.execute_activity(
        name,
        input,
        result_type=result_type,
        start_to_close_timeout=STORE_ACTIVITY_TIMEOUT,
        schedule_to_close_timeout=STORE_TOTAL_TIMEOUT,
        heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
        retry_policy=STORE_RETRY,
        cancellation_type=cancellation_type,
        summary=summary,
    )


__all__ = ["AgentRunWorkflow"]
