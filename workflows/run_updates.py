"""What the run's updates do: a trusted agent call made on its behalf (`call_agent`) and a
person's decision on a tool call waiting for approval or an answer to `human.ask`
(`decide_approval`). `AgentRunWorkflow` declares the handlers and their validators; both refuse
once the run has ended.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import ApprovalDecision, ApprovalRequest, CallAgentInput
    from otherone.errors import FailureCode
    from otherone.runs import AgentCallResult, AgentFailure
    from otherone.workflows.budgets import Claimants

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.agent_calls import failed_call
from otherone.workflows.approvals import RUN_ENDED, outcome_of
from otherone.workflows.run_state import RunState
from otherone.workflows.tool_steps import record_decision


async def call_agent(state: RunState, input: CallAgentInput) -> AgentCallResult:
    """A trusted programmatic agent call made on behalf of this run (idempotent by call id)."""
    await workflow.wait_condition(lambda: state.caller is not None or state.ending is not None)
    plan, caller = state.plan, state.caller
    if plan is None or caller is None or state.ending is not None or state.deadline_at is None:
        failure = AgentFailure(
            code=FailureCode.INVALID_CONFIGURATION, message="the caller run has ended"
        )
        return failed_call(input.call_id, input.request.target, failure)
    return await caller.call(
        plan,
        state.ref(plan),
        state.deadline_at,
        input.call_id,
        input.request,
        claimants=Claimants(1, caller_goes_on=True),
    )


def accept_call_agent(state: RunState) -> None:
    """The `call_agent` validator: an ended run takes no more calls."""
    if state.ending is not None:
        raise ValueError(f"run '{state.input.run_id}' has ended")


async def decide_approval(state: RunState, decision: ApprovalDecision) -> ApprovalRequest:
    """Record a person's decision (the `record_decision` activity), then settle the request:
    the tool call waiting for it goes on."""
    gate, call_id = state.gate, decision.call_id
    while True:
        await workflow.wait_condition(
            lambda: not gate.deciding(call_id) or state.ending is not None
        )
        if not gate.deciding(call_id):
            break
        # Another handler began recording a decision after this wait was satisfied (two sent
        # at once: their waits resolve in one activation): wait for it too.
        if state.ending is not None:
            raise _ended(state)  # the run ended while another decision was recorded
    gate.check(decision)  # again: a decision may have been recorded meanwhile
    request = gate.request(call_id)
    if request.decision is not None:
        return request  # the same decision again
    if state.ending is not None:
        raise _ended(state)
    outcome = outcome_of(decision, workflow.now())
    gate.begin(call_id)
    try:
        await record_decision(state.ref(state.plan), request, outcome)
    except ActivityError as error:
        gate.abandon(call_id)
        cause = error.cause
        if isinstance(cause, ApplicationError):
            raise ApplicationError(cause.message, type=cause.type) from None
        raise ApplicationError(f"the decision was not recorded: {cause or error}") from None
    return gate.settle(call_id, outcome)


def accept_decision(state: RunState, decision: ApprovalDecision) -> None:
    """The `decide_approval` validator: a decision the gate takes, on a run still going."""
    if state.ending is not None:
        raise _ended(state)
    state.gate.check(decision)


def _ended(state: RunState) -> ApplicationError:
    return ApplicationError(f"run '{state.input.run_id}' has ended", type=RUN_ENDED)
