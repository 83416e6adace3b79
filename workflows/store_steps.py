"""The run's activities on its session in the store: `prepare_run` at its start, `hand_off`
between two agents, `finish_run` at its end.

prepare_run resolves the snapshot into the run's plan and takes the session lease; finish_run
flushes the pending entries, records the end and releases the lease. Both are quick store work,
run as local activities (no activity task round trip through the server). hand_off shapes
the session for the next agent (`otherone.workflows.handoffs`) and plans the run under it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeoutError  # (not the builtin)
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import (
        ACTIVITY_FINISH_RUN,
        ACTIVITY_HAND_OFF,
        ACTIVITY_PREPARE_RUN,
        PREPARE_DEADLINE_PASSED,
        RUN_ID_USED,
        STORE_ACTIVITY_TIMEOUT,
        STORE_HEARTBEAT_TIMEOUT,
        STORE_TOTAL_TIMEOUT,
        FinishRunInput,
        HandOffInput,
        HandOffResult,
        PrepareRunInput,
        RunInput,
        RunPlan,
        RunRef,
    )
    from otherone.errors import FailureCode
    from otherone.run_types import plain_decimal
    from otherone.runs import RunOutcome, RunRecord
    from otherone.workflows.outcomes import Ending, failure_from_activity_error

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.activity_options import (
    MODEL_CALL_TIMEOUT,
    MODEL_RETRY,
    STORE_RETRY,
    cancellation_swallowed,
    reraise_cancellation,
)


class RunIdUsedError(Exception):
    """The run's id belongs to a run that ended (`RUN_ID_USED`): this execution ends refused
    and writes nothing (`finishing.refused`)."""


async def prepare_run(input: RunInput, ref: RunRef) -> RunPlan | Ending:
    """The run's plan, or the ending of a run that could not be prepared (a cancelled prepare
    raises `CancelledError`: the run ends cancelled, not failed)."""
    # Wait for a cancelled prepare to stop before finishing (the run then ends `cancelled`):
    # finish_run releases the session lease, which a prepare still going on could otherwise
    # take after the release.
    cancellation = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
    bound, by_deadline = prepare_bound(input)
    try:
        plan: RunPlan = await _store_activity(
            ACTIVITY_PREPARE_RUN,
            PrepareRunInput(
                ref=ref,
                internal_session=input.internal_session,
                request=input.request,
                inherited_deadline=input.deadline,
                caller_model_profile_id=input.caller_model_profile_id,
                max_iterations=input.max_iterations,
                result_contract=input.effective_result_contract,
                give_up_at=workflow.now() + bound if by_deadline else None,
                execution_id=workflow.info().first_execution_run_id,
                forked_from=input.forked_from,
            ),
            result_type=RunPlan,
            cancellation_type=cancellation,
            summary=f"prepare {input.request.entry_agent}",
            total=bound,
        )
    except ActivityError as error:
        reraise_cancellation(error)  # `run` ends the run cancelled, not failed
        cause = error.cause
        if isinstance(cause, ApplicationError) and cause.type == RUN_ID_USED:
            raise RunIdUsedError(cause.message) from None
        if isinstance(cause, ApplicationError) and cause.type == PREPARE_DEADLINE_PASSED:
            return Ending.of(RunOutcome.TIMED_OUT)
        if by_deadline and (
            error.retry_state is RetryState.TIMEOUT or isinstance(error.cause, ActivityTimeoutError)
        ):
            return Ending.of(RunOutcome.TIMED_OUT)  # the run's deadline passed while preparing
        # Prepare is store work: running out of time is a storage error.
        return Ending.failed(failure_from_activity_error(error, default=FailureCode.STORAGE_ERROR))
    if cancellation_swallowed():
        # Prepare completed just as the run was cancelled, and handed its result back: the
        # run was cancelled all the same.
        raise asyncio.CancelledError()
    return plan


async def finish_run(finish: FinishRunInput, *, cancelled: bool) -> RunRecord | None:
    """Flush pending entries, release the session lease (only if this run holds it), and
    record the end; the run's record if a different end was stored before (that end is kept:
    `otherone.store.lifecycle.RunEnd`). Older workers' finish_run returns nothing (None)."""
    stored: RunRecord | None = await _store_activity(
        ACTIVITY_FINISH_RUN,
        finish,
        result_type=RunRecord | None,
        cancellation_type=ActivityCancellationType.TRY_CANCEL,
        summary=_finish_summary(finish),
        # A cancelled run waits for its finish only FINISH_GRACE, a server timer; a local
        # activity in progress holds the workflow task (and so that timer) open.
        may_be_local=not cancelled,
    )
    return stored


async def hand_off(handoff: HandOffInput) -> RunPlan | HandOffResult:
    """The plan of the run under the next agent (with the summary's usage when it is counted:
    `HandOffInput.with_usage`); an `ActivityError` when the handoff failed or was denied."""
    step = handoff.step
    done: RunPlan | HandOffResult = await workflow.execute_activity(
        ACTIVITY_HAND_OFF,
        handoff,
        result_type=HandOffResult if handoff.with_usage else RunPlan,
        start_to_close_timeout=MODEL_CALL_TIMEOUT,  # a summary is a model call
        heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
        retry_policy=MODEL_RETRY,
        summary=f"hand off {step.from_agent} → {step.to_agent} ({step.context})",
    )
    return done


#: The least a prepare is given even when the caller's deadline is (nearly) past: the child
#: still gets to store that it ran out of time.
MIN_PREPARE_TIME = timedelta(seconds=1)


def prepare_bound(input: RunInput) -> tuple[timedelta, bool]:
    """How long preparing may take, retries included, and whether that is the run's deadline
    (else the store's `STORE_TOTAL_TIMEOUT`): a prepare that keeps failing (a store refusing
    the session's writes) ends the run when the run would have ended anyway, not minutes
    later. The deadline known before the plan: a caller's (``input.deadline``), and the
    request's own ``root_timeout`` / ``run_timeout`` counted from the run's start (the
    runtime's limits are only in the snapshot that prepare reads: the plan applies them).
    Counting from the start, not from now, keeps a workflow task that runs again (a worker
    lost, a task timed out under load) from granting a fresh bound each time."""
    now = workflow.now()
    bounds = [(STORE_TOTAL_TIMEOUT, False)]
    if input.deadline is not None:
        bounds.append((max(input.deadline - now, MIN_PREPARE_TIME), True))
    limits = input.request.limits
    if limits is not None:
        elapsed = max(now - workflow.info().start_time, timedelta(0))
        timeouts = [limits.run_timeout, limits.root_timeout if input.depth == 0 else None]
        bounds += [
            (max(timeout - elapsed, MIN_PREPARE_TIME), True)
            for timeout in timeouts
            if timeout is not None
        ]
    return min(bounds, key=lambda bound: bound[0])


async def _store_activity(
    name: str,
    input: Any,
    *,
    result_type: Any,
    cancellation_type: ActivityCancellationType,
    summary: str,
    may_be_local: bool = True,
    total: timedelta = STORE_TOTAL_TIMEOUT,
) -> Any:
    """prepare_run / finish_run: a local activity (unless ``may_be_local`` is false), which
    saves the round trips of an activity task through the server; ``total`` bounds it,
    retries included."""
    if may_be_local:
        try:
            return await workflow.execute_local_activity(
                name,
                input,
                result_type=result_type,
                start_to_close_timeout=min(STORE_ACTIVITY_TIMEOUT, total),
                schedule_to_close_timeout=total,
                retry_policy=STORE_RETRY,
                cancellation_type=cancellation_type,
                summary=summary,
            )
        except ApplicationError as failure:
            # A local activity's own error arrives bare (a remote one's inside an ActivityError,
            # as do a local one's timeout and cancellation): wrap it so callers see one shape.
            raise _local_failure(name, RetryState.NON_RETRYABLE_FAILURE) from failure
        except ActivityTimeoutError as timeout:
            # Its timeout comes inside an ActivityError when it happens, but bare when replayed
            # from its marker: unwrapped, it failed the workflow on replay (nondeterminism).
            raise _local_failure(name, RetryState.TIMEOUT) from timeout
    return await workflow.execute_activity(
        name,
        input,
        result_type=result_type,
        start_to_close_timeout=min(STORE_ACTIVITY_TIMEOUT, total),
        schedule_to_close_timeout=total,
        heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
        retry_policy=STORE_RETRY,
        cancellation_type=cancellation_type,
        summary=summary,
    )


def _local_failure(name: str, retry_state: RetryState) -> ActivityError:
    """The `ActivityError` a normal activity's failure comes in (the caller chains the cause)."""
    return ActivityError(
        f"local activity {name} failed",
        scheduled_event_id=0,
        started_event_id=0,
        identity="",
        activity_type=name,
        activity_id="",
        retry_state=retry_state,
    )


def _finish_summary(finish: FinishRunInput) -> str:
    """What the Web UI shows of the run's end: its status, and its cost when priced."""
    cost = finish.usage.cost
    if cost is None:
        return f"finish {finish.status.value}"
    return f"finish {finish.status.value} · ${plain_decimal(cost)}"
