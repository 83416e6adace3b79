"""The run's loop: turns of model call → tools until an answer, the deadline or the turn limit.

Each turn takes the queued user messages (a safe point), reserves and makes the model call
(`model_steps`), then either ends the run with the final answer (retried while the result
contract allows, `output_retries`) or runs the turn's tool calls (`tool_steps`), whose results
are pending for the next turn. Between turns the run continues as new when its history has grown
enough, or hands off to another agent (`handoff_steps`). The deadline is a Temporal timer around
the whole loop.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from pydantic import JsonValue

    from otherone.config import AGENT_CALL_TOOL, AGENT_SPAWN_TOOL
    from otherone.contracts import (
        GuardrailVerdict,
        ModelTurn,
        PendingEntry,
        PlannedModel,
        RunPlan,
        RunRef,
    )
    from otherone.errors import FailureCode
    from otherone.runs import AgentFailure, AgentOutput, RunOutcome
    from otherone.workflows.outcomes import (
        Ending,
        RunEnded,
        failure_from_activity_error,
        shares_state,
    )
    from otherone.workflows.output_retries import invalid_output

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.activity_options import (
    cancellation_swallowed,
    reraise_cancellation,
)
from otherone.workflows.continuing import continue_as_new
from otherone.workflows.guardrail_steps import (
    GuardrailBroken,
    first_trip,
    output_check,
    tripped_failure,
)
from otherone.workflows.handoff_steps import hand_off_step
from otherone.workflows.input_guards import InputGuard
from otherone.workflows.model_fallbacks import (
    attempts_of,
    fallback_event,
    falls_back,
    model_chain,
)
from otherone.workflows.model_steps import call_model
from otherone.workflows.run_state import RunState
from otherone.workflows.sleeps import is_sleep
from otherone.workflows.tool_steps import ToolSteps


async def run_until_deadline(state: RunState, plan: RunPlan, ref: RunRef) -> Ending:
    """The loop under the run's deadline; a cancellation ends it `cancelled`."""
    assert state.deadline_at is not None
    remaining = (state.deadline_at - workflow.now()).total_seconds()
    try:
        return await asyncio.wait_for(_loop(state, plan, ref), timeout=max(remaining, 0.001))
    except TimeoutError:
        return _timed_out()
    except asyncio.CancelledError:
        return Ending.of(RunOutcome.CANCELLED)


def _timed_out() -> Ending:
    failure = AgentFailure(
        code=FailureCode.TIMED_OUT, message="run deadline passed", retryable=True
    )
    return Ending.of(RunOutcome.TIMED_OUT, failure)


async def _loop(state: RunState, plan: RunPlan, ref: RunRef) -> Ending:
    try:
        for iteration in range(state.iteration + 1, plan.max_iterations + 1):
            await _maybe_continue_as_new(state, plan)
            state.iteration = iteration
            ending = await _turn(state, plan, ref, iteration)
            if ending is not None:
                return ending
            if state.handoffs.accepted is not None:
                await hand_off_step(state, plan, ref)  # continues as new under the next agent
    except RunEnded as ended:
        return ended.ending
    return Ending.of(
        RunOutcome.BUDGET_EXCEEDED,
        AgentFailure(
            code=FailureCode.BUDGET_EXCEEDED,
            message=f"max_iterations ({plan.max_iterations}) exceeded",
        ),
    )


async def _maybe_continue_as_new(state: RunState, plan: RunPlan) -> None:
    """At a turn boundary, hand over to a fresh history when this one has grown enough.

    Only when nothing is in flight: no child running and no trusted call being handled.
    """
    assert state.caller is not None
    turns = state.iteration - state.turns_at_start
    due = turns >= plan.continue_as_new_after_turns or (
        turns > 0 and workflow.info().is_continue_as_new_suggested()
    )
    if not due or state.caller.active or state.gate.waiting or not workflow.all_handlers_finished():
        return
    continue_as_new(state.input.model_copy(update={"carry": state.carry_over(plan)}))


async def _turn(state: RunState, plan: RunPlan, ref: RunRef, iteration: int) -> Ending | None:
    """One iteration: model call, then either the answer or the tools' results."""
    assert state.ledger is not None and state.deadline_at is not None
    if workflow.now() >= state.deadline_at:
        # E.g. a child that hit the shared deadline returned first: this run is out of time too.
        raise RunEnded(_timed_out())
    state.take_queued(iteration)
    guard = InputGuard.of(state, plan, iteration)
    if guard is not None and not guard.parallel:
        await guard.before()  # nothing reserved or billed yet
    state.ledger.reserve_model_call()
    state.usage.model_calls += 1
    tripped = None
    if guard is not None and guard.parallel:
        turn, tripped = await guard.alongside(_call_model(state, plan, ref, iteration))
    else:
        turn = await _call_model(state, plan, ref, iteration)
    _charge(state, turn)
    if tripped is not None:  # the answer came before the verdict: it is not taken
        if turn.tool_calls:
            state.open_calls = (iteration, turn.tool_calls)  # answered as the run ends
        raise RunEnded(tripped)
    if not turn.tool_calls:
        return await _answered(state, plan, turn)
    await _run_tools(state, plan, ref, iteration, turn)
    return None


async def _answered(state: RunState, plan: RunPlan, turn: ModelTurn) -> Ending | None:
    """A turn without tool calls: the run's ending, or None to go round once more."""
    if cancellation_swallowed():
        # The model answered instead of stopping when the run was cancelled: the answer is
        # in the session (the model call stored it), but the run ends cancelled and calls
        # no model again (for queued messages or an output retry).
        raise asyncio.CancelledError()
    if state.messages.queued:
        return None  # messages arrived while the model answered: go round once more
    return await _final_answer(state, plan, turn)


def _charge(state: RunState, turn: ModelTurn) -> None:
    """The model call's usage, and its compactions', against the usage and the budget."""
    assert state.ledger is not None
    if turn.compaction_calls:  # only turns from workers that count compactions say so
        compaction = turn.compaction_usage()
        state.usage.model_calls += turn.compaction_calls
        state.usage.add_tokens(compaction)
        state.ledger.charge_model_calls(turn.compaction_calls)
        state.ledger.spend_tokens(compaction.total_tokens)
        state.ledger.spend_cost(compaction.cost)
    state.usage.add_tokens(turn)
    state.ledger.spend_tokens(turn.total_tokens)
    state.ledger.spend_cost(turn.cost)


async def _run_tools(
    state: RunState, plan: RunPlan, ref: RunRef, iteration: int, turn: ModelTurn
) -> None:
    """The turn's tool calls, their results pending for the next model call (`tool_steps`).
    Raises `RunEnded` when a result ends the run, `CancelledError` when it was cancelled."""
    assert state.ledger is not None
    # Until their results are pending, the calls are open: a run ending meanwhile answers
    # them (`finishing.answer_open_calls`), so the session never holds a call without a result.
    state.open_calls = (iteration, turn.tool_calls)
    if cancellation_swallowed():
        # The model call finished instead of stopping when the run was cancelled; its tool
        # calls are answered `cancelled` as the run ends, none runs (or waits for a person).
        raise asyncio.CancelledError()
    # A sleep is neither a model nor a tool call: it takes none of the tool-call budget.
    counted = sum(1 for call in turn.tool_calls if not is_sleep(plan, call))
    state.ledger.reserve_tool_calls(counted)
    state.usage.tool_calls += counted
    tools = state.open_tools = _tool_steps(state, plan, ref, iteration)
    tools.open_approvals(turn.tool_calls, turn.approvals)
    # The seed counts every `agent.call` the model makes (a malformed one too); trusted
    # calls, made by a client, are not the run's own.
    state.usage.agent_calls += sum(
        1 for call in turn.tool_calls if call.name in (AGENT_CALL_TOOL, AGENT_SPAWN_TOOL)
    )
    steps = await tools.run(turn.tool_calls)
    entries, ending = tools.entries(turn.tool_calls, steps)
    state.pending.extend(entries)
    state.open_calls, state.open_tools = None, None
    if ending is not None:
        raise RunEnded(ending)
    if cancellation_swallowed():
        raise asyncio.CancelledError()  # the run was cancelled while its children ended


def _tool_steps(state: RunState, plan: RunPlan, ref: RunRef, iteration: int) -> ToolSteps:
    assert state.caller is not None and state.deadline_at is not None
    return ToolSteps(
        plan,
        ref,
        iteration,
        caller=state.caller,
        deadline_at=state.deadline_at,
        gate=state.gate,
        decided=state.decided,
        spawns=state.spawns,
        handoffs=state.handoffs,
        capacity=state.capacity,
        sleeps=state.sleeps,
        shared_state=shares_state(state.input),
    )


async def _final_answer(state: RunState, plan: RunPlan, turn: ModelTurn) -> Ending | None:
    if turn.output_error is not None:
        if _retry_output(state, plan, turn.output_error):
            return None  # the model answers again, told what was wrong
        return Ending.failed(invalid_output(turn, state.output_retries))
    # Turns recorded before result contracts existed carry no output: the text is the output.
    output = turn.output or AgentOutput(type="text", value=turn.content)
    # The contract first, then the output guardrails, on the answer that met it.
    tripped = await _check_output(state, plan, output)
    if tripped is not None:
        assert plan.guardrails is not None
        if plan.guardrails.on_output_trip == "retry" and _retry_guarded(state, plan, tripped):
            return None  # the model answers again, told which guardrail refused and why
        return tripped_failure(tripped)
    assert state.ledger is not None
    # The answer stays in the session (the model call stored it), as in the seed; past the
    # tree's output budget the run ends `budget_exceeded` instead of returning it.
    state.ledger.spend_output_bytes(output)
    return Ending.completed(output)


def _retry_output(state: RunState, plan: RunPlan, problem: str) -> bool:
    """Tell the model why its answer breaks the contract, while retries and turns are left
    (up to the plan's `output_retries`; then the run ends `invalid_agent_output`)."""
    retries = state.output_retries
    if not retries.left or state.iteration >= plan.max_iterations:
        return False
    state.pending.append(retries.retry(state.input.run_id, state.iteration, problem))
    state.decided.add(retries.event(state.iteration, problem))
    return True


async def _check_output(
    state: RunState, plan: RunPlan, output: AgentOutput
) -> GuardrailVerdict | None:
    """The output guardrails over a final answer that met the result contract."""
    guards = plan.guardrails.output if plan.guardrails is not None else ()
    if not guards:
        return None
    check, referenced = output_check(state.ref(plan), plan, state.iteration, output)
    try:
        return await first_trip(plan, guards, check, state.decided, referenced)
    except GuardrailBroken as broken:
        raise RunEnded(broken.ending) from None


def _retry_guarded(state: RunState, plan: RunPlan, tripped: GuardrailVerdict) -> bool:
    """A tripped output guardrail asks for another answer, while output retries and turns are
    left (they are the result contract's: one count for both)."""
    retries = state.output_retries
    if not retries.left or state.iteration >= plan.max_iterations:
        return False
    problem = f"guardrail '{tripped.name}' refused it: {tripped.reason}"
    state.pending.append(retries.guardrail_retry(state.input.run_id, state.iteration, problem))
    state.decided.add(retries.event(state.iteration, problem))
    return True


async def _call_model(state: RunState, plan: RunPlan, ref: RunRef, iteration: int) -> ModelTurn:
    """The turn's model call on the run's model; when that call fails for a reason its
    attempts did not fix, the same turn's call on each of its fallbacks in order
    (`model_fallbacks`: a decision from the failure in the history). The last one's failure
    ends the run."""
    pending, state.pending = tuple(state.pending), []
    events = state.decided.take()
    chain = model_chain(plan)
    attempts = 0  # made by the turn's earlier profiles
    for index, model in enumerate(chain):
        try:
            turn = await _call_profile(
                state,
                plan,
                ref,
                iteration,
                pending,
                events,
                model,
                attempt_offset=attempts,
                fallback_from=chain[0].profile_id if index else None,
            )
        except ActivityError as error:
            state.pending = list(pending)  # maybe not written: kept for the final flush
            reraise_cancellation(error)
            if index + 1 == len(chain) or not falls_back(error):
                failure = failure_from_activity_error(error, default=FailureCode.MODEL_ERROR)
                raise RunEnded(Ending.failed(failure)) from None
            # The failed call stored the events; its pending entries go again (their writes
            # are keyed: a second one is a no-op), so none is lost whatever failed.
            state.pending = []
            events = (fallback_event(iteration, model, chain[index + 1], error),)
            attempts += attempts_of(model)
            continue
        state.usage.answered_by(model.profile_id)
        return turn
    raise AssertionError("a run's model chain is never empty")


async def _call_profile(
    state: RunState,
    plan: RunPlan,
    ref: RunRef,
    iteration: int,
    pending: tuple[PendingEntry, ...],
    events: tuple[dict[str, JsonValue], ...],
    model: PlannedModel,
    *,
    attempt_offset: int,
    fallback_from: str | None,
) -> ModelTurn:
    """The turn's call on ``model``; while the fleet has no permit for it (`CapacityWait`),
    the run waits here, on a timer or until a release wakes it, and asks again. Raises the
    call's `ActivityError` when it failed for good."""
    allowed = state.handoffs.left(plan) > 0
    waiting_since = None
    assert state.deadline_at is not None
    while True:
        waited = workflow.now() - waiting_since if waiting_since is not None else None
        turn = await call_model(
            state.input,
            plan,
            ref,
            iteration,
            pending,
            events,
            handoff_allowed=allowed,
            deadline_at=state.deadline_at,
            waited_ms=int(waited.total_seconds() * 1000) if waited is not None else 0,
            model=model,
            attempt_offset=attempt_offset,
            fallback_from=fallback_from,
        )
        if turn.capacity_wait is None:
            return turn
        # The refused call stored the turn's pending entries and events: not again.
        pending, events = (), ()
        waiting_since = waiting_since or workflow.now()
        await state.capacity.wait(turn.capacity_wait)
