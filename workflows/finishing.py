"""How a run ends: its end is stored even through a late cancellation, within bounds, and the
run returns its structured `AgentRunResult` (never a workflow failure)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import JsonValue
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import RunInput
    from otherone.definitions import TreeBudget
    from otherone.errors import FailureCode
    from otherone.runs import AgentFailure, AgentOutput, AgentRunResult, RunUsage
    from otherone.workflows.outcomes import Ending

#: Patch id: a cancelled run's finishing is bounded (`FINISH_GRACE`) and a failed finish_run
#: ends the run with its result instead of failing the workflow.
BOUNDED_FINISH = "bounded-finish"
#: How long a cancelled run waits for its end to be stored.
FINISH_GRACE = timedelta(seconds=10)
#: Patch id: a run whose end was stored but whose update/signal handlers outlived
#: `FINISH_GRACE` returns the stored end (a completed run used to turn into `storage_error`).
STORED_END_OUTLIVES_HANDLERS = "stored-end-outlives-handlers"


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
    bounded = workflow.patched(BOUNDED_FINISH)
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
) -> AgentRunResult:
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
    )


def _artifacts_of(output: AgentOutput | None) -> tuple[JsonValue, ...]:
    """The result's artifact list: the output's, when it was too big to travel inline."""
    if output is None or output.artifact is None:
        return ()
    return (output.artifact.model_dump(mode="json"),)
