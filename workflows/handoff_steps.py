"""The run's side of an `agent.handoff` the model asked for (`handoffs` decides it).

Once the turn's tool results are in and nothing the handing agent began is still running (its
trusted calls' children, update handlers), the `hand_off` activity shapes the session and plans
the run under the next agent; its spawned children end by its end policy, then the run
**continues as new** as that agent. When the worker's authorizer denies the handoff, the agent
goes on, told why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pydantic import JsonValue
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from otherone import search_attributes as attrs
    from otherone.contracts import HandOffInput, HandOffResult, RunPlan, RunRef
    from otherone.errors import FailureCode
    from otherone.runs import HandoffStep
    from otherone.workflows.handoffs import denial_of
    from otherone.workflows.outcomes import Ending, RunEnded, failure_from_activity_error

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.activity_options import (
    cancellation_swallowed,
    reraise_cancellation,
)
from otherone.workflows.continuing import continue_as_new
from otherone.workflows.run_state import RunState
from otherone.workflows.store_steps import hand_off


async def hand_off_step(state: RunState, plan: RunPlan, ref: RunRef) -> None:
    """Pass the conversation to the agent the turn handed off to: the `hand_off` activity
    shapes the session and plans the run under it, then the run continues as new as that
    agent (`otherone.workflows.handoffs`). Reached only through `agent.handoff`. Returns
    (the agent goes on) only when the worker's authorizer denied the handoff."""
    accepted = state.handoffs.accepted
    assert accepted is not None and state.caller is not None
    # Children of trusted calls and update handlers finish under the agent that began them.
    caller = state.caller

    def settled() -> bool:
        return not caller.active and workflow.all_handlers_finished()

    await workflow.wait_condition(settled)
    step = accepted.step
    # The `summary` context's model call counts against the run's model-call and token
    # budgets and in its usage.
    counted = step.context == "summary"
    if counted:
        assert state.ledger is not None
        # The summary is a model call of the run, reserved like a turn's: a spent budget
        # ends the run here (`budget_exceeded`), before any model is called.
        state.ledger.reserve_model_call()
        state.usage.model_calls += 1
    pending, state.pending = tuple(state.pending), []
    events = state.decided.take()
    handoff = HandOffInput(
        ref=ref,
        plan=plan,
        step=step,
        number=len(state.handoffs.chain) + 1,
        message=accepted.message,
        last_turns=accepted.last_turns,
        pending=pending,
        events=events,
        record=state.record(),
        with_usage=counted,
    )
    try:
        done = await hand_off(handoff)
    except ActivityError as error:
        state.pending = list(pending)  # not written: keep them for the final flush
        reraise_cancellation(error)
        denial = denial_of(error)
        if denial is None:
            failure = failure_from_activity_error(error, default=FailureCode.CONTEXT_ERROR)
            raise RunEnded(Ending.failed(failure)) from None
        _denied(state, denial, events, counted)
        return
    await _continue_as_next_agent(state, plan, step, done, settled)


def _denied(
    state: RunState, denial: str, events: tuple[dict[str, JsonValue], ...], counted: bool
) -> None:
    """The authorizer said no: the agent goes on, told why."""
    if counted:
        assert state.ledger is not None
        state.ledger.release_model_call()  # no summary was written
        state.usage.model_calls -= 1
    state.pending, back = state.handoffs.denied(state.pending, events, denial)
    state.decided.items = [*back, *state.decided.items]


async def _continue_as_next_agent(
    state: RunState,
    plan: RunPlan,
    step: HandoffStep,
    done: RunPlan | HandOffResult,
    settled: Callable[[], bool],
) -> None:
    next_plan = done.plan if isinstance(done, HandOffResult) else done
    if isinstance(done, HandOffResult):
        assert state.ledger is not None
        state.usage.add_tokens(done)
        state.ledger.spend_tokens(done.total_tokens)  # past the token budget: the run ends
        state.ledger.spend_cost(done.cost)
    # The handing agent's spawned children end by its end policy: the next one starts clean.
    await state.spawns.hand_over(plan.spawned_on_exit, state.deadline_at)
    if cancellation_swallowed():
        raise asyncio.CancelledError()  # cancelled while they stopped: no handoff
    await workflow.wait_condition(settled)  # a trusted call may have come meanwhile
    state.handoffs.chain = (*state.handoffs.chain, step)
    state.handoffs.accepted = None
    workflow.upsert_search_attributes([attrs.AGENT_ID.value_set(step.to_agent)])
    request = state.input.request.model_copy(update={"entry_agent": step.to_agent})
    carry = state.carry_over(next_plan)
    continue_as_new(state.input.model_copy(update={"request": request, "carry": carry}))
