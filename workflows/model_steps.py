"""The model call of a turn: one `call_model` activity, given what the session owes the model.

The activity resolves the run's compact ref, writes the pending entries and the events decided
in the workflow, calls the model (streaming, heartbeating) and returns the turn: its text or
tool calls, the calls that wait for a person, and its usage.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import JsonValue
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import (
        ACTIVITY_CALL_MODEL,
        ModelCallInput,
        ModelTurn,
        PendingEntry,
        RunInput,
        RunPlan,
        RunRef,
    )

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
) -> ModelTurn:
    """The turn's model call (an `ActivityError` when it failed for good or was cancelled).

    An attempt may last until the run's deadline (at least `MODEL_CALL_TIMEOUT`): a stream
    that keeps sending is healthy however long it runs (a long answer, a slow local model),
    and one that goes quiet is cut by the provider's read timeout (``other.timeout``) or, its
    worker gone, by the heartbeat timeout. A fixed 10 minutes cut such streams and began them
    again, five times."""
    remaining = deadline_at - workflow.now()
    turn: ModelTurn = await workflow.execute_activity(
        ACTIVITY_CALL_MODEL,
        ModelCallInput(
            ref=ref.key(),  # resolved by the worker (`otherone.activities.run_refs`)
            model_profile_id=plan.model_profile_id,
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
        ),
        result_type=ModelTurn,
        task_queue=plan.model_task_queue,  # None: this workflow's own queue
        start_to_close_timeout=max(MODEL_CALL_TIMEOUT, remaining),
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=MODEL_RETRY,
        cancellation_type=PAIRED_CANCELLATION,
        summary=f"model {plan.model_label} turn {iteration}",
    )
    return turn
