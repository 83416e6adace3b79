"""The partition's spend around a model call: its daily limit checked before the call (the run
ends `budget_exceeded` naming the limit), the call's usage added after it
(`otherone.store.spending`)."""

from __future__ import annotations

from decimal import Decimal

from otherone.activities.compact_context import Summary
from otherone.activities.shared import ActivityContext, failure
from otherone.contracts import ModelTurn, RunRef
from otherone.errors import FailureCode
from otherone.store.spending import CallSpend


async def check_spend_limit(context: ActivityContext, partition_key: str) -> None:
    """Refuse the run's next step when its partition has spent its limit for the day: a
    `budget_exceeded` failure, not retried (the workflow ends the run with it)."""
    reached = await context.io(context.store.spending.limit_reached, partition_key)
    if reached is not None:
        raise failure(FailureCode.BUDGET_EXCEEDED, reached.message)


def turn_spend(
    ref: RunRef,
    turn: ModelTurn,
    profile_id: str,
    summary: Summary | None,
    summary_profile_id: str,
) -> list[CallSpend]:
    """The model call's usage, and its context summary's (if it made one), as added to the
    partition's spend with the stored answer."""
    spent = [
        CallSpend(
            partition_key=ref.partition_key,
            agent_id=ref.agent_id,
            model_profile_id=profile_id,
            input_tokens=turn.input_tokens or 0,
            output_tokens=turn.output_tokens or 0,
            cache_read_tokens=turn.cache_read_tokens or 0,
            cache_write_tokens=turn.cache_write_tokens or 0,
            cost=turn.cost or Decimal(0),
            unpriced_calls=1 if turn.cost is None else 0,
        )
    ]
    if summary is not None:
        spent.append(
            CallSpend(
                partition_key=ref.partition_key,
                agent_id=ref.agent_id,
                model_profile_id=summary_profile_id,
                calls=summary.calls,
                input_tokens=summary.input_tokens or 0,
                output_tokens=summary.output_tokens or 0,
                cost=summary.cost or Decimal(0),
                unpriced_calls=summary.calls if summary.cost is None else 0,
            )
        )
    return spent
