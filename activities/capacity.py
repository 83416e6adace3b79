"""A model call's fleet permits (`otherone.store.capacity`), as the `call_model` activity takes
and gives them back.

Every model call needs a permit of ``model@QUEUE`` (the seed's runtime-wide
``max_concurrent_model_calls``, here every worker serving the queue) and of
``profile:ID`` (the profile's ``max_concurrent_calls``, ``requests_per_minute``,
``tokens_per_minute``, and any pause a provider's 429 asked for). A call refused returns a
`CapacityWait` to its workflow at once: the run waits there, holding no worker slot. A call
admitted holds its permits while it runs (their lease renewed), and gives them back when it
ends, waking the workflows of the waiters next in line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.service import RPCError

from otherone.activities.shared import ActivityContext
from otherone.config import RuntimeSnapshot
from otherone.contracts import SIGNAL_CAPACITY_FREED, CapacityWait, RunRef
from otherone.definitions import ModelProfile
from otherone.store import EntryRow
from otherone.store.capacity import PERMIT_LEASE, Admission, CapacityClaim, ScopeLimit
from otherone.store.records import EVENT_KEY, event_key

logger = logging.getLogger(__name__)

#: Characters per token when a call's tokens are estimated before it is made (conservative for
#: English prose and code; the call's real usage replaces the estimate when it ends).
CHARS_PER_TOKEN = 3


def model_scope(task_queue: str) -> str:
    return f"model@{task_queue}"


def profile_scope(profile_id: str) -> str:
    return f"profile:{profile_id}"


def model_claim(
    snapshot: RuntimeSnapshot,
    profile: ModelProfile,
    ref: RunRef,
    turn: int,
    rows: Sequence[EntryRow],
) -> CapacityClaim:
    """What the turn's model call asks of the fleet's capacity."""
    info = activity.info()
    limits = (
        ScopeLimit(
            model_scope(info.task_queue), concurrent=snapshot.limits.max_concurrent_model_calls
        ),
        ScopeLimit(
            profile_scope(profile.id),
            concurrent=profile.max_concurrent_calls,
            requests_per_minute=profile.requests_per_minute,
            tokens_per_minute=profile.tokens_per_minute,
        ),
    )
    return CapacityClaim(
        holder=f"{ref.run_id}:t{turn}",
        partition_key=ref.partition_key,
        workflow_id=info.workflow_id or ref.run_id,
        limits=limits,
        tokens=_estimated_tokens(profile, rows) if profile.tokens_per_minute else 0,
    )


def tool_claim(snapshot: RuntimeSnapshot, ref: RunRef, call_id: str) -> CapacityClaim:
    """What a tool call asks of the fleet: a permit of ``tool@QUEUE`` (the seed's
    runtime-wide ``max_concurrent_tool_calls``, every worker of the queue)."""
    info = activity.info()
    scope = ScopeLimit(
        f"tool@{info.task_queue}", concurrent=snapshot.limits.max_concurrent_tool_calls
    )
    return CapacityClaim(
        holder=f"{ref.run_id}:{call_id}",
        partition_key=ref.partition_key,
        workflow_id=info.workflow_id or ref.run_id,
        limits=(scope,),
    )


def _estimated_tokens(profile: ModelProfile, rows: Sequence[EntryRow]) -> int:
    """The call's tokens before it is made: its context's characters, plus the most it may
    answer (the profile's ``max_tokens``)."""
    characters = sum(len(row.content or "") + len(json.dumps(row.tool_calls or [])) for row in rows)
    return characters // CHARS_PER_TOKEN + (profile.max_tokens or 0)


async def admit(context: ActivityContext, claim: CapacityClaim) -> CapacityWait | None:
    """Take the claim's permits (None), or say how long to wait for them."""
    admission: Admission = await context.io(context.store.capacity.admit, claim, _now())
    _measure(admission)
    await wake(context, admission.wake)
    if admission.granted:
        return None
    assert admission.scope is not None and admission.reason is not None
    return CapacityWait(
        retry_in_ms=max(1, int(admission.retry_in / timedelta(milliseconds=1))),
        scope=admission.scope,
        reason=admission.reason,
    )


@contextlib.asynccontextmanager
async def holding(context: ActivityContext, claim: CapacityClaim) -> AsyncIterator[list[int]]:
    """While the block runs, keep the claim's permits (renewing their lease); then give them
    back with the tokens the call used (the block appends them to the list it gets)."""
    used: list[int] = []
    renewing = asyncio.ensure_future(_renew(context, claim))
    try:
        yield used
    finally:
        renewing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewing
        await _release(context, claim, sum(used) if used else None)


async def _renew(context: ActivityContext, claim: CapacityClaim) -> None:
    scopes = [limit.scope for limit in claim.limits]
    while True:
        await asyncio.sleep(PERMIT_LEASE.total_seconds() / 3)
        try:
            await context.io(context.store.capacity.renew, claim.holder, scopes, _now())
        except Exception as error:  # a lease not renewed only ends sooner: never the call
            logger.warning("could not renew the permits of %s: %s", claim.holder, error)


async def _release(context: ActivityContext, claim: CapacityClaim, tokens: int | None) -> None:
    """Give the permits back even when the call was cancelled (else they would stay taken
    until their lease ran out); a store that cannot be reached leaves that to the lease."""
    try:
        woken = await context.io_to_its_end(
            context.store.capacity.release, claim, _now(), tokens=tokens
        )
    except Exception as error:
        logger.warning("could not give back the permits of %s: %s", claim.holder, error)
        return
    await wake(context, woken)


async def pause(context: ActivityContext, profile_id: str, seconds: float) -> None:
    """A provider asked to slow down (429 with Retry-After): every worker's calls to the
    profile wait that long, not only this one's retry."""
    until = _now() + timedelta(seconds=seconds)
    activity.metric_meter().create_counter(
        "otherone_provider_pauses", "Provider answers asking the fleet to slow down (Retry-After)"
    ).add(1, {"profile": profile_id})
    try:
        await context.io(context.store.capacity.pause, profile_scope(profile_id), until)
    except Exception as error:
        logger.warning("could not pause profile %s for the fleet: %s", profile_id, error)


async def wake(context: ActivityContext, workflow_ids: Sequence[str]) -> None:
    """Tell waiting runs a permit may be theirs; one that is gone loses its place."""
    if not workflow_ids:
        return
    client = activity.client()
    for workflow_id in workflow_ids:
        try:
            await client.get_workflow_handle(workflow_id).signal(SIGNAL_CAPACITY_FREED)
        except RPCError:  # ended or gone: it will not come back for its permit
            with contextlib.suppress(Exception):
                await context.io(context.store.capacity.forget_workflow, workflow_id)


def waiting_event(ref: RunRef, turn: int, wait: CapacityWait) -> dict[str, Any]:
    """`model_waiting`: once per turn (keyed), the first time its call is refused."""
    return {
        "type": "model_waiting",
        "turn": turn,
        "scope": wait.scope,
        "reason": wait.reason,
        "retry_in_ms": wait.retry_in_ms,
        EVENT_KEY: event_key(ref.run_id, f"t{turn}", "waiting"),
    }


def tool_waiting_event(ref: RunRef, call_id: str, name: str, wait: CapacityWait) -> dict[str, Any]:
    """`tool_waiting`: once per call (keyed), the first time it is refused a permit."""
    return {
        "type": "tool_waiting",
        "tool_call_id": call_id,
        "tool_name": name,
        "scope": wait.scope,
        "reason": wait.reason,
        "retry_in_ms": wait.retry_in_ms,
        EVENT_KEY: event_key(ref.run_id, call_id, "waiting"),
    }


def _measure(admission: Admission) -> None:
    """Prometheus (with ``OTHERONE_METRICS_PORT``, through Temporal's runtime): each scope's
    calls in flight and waiting as this decision saw them, and refusals by reason."""
    meter = activity.metric_meter()
    in_flight = meter.create_gauge(
        "otherone_capacity_in_flight", "Calls holding a fleet permit of the scope"
    )
    waiting = meter.create_gauge(
        "otherone_capacity_waiting", "Calls waiting for a fleet permit of the scope"
    )
    for scope, held, queued in admission.counts:
        in_flight.set(held, {"scope": scope})
        waiting.set(queued, {"scope": scope})
    if not admission.granted:
        refused = meter.create_counter(
            "otherone_capacity_refusals", "Calls refused a fleet permit for now"
        )
        refused.add(1, {"scope": admission.scope or "", "reason": admission.reason or ""})


def _now() -> datetime:
    return datetime.now(UTC)
