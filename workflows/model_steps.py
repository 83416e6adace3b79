"""The model call of a turn: one `call_model` activity, given what the session owes the model.

The activity resolves the run's compact ref, writes the pending entries and the events decided
in the workflow, calls the model (streaming, heartbeating) and returns the turn: its text or
tool calls, the calls that wait for a person, and its usage.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from pydantic import JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import (
        ACTIVITY_CALL_MODEL,
        ModelCallInput,
        ModelTurn,
        PendingEntry,
        PlannedModel,
        RunInput,
        RunPlan,
        RunRef,
    )
    from otherone.workflows.outcomes import shares_state

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.activity_options import (
    HEARTBEAT_TIMEOUT,
    MODEL_CALL_TIMEOUT,
    MODEL_RETRY,
    PAIRED_CANCELLATION,
)


async def call_model(
    run: RunInput,
    plan: RunPlan,
    ref: RunRef,
    iteration: int,
    pending: tuple[PendingEntry, ...],
    events: tuple[dict[str, JsonValue], ...],
    *,
    handoff_allowed: bool,
    deadline_at: datetime,
    waited_ms: int = 0,
    model: PlannedModel,
    attempt_offset: int = 0,
    fallback_from: str | None = None,
) -> ModelTurn:
    """The turn's model call (an `ActivityError` when it failed for good or was cancelled).

    An attempt may last until the run's deadline (at least `MODEL_CALL_TIMEOUT`): a stream
    that keeps sending is healthy however long it runs (a long answer, a slow local model),
    and one that goes quiet is cut by the provider's read timeout (``other.timeout``) or, its
    worker gone, by the heartbeat timeout. A fixed 10 minutes cut such streams and began them
    again, five times.

    ``model``: the profile to call, the run's own or one of its fallbacks (then
    ``fallback_from`` is the run's model, ``attempt_offset`` the attempts earlier profiles made
    of the turn: `otherone.workflows.model_fallbacks`)."""
    remaining = deadline_at - workflow.now()
    turn: ModelTurn = await workflow.execute_activity(
        ACTIVITY_CALL_MODEL,
        ModelCallInput(
            ref=ref.key(),  # resolved by the worker (`otherone.activities.run_refs`)
            model_profile_id=model.profile_id,
            turn=iteration,
            pending=pending,
            result_limit_bytes=plan.result_limit_bytes,
            result_contract=run.effective_result_contract,
            context_window=run.request.session.context_window,
            compaction_threshold=run.request.session.threshold_percentage,
            events=events,
            turn_offset=plan.turn_offset,
            handoff_allowed=handoff_allowed,
            waited_ms=waited_ms,
            attempt_offset=attempt_offset,
            fallback_from=fallback_from,
            # A front end's tools are the root's: children do not talk to it.
            client_tools=(run.request.client_tools or ()) if run.depth == 0 else (),
            shared_state=shares_state(run),
        ),
        result_type=ModelTurn,
        task_queue=plan.model_task_queue,  # None: this workflow's own queue
        start_to_close_timeout=max(MODEL_CALL_TIMEOUT, remaining),
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=model_retry(model.attempts),
        cancellation_type=PAIRED_CANCELLATION,
        summary=f"model {model.label} turn {iteration}"
        + (f" (fallback for {fallback_from})" if fallback_from else ""),
    )
    return turn


def model_retry(attempts: int | None) -> RetryPolicy:
    """`MODEL_RETRY`, with a profile's own `max_attempts` when it sets them."""
    if attempts is None:
        return MODEL_RETRY
    return dataclasses.replace(MODEL_RETRY, maximum_attempts=attempts)
