"""Model fallbacks: which profile answers a turn its run's model could not.

A model profile may name ``fallbacks`` (`ModelProfile.fallbacks`); the run's plan carries them
in order (`RunPlan.fallbacks`). When the turn's model call fails for a reason its attempts did
not fix, the workflow — not a loop inside the activity — makes the same turn's call again on
the next profile, with the same context and tools. The decision is read from the activity's
typed failure, which is in the history, so a replay takes the same path:

    fall back                          (Temporal gave up: `RetryState.MAXIMUM_ATTEMPTS_REACHED`)
    ├── model_error, retryable         5xx/429/408/409, refused or dropped connections, provider
    │                                  timeouts, overloaded errors, malformed streams
    └── a start-to-close timeout       every attempt of the call ran out of time
    do not fall back                   (another provider would repeat them)
    ├── model_error, non-retryable     400 and other 4xx, a rejected key (401/403), a bad URL
    └── anything else                  budget, storage, a cancellation, a run already ended

Each turn starts again from the run's own model. The fallback's attempts are numbered after
the earlier profiles' in the turn's events (`model_started.attempt`), so its text supersedes
theirs and every attempt keeps one end.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

with workflow.unsafe.imports_passed_through():
    from pydantic import JsonValue

    from otherone.contracts import PlannedModel, RunPlan
    from otherone.errors import FailureCode

#: Attempts of a model call when its profile says none (`MODEL_RETRY`'s).
DEFAULT_MODEL_ATTEMPTS = 5
#: Longest text of the failed call's error a `model_fallback` event carries.
FALLBACK_ERROR_CHARS = 500


def model_chain(plan: RunPlan) -> tuple[PlannedModel, ...]:
    """The profiles that may answer a turn of the run: its model first, then its fallbacks."""
    own = PlannedModel(
        profile_id=plan.model_profile_id, label=plan.model_label, attempts=plan.model_attempts
    )
    return (own, *plan.fallbacks)


def falls_back(error: ActivityError) -> bool:
    """Whether the failed model call is one the next profile may answer (module docstring)."""
    if error.retry_state is not RetryState.MAXIMUM_ATTEMPTS_REACHED:
        return False
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return cause.type == FailureCode.MODEL_ERROR.value and not cause.non_retryable
    return isinstance(cause, TimeoutError) and cause.type is TimeoutType.START_TO_CLOSE


def attempts_of(model: PlannedModel) -> int:
    """Attempts a call on ``model`` made when Temporal gave up on it (all it was allowed)."""
    return model.attempts or DEFAULT_MODEL_ATTEMPTS


def fallback_event(
    turn: int, failed: PlannedModel, answering: PlannedModel, error: ActivityError
) -> dict[str, JsonValue]:
    """`model_fallback`: the turn's call on ``failed`` gave up, ``answering`` takes it."""
    cause = error.cause
    message = cause.message if isinstance(cause, ApplicationError) else str(cause or error)
    return {
        "type": "model_fallback",
        "turn": turn,
        "from_model": failed.profile_id,
        "to_model": answering.profile_id,
        "attempts": attempts_of(failed),
        "error": message[:FALLBACK_ERROR_CHARS],
    }
