"""`AgentRunWorkflow`: one agent run, root or child, as a deterministic Temporal workflow.

The seed's loop, step by step: prepare (resolve the snapshot, take the session lease) → repeat up
to max_iterations: take queued user messages at a safe point → model call (activity) → no tool
calls: finish, unless messages were queued meanwhile → run tools (activities, in parallel when
allowed; `agent.call` starts a child run of this same workflow) → their results become the next
turn's pending entries → finish (activity).

Deadlines are Temporal timers, cancellation is Temporal cancellation; both end the run with a
structured `AgentRunResult`, never a workflow failure. No I/O and no clock here: the transcript
lives in the store and activities receive references to it.

This class is the Temporal-facing part: the handlers, and `run`'s start (input checks, prepare
or resume) and end (spawned children, finishing, the report to a spawning caller). The run's
state is a `RunState` (`run_state`); the loop is `turns` (with `handoff_steps`), the updates'
work `run_updates`, the end `finishing`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from otherone import search_attributes as attrs
    from otherone.contracts import (
        QUERY_APPROVALS,
        QUERY_RECORD,
        QUERY_RUN_REF,
        SIGNAL_CAPACITY_FREED,
        SIGNAL_SPAWNED_RUN_ENDED,
        SIGNAL_USER_MESSAGES,
        UPDATE_CALL_AGENT,
        UPDATE_DECIDE_APPROVAL,
        WORKFLOW_NAME,
        ApprovalDecision,
        ApprovalRequest,
        CallAgentInput,
        RunPlan,
        RunRef,
        SpawnEnded,
        WebhookPlan,
    )
    from otherone.runs import (
        AgentCallResult,
        AgentRunResult,
        RunOutcome,
        RunRecord,
        RunStatus,
    )
    from otherone.workflows.outcomes import Ending

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows import run_updates
from otherone.workflows.finishing import finish_shielded, refused
from otherone.workflows.run_input import (
    decode_input,
    id_problem,
    missing_search_attributes,
    one_raw_input,
    root_problem,
)
from otherone.workflows.run_state import RunState
from otherone.workflows.spawn_results import report_to_caller
from otherone.workflows.store_steps import RunIdUsedError, prepare_run
from otherone.workflows.turns import run_until_deadline
from otherone.workflows.webhook_delivery import start_delivery


@workflow.defn(name=WORKFLOW_NAME)
class AgentRunWorkflow:
    @workflow.init
    @one_raw_input
    def __init__(self, *inputs: Any) -> None:
        # Taken raw and validated here: input that does not fit `RunInput` (e.g. a start from
        # Temporal's own client) would otherwise fail every workflow task, for ever.
        decoded, self._invalid_input = decode_input(inputs)
        self._state = RunState(decoded)

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
        self._state.messages.receive(raw)

    @workflow.signal(
        name=SIGNAL_SPAWNED_RUN_ENDED,
        description="A child started by agent.spawn reports its result: SpawnEnded.",
    )
    def spawned_run_ended(self, ended: SpawnEnded) -> None:
        self._state.spawns.ended(ended)

    @workflow.signal(
        name=SIGNAL_CAPACITY_FREED,
        description="A fleet permit the run's model call waits for may be free: ask again now.",
    )
    def capacity_freed(self) -> None:
        self._state.capacity.freed()

    @workflow.update(
        name=UPDATE_CALL_AGENT,
        description=(
            'A trusted agent call on behalf of this run: {"call_id": "...", "request": '
            "AgentCallRequest}; idempotent by call id; returns an AgentCallResult."
        ),
    )
    async def call_agent(self, input: CallAgentInput) -> AgentCallResult:
        """A trusted programmatic agent call made on behalf of this run (idempotent by call id)."""
        return await run_updates.call_agent(self._state, input)

    @call_agent.validator
    def _accept_call_agent(self, input: CallAgentInput) -> None:
        run_updates.accept_call_agent(self._state)

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
        return await run_updates.decide_approval(self._state, decision)

    @decide_approval.validator
    def _accept_decision(self, decision: ApprovalDecision) -> None:
        run_updates.accept_decision(self._state, decision)

    @workflow.query(
        name=QUERY_APPROVALS,
        description="Approval requests and questions of this run: open ones have no decision.",
    )
    def approvals(self) -> tuple[ApprovalRequest, ...]:
        return self._state.gate.requests()

    @workflow.query(
        name=QUERY_RECORD,
        description="The run's RunRecord: status, turn, usage, output, lineage.",
    )
    def record(self) -> RunRecord:
        return self._state.record()

    @workflow.query(
        name=QUERY_RUN_REF,
        description="The run's RunRef: what a worker needs to resolve a compact activity ref.",
    )
    def run_ref(self) -> RunRef:
        return self._state.ref(self._state.plan)

    # run ---------------------------------------------------------------------------------

    @workflow.run
    @one_raw_input
    async def run(self, *inputs: Any) -> AgentRunResult:
        state = self._state
        state.started_at = workflow.now()
        if self._invalid_input is not None:
            return refused(state, self._invalid_input)
        # A run whose input's run_id is not its workflow id (or a root whose root_run_id is not
        # its run id), or that is its own root but names a parent or a depth other than 0 (a
        # plain client's input), is refused instead of running under the wrong ids.
        wrong_ids = id_problem(state.input) or root_problem(state.input)
        if wrong_ids is not None:
            return refused(state, wrong_ids)
        self._describe_self()
        if not state.session_id and state.input.carry is None:
            state.session_id = f"session-{workflow.uuid4()}"
            workflow.upsert_search_attributes([attrs.SESSION_ID.value_set(state.session_id)])
        try:
            ending = await self._execute()
        except asyncio.CancelledError:  # cancelled while preparing, before the loop began
            ending = Ending.of(RunOutcome.CANCELLED)
        except RunIdUsedError as used:  # another execution of an ended run's id
            return refused(state, str(used))
        plan = state.plan
        on_exit = plan.spawned_on_exit if plan is not None else "cancel"
        await state.spawns.finish(ending.outcome, on_exit, state.deadline_at)
        result = await finish_shielded(state, ending, state.ref(state.plan))
        await report_to_caller(state.input, result)  # only a spawned run reports by signal
        if state.end_stored:  # the webhook carries the stored record
            await start_delivery(state.ref(state.plan), self._webhook())
        return result

    def _webhook(self) -> WebhookPlan | None:
        """The run's webhook: its plan's (the request's, else its agent's), or, when it ended
        before it was prepared, its request's."""
        plan = self._state.plan
        if plan is not None:
            return plan.webhook
        url = self._state.input.request.webhook
        return WebhookPlan(url=url) if url is not None else None

    def _describe_self(self) -> None:
        """Set the search attributes a client left out (a start by `temporal workflow start`
        or another SDK), so the run is listed, scoped and shown like one `AgentClient` started."""
        missing = missing_search_attributes(
            self._state.input, workflow.info().typed_search_attributes
        )
        if missing:
            workflow.upsert_search_attributes(missing)
        # The session it names, which `temporal workflow start` leaves out too (a session it
        # has none of is minted, and listed, by `run`).
        session_id = self._state.input.request.session.session_id
        present = workflow.info().typed_search_attributes.get(attrs.SESSION_ID)
        if session_id and present is None:
            workflow.upsert_search_attributes([attrs.SESSION_ID.value_set(session_id)])

    async def _execute(self) -> Ending:
        state = self._state
        if state.input.carry is not None:
            plan = state.resume(state.input.carry)
        else:
            prepared = await prepare_run(state.input, state.ref(None))
            if isinstance(prepared, Ending):
                return prepared
            plan = self._start(prepared)
        state.status = RunStatus.RUNNING
        return await run_until_deadline(state, plan, state.ref(plan))

    def _start(self, plan: RunPlan) -> RunPlan:
        """A new run, prepared (a hook: a changed version may adjust the plan here)."""
        return self._state.start(plan)


__all__ = ["AgentRunWorkflow"]
