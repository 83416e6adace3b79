"""How a run ends: its end is stored even through a late cancellation, within bounds, and the
run returns its structured `AgentRunResult` (never a workflow failure).

Ending a run (`finish_shielded`): late user messages and the open tool calls of the turn it
ended in are answered into the session, the `finish_run` activity stores the end, the status
search attribute says it, and the run waits for its update and signal handlers. A run whose
input is no run request ends at once (`refused`), writing nothing.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import JsonValue
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from otherone import search_attributes as attrs
    from otherone.config import AGENT_CALL_TOOL, AGENT_SPAWN_TOOL
    from otherone.contracts import FinishRunInput, RunInput, RunRef
    from otherone.definitions import TreeBudget
    from otherone.errors import FailureCode
    from otherone.runs import (
        STATUS_FOR_OUTCOME,
        AgentFailure,
        AgentOutput,
        AgentRunResult,
        RunOutcome,
        RunRecord,
        RunStatus,
        RunUsage,
    )
    from otherone.workflows.outcomes import (
        Ending,
        ended_before_result_entry,
        ended_before_result_events,
        failure_from_activity_error,
        refused_tool_events,
        tool_result_entry,
    )

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.activity_options import reraise_cancellation
from otherone.workflows.run_input import refused_result
from otherone.workflows.run_state import RunState
from otherone.workflows.store_steps import finish_run
from otherone.workflows.tool_steps import tool_key

#: How long a cancelled run waits for its end to be stored (a failed finish_run ends the run
#: with its result instead of failing the workflow).
FINISH_GRACE = timedelta(seconds=10)


async def finish_shielded(state: RunState, ending: Ending, ref: RunRef) -> AgentRunResult:
    """Finish even if a cancellation arrives meanwhile: a run always returns its structured
    result (`shielded`); a cancelled one ends anyway after `FINISH_GRACE`."""
    finishing = asyncio.ensure_future(_finish(state, ending, ref))
    cancelled = ending.outcome is RunOutcome.CANCELLED
    result = await shielded(finishing, cancelled=cancelled)
    if result is None:
        return _out_of_grace(state, state.ending or ending)  # as stored, if it was
    return result


def refused(state: RunState, problem: str) -> AgentRunResult:
    """The input is not a run request (or its run id belongs to a run that ended): nothing was
    prepared, nothing is written; `OtheroneStatus` says it failed, so status queries list it."""
    failure = AgentFailure(code=FailureCode.INVALID_REQUEST, message=problem)
    state.ending = Ending.failed(failure)
    state.status = RunStatus.FAILED
    state.finished_at = workflow.now()
    workflow.logger.warning("run input refused: %s", problem)
    workflow.upsert_search_attributes([attrs.STATUS.value_set(state.status.value)])
    return refused_result(state.input, failure)


def _out_of_grace(state: RunState, ending: Ending) -> AgentRunResult:
    """`FINISH_GRACE` passed: either the end is not stored yet, or it is and update or
    signal handlers (e.g. a trusted call waiting for its child) were still running."""
    grace = FINISH_GRACE.total_seconds()
    if not state.end_stored:
        workflow.logger.warning(
            "run %s: its end was not stored within %ss of the cancellation",
            state.input.run_id,
            grace,
        )
        return _unstored(state, ending, "finishing did not complete in time")
    workflow.logger.warning(
        "run %s: its end was stored (%s), but update or signal handlers were still running "
        "%ss after the cancellation: it ends without waiting for them",
        state.input.run_id,
        ending.outcome.value,
        grace,
    )
    return _result(state, ending)  # the stored end, not `storage_error`


async def _finish(state: RunState, ending: Ending, ref: RunRef) -> AgentRunResult:
    state.ending = ending
    state.status = STATUS_FOR_OUTCOME[ending.outcome]
    state.finished_at = workflow.now()
    if state.caller is not None and ending.outcome is not RunOutcome.COMPLETED:
        state.caller.cancel_children()  # e.g. children of trusted calls still running
    _answer_open_calls(state, ending)
    if state.plan is not None:
        state.take_queued(state.iteration + 1)  # keep late messages in the session
    try:
        earlier = await _finish_activity(state, ref, ending)
    except ActivityError as error:
        reraise_cancellation(error)
        failure = failure_from_activity_error(error, default=FailureCode.STORAGE_ERROR)
        return _unstored(state, ending, failure.message)
    if earlier is not None:
        # Another end was stored first (its workflow task then failed and this one took
        # another path, e.g. a cancellation arrived meanwhile): a run ends once, as stored.
        ending = _stored_ending(earlier)
        state.ending, state.status = ending, earlier.status
    state.end_stored = True
    workflow.upsert_search_attributes([attrs.STATUS.value_set(state.status.value)])
    await workflow.wait_condition(workflow.all_handlers_finished)
    return _result(state, ending)


def _answer_open_calls(state: RunState, ending: Ending) -> None:
    """Answer the tool calls of a turn the run ended in (cancel, deadline, budget): an
    assistant tool call without a result would make the session unusable (providers
    reject such a transcript)."""
    if state.open_calls is None:
        return
    iteration, calls = state.open_calls
    tools = state.open_tools
    arrived = tools.arrived if tools is not None else {}
    answered = tools.answered if tools is not None else {}
    state.open_calls, state.open_tools = None, None
    for index, call in enumerate(calls):
        key = tool_key(state.input.run_id, iteration, index)
        answer = answered.get(call.id)
        if answer is not None:
            # A child's result (e.g. it ended cancelled as the run did) or a spawn's answer:
            # the session gets it and its decided `tool_completed` stands (one end a call).
            state.pending.append(answer.model_copy(update={"key": key}))
            if answer.error_kind is not None:  # refused: no event announced it yet
                state.decided.add(*refused_tool_events(call, answer))
            continue
        found = arrived.get(call.id)
        if found is not None:
            # It ran and handed its result back inline: the session gets the real result
            # (its events are written with the entry), as a stored one would win. The call
            # as it ran: its `tool_started` shows a person's edits to the arguments.
            ran, outcome = found
            state.pending.append(tool_result_entry(key, ran, outcome))
            continue
        entry = ended_before_result_entry(key, call, ending.outcome.value)
        state.pending.append(entry)
        agent_call = call.name in (AGENT_CALL_TOOL, AGENT_SPAWN_TOOL)
        state.decided.add(*ended_before_result_events(call, entry, agent_call=agent_call))


def _unstored(state: RunState, ending: Ending, reason: str) -> AgentRunResult:
    """The result of a run whose end could not be stored: a completed run fails with
    `storage_error` (its answer is not in the session); other endings stay as they are."""
    workflow.logger.warning("run %s: its end was not stored: %s", state.input.run_id, reason)
    if ending.outcome is RunOutcome.COMPLETED:
        ending = Ending.failed(unstored_failure(reason))
        state.ending = ending
        state.status = STATUS_FOR_OUTCOME[ending.outcome]
    workflow.upsert_search_attributes([attrs.STATUS.value_set(state.status.value)])
    return _result(state, ending)


def _result(state: RunState, ending: Ending) -> AgentRunResult:
    usage = state.usage.snapshot(state.elapsed())
    budget_remaining = state.ledger.left() if state.ledger else state.input.budget
    return run_result(
        state.input, state.session_id, ending, usage, budget_remaining, state.record()
    )


def _stored_ending(record: RunRecord) -> Ending:
    outcome = next(o for o, status in STATUS_FOR_OUTCOME.items() if status is record.status)
    return Ending(outcome, failure=record.failure, output=record.output)


async def _finish_activity(state: RunState, ref: RunRef, ending: Ending) -> RunRecord | None:
    pending, state.pending = tuple(state.pending), []
    finish = FinishRunInput(
        ref=ref,
        pending=pending,
        events=state.decided.take(),
        status=state.status,
        usage=state.usage.snapshot(state.elapsed()),
        failure=ending.failure,
        output=ending.output,
        record=state.record(),
        unprepared=state.plan is None,
    )
    return await finish_run(finish, cancelled=ending.outcome is RunOutcome.CANCELLED)


async def shielded(
    finishing: asyncio.Future[AgentRunResult], *, cancelled: bool
) -> AgentRunResult | None:
    """The result of ``finishing``, even if a cancellation arrives meanwhile (e.g. from a parent
    whose deadline passed while this run was already ending).

    A cancelled run waits at most `FINISH_GRACE` for its end to be stored (a store that is
    down or refuses the writes must not keep a cancelled run alive): then ``finishing`` is
    cancelled and None returned (also when the end was stored and only update or signal
    handlers were still running: the caller tells the two apart).
    """
    while True:
        try:
            if cancelled:
                grace = FINISH_GRACE.total_seconds()
                return await asyncio.wait_for(asyncio.shield(finishing), grace)
            return await asyncio.shield(finishing)
        except asyncio.CancelledError:
            cancelled = True
        except TimeoutError:
            finishing.cancel()
            return None


def unstored_failure(reason: str) -> AgentFailure:
    """Why a completed run whose end could not be stored fails (its answer is not in the
    session)."""
    return AgentFailure(
        code=FailureCode.STORAGE_ERROR,
        message=f"the run's end could not be stored: {reason}",
        retryable=True,
    )


def run_result(
    input: RunInput,
    session_id: str,
    ending: Ending,
    usage: RunUsage,
    budget_remaining: TreeBudget | None,
    record: RunRecord | None = None,
) -> AgentRunResult:
    """The run's result; ``record`` (the run's own) adds its turns, version and handoffs."""
    return AgentRunResult(
        run_id=input.run_id,
        root_run_id=input.root_run_id,
        agent_id=input.request.entry_agent,
        session_id=session_id,
        outcome=ending.outcome,
        failure=ending.failure,
        output=ending.output,
        usage=usage,
        metadata=input.request.metadata,
        budget_remaining=budget_remaining,
        artifacts=_artifacts_of(ending.output),
        iteration=record.iteration if record else 0,
        agent_definition_version=record.agent_definition_version if record else None,
        handoffs=record.handoffs if record else (),
        started_at=record.started_at if record else None,
        mcp_unavailable=record.mcp_unavailable if record else {},
        forked_from=input.forked_from,
    )


def _artifacts_of(output: AgentOutput | None) -> tuple[JsonValue, ...]:
    """The result's artifact list: the output's, when it was too big to travel inline."""
    if output is None or output.artifact is None:
        return ()
    return (output.artifact.model_dump(mode="json"),)
