"""A spawned child's result on its way to its caller: the signal a spawned run sends as its
last step (`report_to_caller`), the result of a child that ended without sending it, what an
answer of `agent.await` / `agent.status` reports, and what continue-as-new carries of it.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import (
        SIGNAL_SPAWNED_RUN_ENDED,
        EndedRun,
        RunInput,
        SpawnedCall,
        SpawnEnded,
    )
    from otherone.errors import FailureCode
    from otherone.runs import (
        AgentCallResult,
        AgentFailure,
        AgentRunResult,
        RunOutcome,
        RunUsage,
    )


def children_reported(content: dict[str, object]) -> tuple[str, ...]:
    """The calls whose child's result this answer reports (``results`` of `agent.await`,
    ``result`` of `agent.status` / `agent.cancel`): the model reads the result each child
    stored, as for `agent.call`; the inline copy (within `AWAIT_RESULT_BYTES`) is the
    fallback for a child that stored none."""
    results = content.get("results")
    items = [*(results if isinstance(results, list) else []), content.get("result")]
    return tuple(
        item["call_id"]
        for item in items
        if isinstance(item, dict) and item.get("run_id") and isinstance(item.get("call_id"), str)
    )


def ended_unseen(call: SpawnedCall, ended: EndedRun) -> AgentCallResult:
    """The result of a carried call whose child Temporal reports ended without telling its
    caller: cancelled, or failed with a code and a message that say what happened."""
    if ended.status == "canceled":
        return AgentCallResult(
            call_id=call.call_id,
            target=call.target,
            run_id=call.run_id,
            outcome=RunOutcome.CANCELLED,
        )
    if ended.status == "not_found":
        message = f"spawned run '{call.run_id}' is no longer known to Temporal"
    elif ended.status == "completed":
        message = f"spawned run '{call.run_id}' completed, but its result could not be read"
    else:
        what = ended.status.replace("_", " ")
        message = (
            f"spawned run '{call.run_id}' ended outside the runtime: {what} "
            "(e.g. `temporal workflow terminate`); it left no result"
        )
    failure = AgentFailure(code=FailureCode.INTERNAL_ERROR, message=message)
    return AgentCallResult(
        call_id=call.call_id,
        target=call.target,
        run_id=call.run_id,
        outcome=RunOutcome.FAILED,
        failure=failure,
    )


def stub(result: AgentCallResult) -> AgentCallResult:
    """What continue-as-new carries of a result the model already read (its output is in the
    session)."""
    return result.model_copy(update={"output": None, "usage": RunUsage(), "artifacts": ()})


async def report_to_caller(run: RunInput, result: AgentRunResult) -> None:
    """A spawned run's last step: its result to its caller's current history (a signal by
    workflow id), even if a cancellation arrives meanwhile. A caller that has ended already
    cancelled this run, and needs nothing."""
    if not run.spawned or run.parent_run_id is None or run.agent_call_id is None:
        return
    caller = workflow.get_external_workflow_handle(run.parent_run_id)
    sending = asyncio.ensure_future(
        caller.signal(
            SIGNAL_SPAWNED_RUN_ENDED, SpawnEnded(call_id=run.agent_call_id, result=result)
        )
    )
    while True:
        try:
            await asyncio.shield(sending)
            return
        except asyncio.CancelledError:
            continue
        except FailureError as error:
            workflow.logger.info("run %s: caller not told of the end: %s", run.run_id, error)
            return
