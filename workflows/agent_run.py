"""`AgentRunWorkflow`: one agent run, root or child, as a deterministic Temporal workflow.

The seed's loop, step by step: prepare (resolve the snapshot, take the session lease) → repeat up
to max_iterations: take queued user messages at a safe point → model call (activity) → no tool
calls: finish, unless messages were queued meanwhile → run tools (activities, in parallel when
allowed) → their results become the next turn's pending entries → finish (activity).

Deadlines are Temporal timers, cancellation is Temporal cancellation; both end the run with a
structured `AgentRunResult`, never a workflow failure. No I/O and no clock here: the transcript
lives in the store and activities receive references to it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from otherone import search_attributes as attrs
    from otherone.contracts import (
        ACTIVITY_CALL_MODEL,
        ACTIVITY_FINISH_RUN,
        ACTIVITY_PREPARE_RUN,
        ACTIVITY_RUN_TOOL,
        QUERY_RECORD,
        SIGNAL_USER_MESSAGES,
        WORKFLOW_NAME,
        FinishRunInput,
        ModelCallInput,
        ModelTurn,
        PendingEntry,
        PrepareRunInput,
        RunInput,
        RunPlan,
        RunRef,
        ToolCallInput,
        ToolCallSpec,
        ToolOutcome,
        UserMessages,
    )
    from otherone.errors import FailureCode
    from otherone.runs import (
        STATUS_FOR_OUTCOME,
        AgentFailure,
        AgentOutput,
        AgentRunResult,
        RunOutcome,
        RunRecord,
        RunStatus,
    )
    from otherone.tools import ToolErrorKind
    from workflows.outcomes import (
        Ending,
        RunEnded,
        UsageCounter,
        failure_from_activity_error,
        input_entries,
        permission_denied_entry,
        tool_result_entry,
    )

#: Store activities are quick; they retry on their own schedule (database restarts).
STORE_ACTIVITY_TIMEOUT = timedelta(seconds=60)
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
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
MAX_QUEUED_MESSAGES = 256


@workflow.defn(name=WORKFLOW_NAME)
class AgentRunWorkflow:
    @workflow.init
    def __init__(self, input: RunInput) -> None:
        self._input = input
        self._queued: list[str] = []
        self._pending: list[PendingEntry] = []
        self._usage = UsageCounter()
        self._status = RunStatus.CREATED
        self._iteration = 0
        self._session_id = input.request.session.session_id or ""
        self._started_at: datetime | None = None
        self._finished_at: datetime | None = None
        self._ending: Ending | None = None
        self._plan: RunPlan | None = None

    # messages ----------------------------------------------------------------------------

    @workflow.signal(name=SIGNAL_USER_MESSAGES)
    def user_messages(self, payload: UserMessages) -> None:
        """Queue user messages; they are taken at the next safe point of the loop."""
        for message in payload.messages:
            if message.strip() and len(self._queued) < MAX_QUEUED_MESSAGES:
                self._queued.append(message.strip())

    @workflow.query(name=QUERY_RECORD)
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
        )

    # run ---------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: RunInput) -> AgentRunResult:
        self._started_at = workflow.now()
        if not self._session_id:
            self._session_id = f"session-{workflow.uuid4()}"
            workflow.upsert_search_attributes([attrs.SESSION_ID.value_set(self._session_id)])
        plan = await self._prepare()
        if isinstance(plan, Ending):
            # Nothing was written and no lease taken: record the end, release nothing.
            return await self._finish(plan, self._ref(None), release_session=False)
        self._plan = plan
        ref = self._ref(plan)
        self._pending = input_entries(input.run_id, input.request.input)
        self._status = RunStatus.RUNNING
        ending = await self._run_until_deadline(plan, ref)
        return await self._finish(ending, ref)

    async def _prepare(self) -> RunPlan | Ending:
        input = self._input
        try:
            plan: RunPlan = await workflow.execute_activity(
                ACTIVITY_PREPARE_RUN,
                PrepareRunInput(
                    ref=self._ref(None),
                    internal_session=input.internal_session,
                    request=input.request,
                    inherited_deadline=input.deadline,
                ),
                result_type=RunPlan,
                start_to_close_timeout=STORE_ACTIVITY_TIMEOUT,
                retry_policy=STORE_RETRY,
                summary=f"prepare {input.request.entry_agent}",
            )
        except ActivityError as error:
            return Ending.failed(failure_from_activity_error(error))
        return plan

    def _deadline(self, timeout: timedelta) -> datetime:
        assert self._started_at is not None
        deadline = self._started_at + timeout
        inherited = self._input.deadline
        return min(deadline, inherited) if inherited is not None else deadline

    async def _run_until_deadline(self, plan: RunPlan, ref: RunRef) -> Ending:
        remaining = (self._deadline(plan.timeout) - workflow.now()).total_seconds()
        try:
            return await asyncio.wait_for(self._loop(plan, ref), timeout=max(remaining, 0.001))
        except TimeoutError:
            return Ending.of(
                RunOutcome.TIMED_OUT,
                AgentFailure(
                    code=FailureCode.TIMED_OUT, message="run deadline passed", retryable=True
                ),
            )
        except asyncio.CancelledError:
            return Ending.of(RunOutcome.CANCELLED)

    async def _loop(self, plan: RunPlan, ref: RunRef) -> Ending:
        try:
            for iteration in range(1, plan.max_iterations + 1):
                self._iteration = iteration
                ending = await self._turn(plan, ref, iteration)
                if ending is not None:
                    return ending
        except RunEnded as ended:
            return ended.ending
        return Ending.of(
            RunOutcome.BUDGET_EXCEEDED,
            AgentFailure(
                code=FailureCode.BUDGET_EXCEEDED,
                message=f"max_iterations ({plan.max_iterations}) exceeded",
            ),
        )

    async def _turn(self, plan: RunPlan, ref: RunRef, iteration: int) -> Ending | None:
        """One iteration: model call, then either the answer or the tools' results."""
        self._take_queued(iteration)
        self._usage.reserve_model_call(plan.limits)
        turn = await self._call_model(plan, ref, iteration)
        self._usage.add_model_turn(turn, plan.limits)
        if not turn.tool_calls:
            if self._queued:
                return None  # messages arrived while the model answered: go round once more
            return Ending.completed(AgentOutput(type="text", value=turn.content))
        self._usage.reserve_tool_calls(len(turn.tool_calls), plan.limits)
        outcomes = await self._run_tools(plan, ref, turn.tool_calls)
        self._pending.extend(self._tool_entries(ref, iteration, turn.tool_calls, outcomes))
        return None

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
        try:
            turn: ModelTurn = await workflow.execute_activity(
                ACTIVITY_CALL_MODEL,
                ModelCallInput(
                    ref=ref,
                    model_profile_id=plan.model_profile_id,
                    turn=iteration,
                    pending=pending,
                    result_limit_bytes=plan.result_limit_bytes,
                ),
                result_type=ModelTurn,
                start_to_close_timeout=MODEL_CALL_TIMEOUT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=MODEL_RETRY,
                summary=f"model {plan.model_label} turn {iteration}",
            )
        except ActivityError as error:
            self._pending = list(pending)  # not written: keep them for the final flush
            _reraise_cancellation(error)
            failure = failure_from_activity_error(error, default=FailureCode.MODEL_ERROR)
            raise RunEnded(Ending.failed(failure)) from None
        return turn

    async def _run_tools(
        self, plan: RunPlan, ref: RunRef, calls: tuple[ToolCallSpec, ...]
    ) -> list[ToolOutcome | None]:
        """Run allowed tools (in parallel when the agent allows it); None = not allowed."""
        if plan.parallel_tool_calls and len(calls) > 1:
            return list(await asyncio.gather(*(self._run_tool(plan, ref, call) for call in calls)))
        return [await self._run_tool(plan, ref, call) for call in calls]

    async def _run_tool(self, plan: RunPlan, ref: RunRef, call: ToolCallSpec) -> ToolOutcome | None:
        settings = plan.tools.get(call.name)
        if settings is None:
            return None  # disallowed or hallucinated: nothing runs
        try:
            outcome: ToolOutcome = await workflow.execute_activity(
                ACTIVITY_RUN_TOOL,
                ToolCallInput(ref=ref, call=call, result_limit_bytes=plan.result_limit_bytes),
                result_type=ToolOutcome,
                start_to_close_timeout=timedelta(seconds=settings.timeout_seconds + 30),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1), maximum_attempts=settings.max_attempts
                ),
                summary=f"tool {call.name}",
            )
        except ActivityError as error:
            _reraise_cancellation(error)
            failure = failure_from_activity_error(error, default=FailureCode.TOOL_ERROR)
            return ToolOutcome(
                tool_call_id=call.id,
                name=call.name,
                error_kind=ToolErrorKind.FATAL,
                error=failure.message,
            )
        return outcome

    def _tool_entries(
        self,
        ref: RunRef,
        iteration: int,
        calls: tuple[ToolCallSpec, ...],
        outcomes: list[ToolOutcome | None],
    ) -> list[PendingEntry]:
        """Results in tool-call order; a fatal or oversized result ends the run instead."""
        entries: list[PendingEntry] = []
        for index, (call, outcome) in enumerate(zip(calls, outcomes, strict=True)):
            key = f"{ref.run_id}:t{iteration}:tool:{index}"
            if outcome is None:
                entries.append(permission_denied_entry(key, call))
                continue
            if outcome.oversized:
                raise RunEnded(
                    Ending.of(
                        RunOutcome.BUDGET_EXCEEDED,
                        AgentFailure(
                            code=FailureCode.BUDGET_EXCEEDED,
                            message=f"max_result_bytes: {outcome.error}",
                        ),
                    )
                )
            if outcome.error_kind is ToolErrorKind.FATAL:
                message = f"tool '{call.name}' failed fatally: {outcome.error}"
                raise RunEnded(
                    Ending.failed(AgentFailure(code=FailureCode.TOOL_ERROR, message=message))
                )
            entries.append(tool_result_entry(key, call, outcome))
        return entries

    # finish ------------------------------------------------------------------------------

    async def _finish(
        self, ending: Ending, ref: RunRef, *, release_session: bool = True
    ) -> AgentRunResult:
        self._ending = ending
        self._status = STATUS_FOR_OUTCOME[ending.outcome]
        self._finished_at = workflow.now()
        if release_session:
            self._take_queued(self._iteration + 1)  # keep late messages in the session
        await self._finish_activity(ref, ending, release_session=release_session)
        workflow.upsert_search_attributes([attrs.STATUS.value_set(self._status.value)])
        await workflow.wait_condition(workflow.all_handlers_finished)
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
        )

    async def _finish_activity(self, ref: RunRef, ending: Ending, *, release_session: bool) -> None:
        pending = tuple(self._pending) if release_session else ()
        self._pending = []
        await workflow.execute_activity(
            ACTIVITY_FINISH_RUN,
            FinishRunInput(
                ref=ref,
                pending=pending,
                status=self._status,
                usage=self._usage.snapshot(self._elapsed()),
                failure=ending.failure,
                output=ending.output,
                release_session=release_session,
            ),
            start_to_close_timeout=STORE_ACTIVITY_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"finish {self._status.value}",
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
            agent_id=input.request.entry_agent,
            depth=input.depth,
            partition_key=input.request.runtime_context.partition_key,
            session_id=self._session_id,
            snapshot_version=plan.snapshot_version if plan else (input.snapshot_version or ""),
            include_thinking_events=input.request.include_thinking_events,
        )


def _reraise_cancellation(error: ActivityError) -> None:
    """An activity cancelled because the run is cancelled (or timed out) ends the loop as such."""
    if is_cancelled_exception(error):
        raise asyncio.CancelledError() from error


__all__ = ["AgentRunWorkflow"]
