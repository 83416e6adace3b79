"""The tool calls of one turn: approval, execution, and the results the model sees next.

`AgentRunWorkflow` makes a `ToolSteps` for every turn that has tool calls: the turn's calls wait
for a person when they need one (`approvals`), then run, in parallel when the agent allows it
(at most `max_concurrent_tool_calls` at a time), as a `run_tool` activity, a child run
(`agent.call`, `agent_calls`), a handoff decision (`handoffs`) or a spawn tool (`spawns`). Their
steps become the turn's pending entries, in tool-call order, every call answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from pydantic import JsonValue

    from otherone.config import AGENT_CALL_TOOL
    from otherone.contracts import (
        ACTIVITY_RECORD_DECISION,
        ACTIVITY_RUN_TOOL,
        STORE_ACTIVITY_TIMEOUT,
        STORE_HEARTBEAT_TIMEOUT,
        STORE_OUTAGE_PATIENCE,
        STORE_TOTAL_TIMEOUT,
        ApprovalNeed,
        ApprovalOutcome,
        ApprovalRequest,
        PendingEntry,
        RecordDecisionInput,
        RunPlan,
        RunRef,
        ToolCallInput,
        ToolCallSpec,
        ToolOutcome,
        ToolSettings,
    )
    from otherone.errors import FailureCode
    from otherone.mcp_servers import MCP_PREFIX
    from otherone.runs import AgentFailure, RunOutcome
    from otherone.shared_state import SET_STATE_TOOL, new_state
    from otherone.tools import ToolErrorKind
    from otherone.workflows.budgets import Claimants
    from otherone.workflows.handoffs import Handoffs
    from otherone.workflows.outcomes import (
        DecidedEvents,
        Ending,
        agent_call_entry,
        close_lost_attempts,
        ended_before_result_entry,
        failure_from_activity_error,
        invalid_arguments_entry,
        not_run_entry,
        permission_denied_entry,
        refused_tool_events,
        tool_completed_event,
        tool_result_entry,
        tool_started_event,
    )

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.activity_options import (
    HEARTBEAT_TIMEOUT,
    PAIRED_CANCELLATION,
    STORE_RETRY,
    cancellation_swallowed,
    reraise_cancellation,
)
from otherone.workflows.agent_calls import (
    AgentCallArgumentsError,
    AgentCaller,
    parse_agent_call,
)
from otherone.workflows.approvals import (
    ApprovalGate,
    answer_entry,
    denied_entry,
    new_request,
)
from otherone.workflows.capacity_waits import CapacityWaits
from otherone.workflows.guardrail_steps import guard_call, guard_result
from otherone.workflows.sleeps import Sleeps, is_sleep
from otherone.workflows.spawns import Spawner

#: What one tool call of a turn produced: an activity's outcome, an entry decided here
#: (refusal, agent call result, a person's denial or answer), nothing allowed, or the run's end
#: (an approval that timed out with effect `fail`).
ToolStep = ToolOutcome | PendingEntry | Ending | None


#: The most a turn's tool results may bring back inline (`RuntimeLimits.inline_tool_result_bytes`
#: times its calls): they all travel in the next model call's input, one payload, which Temporal
#: refuses past 2 MiB (and warns about past 512 KiB).
TURN_INLINE_BYTES = 256 * 1024


class ToolSteps:
    """One turn's tool calls, run against the run's collaborators (all owned by the workflow)."""

    def __init__(
        self,
        plan: RunPlan,
        ref: RunRef,
        iteration: int,
        *,
        caller: AgentCaller,
        deadline_at: datetime,
        gate: ApprovalGate,
        decided: DecidedEvents,
        spawns: Spawner,
        handoffs: Handoffs,
        capacity: CapacityWaits,
        sleeps: Sleeps,
        shared_state: bool = False,
    ) -> None:
        self._plan = plan
        self._ref = ref
        self._iteration = iteration
        self._caller = caller
        self._deadline_at = deadline_at
        self._gate = gate
        self._decided = decided
        self._spawns = spawns
        self._handoffs = handoffs
        self._capacity = capacity
        self._sleeps = sleeps
        #: The run shares the front end's state: the workflow answers `ui.set_state`.
        self._shared_state = shared_state
        #: Call ids of this turn that wait for a person.
        self._gated: frozenset[str] = frozenset()
        #: Whether this turn's tool results may come back inline (`ToolCallInput.inline`).
        self._inline = plan.limits.inline_tool_result_bytes > 0
        #: Results handed back inline (call id -> the call as it ran, with a person's edits,
        #: and its outcome): nothing of them is stored yet, so a run that ends before this
        #: turn's entries are made writes them from here.
        self.arrived: dict[str, tuple[ToolCallSpec, ToolOutcome]] = {}
        #: Answers of agent calls and spawn tools that came back (call id -> entry): their
        #: `tool_completed` is decided already, so a run that ends before this turn's entries
        #: are made answers them with these, not as calls it ended before.
        self.answered: dict[str, PendingEntry] = {}
        #: The run's end a result guardrail decided (a trip with ``on_tool_trip = "fail"``, or
        #: one that could not decide): taken with the turn's entries.
        self.guard_ending: Ending | None = None

    def open_approvals(
        self, tool_calls: tuple[ToolCallSpec, ...], approvals: Iterable[ApprovalNeed]
    ) -> None:
        """Open a request for every call of the turn that waits for a person (all at once, so
        they are decided in any order while the other calls run)."""
        calls = {call.id: call for call in tool_calls}
        needs = [need for need in approvals if need.call_id in calls]
        self._gated = frozenset(need.call_id for need in needs)
        if needs:
            now = workflow.now()
            self._gate.open(
                new_request(self._ref, calls[need.call_id], need, now) for need in needs
            )

    async def run(self, calls: tuple[ToolCallSpec, ...]) -> list[ToolStep]:
        """Run the turn's tool calls, in parallel when the agent allows it."""
        plan = self._plan
        agent_calls = sum(
            1 for call in calls if is_agent_call(plan, call) or Spawner.is_spawn(plan, call)
        )
        sleeps = sum(1 for call in calls if is_sleep(plan, call))
        parallel = plan.parallel_tool_calls and len(calls) > 1
        # An inline result's entry and events wait for the turn's end. A turn that waits for a
        # person or a child may last days: its quick calls store theirs at once, as before, so
        # watchers and the audit see what ran meanwhile (and a run terminated from outside
        # still shows it). And the turn's inline results all travel in the next model call's
        # input, one payload: past Temporal's payload limit its scheduling would fail the
        # workflow task again and again (the run stuck), so a wide turn stores them all.
        inline_bytes = plan.limits.inline_tool_result_bytes * len(calls)
        self._inline = (
            self._inline
            and inline_bytes <= TURN_INLINE_BYTES
            and not any(self._waits(call) for call in calls)
        )
        claimants = Claimants(agent_calls if parallel else 1)
        if parallel:
            limit = plan.limits.max_concurrent_tool_calls
            # At most `max_concurrent_tool_calls` at a time (agent calls have their own limit).
            if len(calls) - agent_calls - sleeps > limit:
                slots = asyncio.Semaphore(limit)
                return await _all_steps(self._run_tool_in(slots, call, claimants) for call in calls)
            return await _all_steps(self._run_tool(call, claimants) for call in calls)
        return await self._run_in_order(calls, claimants)

    def _waits(self, call: ToolCallSpec) -> bool:
        """Whether ``call`` waits for a person, a child or a timer (for as long as they take)."""
        plan = self._plan
        return (
            call.id in self._gated
            or is_agent_call(plan, call)
            or Spawner.handles(plan, call)
            or is_sleep(plan, call)
        )

    async def _run_in_order(
        self, calls: tuple[ToolCallSpec, ...], claimants: Claimants
    ) -> list[ToolStep]:
        """One call after the other; once the run is cancelled (a child's result swallowed
        the cancellation), the calls left are answered as not run instead of started.

        Calls waiting for a person go last (in their order), so the others are not held up;
        the results keep the tool-call order."""
        order = sorted(range(len(calls)), key=lambda index: calls[index].id in self._gated)
        steps: dict[int, ToolStep] = {}
        for index in order:
            call = calls[index]
            if steps and cancellation_swallowed():
                steps[index] = not_run_entry(call)
            else:
                steps[index] = await self._run_tool(call, claimants)
        return [steps[index] for index in range(len(calls))]

    async def _run_tool_in(
        self, slots: asyncio.Semaphore, call: ToolCallSpec, claimants: Claimants
    ) -> ToolStep:
        """A tool call that waits for one of the run's `max_concurrent_tool_calls` slots
        (agent calls do not: children are bounded by max_children_per_run and allowances;
        nor do sleeps: they run nothing)."""
        plan = self._plan
        if is_agent_call(plan, call) or Spawner.handles(plan, call) or is_sleep(plan, call):
            return await self._run_tool(call, claimants)
        approved = await self._approved(call)  # a wait for a person holds no slot
        if not isinstance(approved, ToolCallSpec):
            return approved
        # No `async with`/`finally`: on cache eviction the coroutine is closed outside the
        # workflow's event loop. A slot is only lost when the run is ending anyway.
        await slots.acquire()
        step = await self._execute_tool(approved, claimants)
        slots.release()
        return step

    async def _run_tool(self, call: ToolCallSpec, claimants: Claimants) -> ToolStep:
        approved = await self._approved(call)
        if not isinstance(approved, ToolCallSpec):
            return approved
        return await self._execute_tool(approved, claimants)

    async def _approved(self, call: ToolCallSpec) -> ToolCallSpec | ToolStep:
        """The call to run (with a person's edits), or what stands in for it: a denial, an
        answer, or the run's end. Calls that need nobody pass straight through."""
        if call.id not in self._gated:
            return call
        request = await self._gate.wait(call.id)
        if request is None:
            request = await self._time_out(call.id)
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

    async def _time_out(self, call_id: str) -> ApprovalRequest:
        """Nobody decided in time: record it (audit), unless a decision is already on its way."""
        outcome = ApprovalOutcome(
            decision="timed_out", decided_by="otherone:timeout", decided_at=workflow.now()
        )
        self._gate.begin(call_id)
        try:
            await record_decision(self._ref, self._gate.request(call_id), outcome)
        except ActivityError as error:
            try:
                reraise_cancellation(error)  # the audit record is best effort; the wait is over
            except asyncio.CancelledError:
                self._gate.abandon(call_id)  # else a decision waiting on it would never go on
                raise
        except asyncio.CancelledError:
            self._gate.abandon(call_id)
            raise
        return self._gate.settle(call_id, outcome)

    async def _execute_tool(self, call: ToolCallSpec, claimants: Claimants) -> ToolStep:
        plan = self._plan
        if is_agent_call(plan, call):
            entry = self.answered[call.id] = await self._agent_call(call, claimants)
            return entry
        if Handoffs.is_handoff(plan, call):
            return self._handoff_call(call)
        if self._shared_state and call.name == SET_STATE_TOOL:
            return self._set_state(call)
        if is_sleep(plan, call):
            entry = self.answered[call.id] = await self._sleeps.run_tool(
                plan, self._ref, self._deadline_at, call, self._decided
            )
            return entry
        if Spawner.handles(plan, call):
            entry = self.answered[call.id] = await self._spawns.run_tool(
                self._caller, plan, self._ref, self._deadline_at, call, claimants
            )
            return entry
        settings = plan.tools.get(call.name)
        if settings is None:
            return None  # disallowed or hallucinated: nothing runs
        refused = await self._guarded(call)
        if refused is not None:
            return refused  # a guardrail tripped: the tool never runs
        try:
            outcome = await self._tool_activity(call, settings)
            while outcome.capacity_wait is not None:  # no fleet permit yet: nothing ran
                await self._capacity.wait(outcome.capacity_wait)
                outcome = await self._tool_activity(call, settings)
        except ActivityError as error:
            reraise_cancellation(error)
            self._decided.add(close_lost_attempts(call))  # e.g. the last attempt's worker died
            return _failed_tool(call, error)
        outcome = await self._result_guarded(call, outcome)
        if outcome.content is not None:
            self.arrived[call.id] = (call, outcome)
        return outcome

    async def _result_guarded(self, call: ToolCallSpec, outcome: ToolOutcome) -> ToolOutcome:
        """The call's result guardrails (`guard_result`); an end they decide is the turn's."""
        guarded, ending = await guard_result(
            self._plan, self._ref, self._iteration, self._decided, call, outcome
        )
        self.guard_ending = self.guard_ending or ending
        return guarded

    async def _guarded(self, call: ToolCallSpec) -> PendingEntry | Ending | None:
        """The call's tool guardrails, right before it would run (`guard_call`)."""
        return await guard_call(self._plan, self._ref, self._iteration, self._decided, call)

    async def _tool_activity(self, call: ToolCallSpec, settings: ToolSettings) -> ToolOutcome:
        plan = self._plan
        outcome: ToolOutcome = await workflow.execute_activity(
            ACTIVITY_RUN_TOOL,
            ToolCallInput(
                ref=self._ref.key(),
                call=call,
                result_limit_bytes=plan.result_limit_bytes,
                inline=self._inline,
            ),
            result_type=ToolOutcome,
            task_queue=plan.tool_task_queue,  # None: this workflow's own queue
            # The tool's own time, its start and end, and a store outage ridden out while
            # its result is stored (`STORE_OUTAGE_PATIENCE`): a tool that succeeded is not
            # timed out (and run again) because the store was down for a minute.
            start_to_close_timeout=timedelta(seconds=settings.timeout_seconds + 30)
            + STORE_OUTAGE_PATIENCE,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            # Waiting for a cancelled tool to stop means its `tool_completed` is stored
            # before the run's end decides which events its calls still owe.
            cancellation_type=PAIRED_CANCELLATION,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1), maximum_attempts=settings.max_attempts
            ),
            summary=f"tool {call.name}",
        )
        return outcome

    async def _agent_call(self, call: ToolCallSpec, claimants: Claimants) -> PendingEntry:
        """`agent.call`: a child run; its structured result goes back to the model."""
        key = f"{self._ref.run_id}:agent-call:{call.id}"
        try:
            request = parse_agent_call(call.arguments)
        except AgentCallArgumentsError as error:
            return invalid_arguments_entry(key, call, str(error))
        self._decided.add(tool_started_event(call))  # stored by the call's check, first
        result = await self._caller.call(
            self._plan, self._ref, self._deadline_at, call.id, request, claimants
        )
        failed = result.failure.message if result.failure else None
        if failed is None and result.outcome is RunOutcome.CANCELLED:
            failed = "the called agent's run was cancelled"  # no failure, but no answer either
        self._decided.add(tool_completed_event(call, failed))
        # The result reaches the caller's model by reference when the child stored it.
        stored = self._caller.stored_by_child(call.id)
        return agent_call_entry(key, call, result, stored_by_child=stored)

    def _handoff_call(self, call: ToolCallSpec) -> PendingEntry:
        """`agent.handoff`: accepted (it takes effect after this turn) or refused; either way a
        tool result for the model."""
        key = f"{self._ref.run_id}:handoff:{call.id}"
        # Announced with the turn's other results (`entries`), accepted or refused: it takes
        # effect once the turn has them all, and a run ending before answers it as a call it
        # ended before (one end, the one the session holds).
        return self._handoffs.decide(self._plan, key, call, self._iteration)

    def _set_state(self, call: ToolCallSpec) -> PendingEntry:
        """`ui.set_state`: the new state is an event (`state_updated`: an AG-UI stream's
        STATE_SNAPSHOT), nothing runs; arguments that give no state are refused to the model."""
        try:
            state = new_state(call.arguments)
        except ValueError as error:
            return invalid_arguments_entry("", call, str(error))
        self._decided.add(
            tool_started_event(call),
            {"type": "state_updated", "state": state},
            tool_completed_event(call, None),
        )
        entry = self.answered[call.id] = PendingEntry(
            key="",
            role="tool",
            content='{"status": "ok", "note": "the app shows the new state"}',
            tool_call_id=call.id,
            tool_name=call.name,
        )
        return entry

    def _marked(
        self, call: ToolCallSpec, events: list[dict[str, JsonValue]]
    ) -> list[dict[str, JsonValue]]:
        """A client tool's events say it ran in the client (whose result message the client
        has: an AG-UI stream sends no second one)."""
        if call.id not in self._gated or self._gate.request(call.id).kind != "client_tool":
            return events
        return [{**event, "ran_in_client": True} for event in events]

    def entries(
        self, calls: tuple[ToolCallSpec, ...], steps: list[ToolStep]
    ) -> tuple[list[PendingEntry], Ending | None]:
        """Results in tool-call order, every call answered; and the ending a fatal or oversized
        result brings (the first one's)."""
        entries: list[PendingEntry] = []
        ending: Ending | None = None
        for index, (call, step) in enumerate(zip(calls, steps, strict=True)):
            key = tool_key(self._ref.run_id, self._iteration, index)
            if step is None:
                entries.append(permission_denied_entry(key, call))
                self._decided.add(*refused_tool_events(call, entries[-1]))
            elif isinstance(step, Ending):  # e.g. an approval nobody gave, whose rule fails
                entries.append(ended_before_result_entry(key, call, step.outcome.value))
                self._decided.add(*refused_tool_events(call, entries[-1]))
                ending = ending or step
            elif isinstance(step, PendingEntry):
                entries.append(step.model_copy(update={"key": key}))
                # Refused or not run, a handoff, a person's answer to `human.ask`: no activity
                # announced it (agent calls and spawn tools announce theirs as they run).
                if step.error_kind is not None or call.id not in self.answered:
                    self._decided.add(*self._marked(call, refused_tool_events(call, step)))
            else:
                ending = ending or _run_ending(call, step)
                ran, _ = self.arrived.get(call.id, (call, step))
                # An inline result's entry carries the arguments the tool ran with (a person
                # may have edited the model's): its deferred `tool_started` shows them.
                entries.append(tool_result_entry(key, ran, step))
        return entries, ending or self.guard_ending


async def record_decision(ref: RunRef, request: ApprovalRequest, outcome: ApprovalOutcome) -> None:
    """Check edited arguments against the tool's schema and record the decision (events,
    store). Refused arguments raise (an `ActivityError` with the `invalid_arguments` type).
    """
    await workflow.execute_activity(
        ACTIVITY_RECORD_DECISION,
        RecordDecisionInput(ref=ref, request=request, outcome=outcome),
        start_to_close_timeout=STORE_ACTIVITY_TIMEOUT,
        schedule_to_close_timeout=STORE_TOTAL_TIMEOUT,
        heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
        retry_policy=STORE_RETRY,
        summary=f"{outcome.decision} {request.tool_name}",
    )


def is_agent_call(plan: RunPlan, call: ToolCallSpec) -> bool:
    return call.name == AGENT_CALL_TOOL and bool(plan.reachable_agents)


def tool_key(run_id: str, iteration: int, index: int) -> str:
    return f"{run_id}:t{iteration}:tool:{index}"


def _failed_tool(call: ToolCallSpec, error: ActivityError) -> ToolOutcome:
    """A tool activity that failed for good: the run's end, or a tool error the model sees.

    An MCP tool call whose activity failed for good (its worker died on the last attempt, say)
    is a tool error the model sees: a server is third-party code, and the seed lets the model
    route around a broken one."""
    failure = failure_from_activity_error(error, default=FailureCode.TOOL_ERROR)
    if call.name.startswith(MCP_PREFIX):
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


async def _all_steps(steps: Iterable[Coroutine[Any, Any, ToolStep]]) -> list[ToolStep]:
    """The steps of a turn's parallel tool calls, run together.

    On cancellation `asyncio.gather` raises as soon as the first call is cancelled (a call
    still waiting for a slot is at once), while the others' activities are still stopping:
    their `tool_completed` would then race the run's end. Waiting for every call to stop keeps
    `PAIRED_CANCELLATION`'s promise.
    """
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        return list(await asyncio.gather(*tasks))
    except asyncio.CancelledError:
        await workflow.wait(tasks)
        raise


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
