"""A model call's fleet permits (`otherone.store.capacity`), as the `call_model` activity takes
and gives them back.

Every model call needs a permit of ``model@QUEUE`` (the seed's runtime-wide
``max_concurrent_model_calls``, here every worker serving the queue) and of
``profile:ID`` (the profile's ``max_concurrent_calls``, ``requests_per_minute``,
``tokens_per_minute``, and any pause a provider's 429 asked for). A call refused returns a
`CapacityWait` to its workflow, where the run waits holding no worker slot; first, for up to
`WAIT_HERE`, it waits in its activity, where a permit released on the same worker reaches it
in milliseconds (through the workflow, a hand-over costs a workflow task: with a handful of
permits and a burst of runs, those round trips, not the provider, set the pace). A call
admitted holds its permits while it runs (their lease renewed), and gives them back when it
ends, waking the waiters next in line: in this process directly, elsewhere by their workflow's
signal (and a waiter still in its activity on another worker finds itself woken by looking).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.service import RPCError

from otherone.activities.shared import ActivityContext
from otherone.activities.store_calls import heartbeating
from otherone.config import RuntimeSnapshot
from otherone.contracts import SIGNAL_CAPACITY_FREED, CapacityWait, RunRef
from otherone.definitions import ModelProfile
from otherone.partition_limits import caps_of
from otherone.store import EntryRow
from otherone.store.capacity import PERMIT_LEASE, Admission, CapacityClaim, ScopeLimit, Woken
from otherone.store.records import EVENT_KEY, event_key

logger = logging.getLogger(__name__)

#: Characters per token when a call's tokens are estimated before it is made (conservative for
#: English prose and code; the call's real usage replaces the estimate when it ends).
CHARS_PER_TOKEN = 3
#: How long a refused call waits for its permit in its activity (holding its worker slot)
#: before it leaves the wait to its workflow (holding none).
WAIT_HERE = timedelta(seconds=10)
#: How often a call waiting in its activity looks whether a release elsewhere woke it.
WOKEN_POLL_SECONDS = 0.5
#: Refusals a release ends (the others end at a time: a window, a provider's pause).
RELEASED_BY_A_RELEASE = frozenset({"max_concurrent", "queued"})

#: The calls of this process waiting in their activity, by holder: a release here sets theirs.
_waiting_here: dict[str, asyncio.Event] = {}


def model_scope(task_queue: str) -> str:
    return f"model@{task_queue}"


def profile_scope(profile_id: str) -> str:
    return f"profile:{profile_id}"


def partition_scope(fleet_scope: str, partition_key: str) -> str:
    """One partition's share of a fleet scope (its cap, `otherone.partition_limits`)."""
    return f"{fleet_scope}/{partition_key}"


def model_claim(
    snapshot: RuntimeSnapshot,
    profile: ModelProfile,
    ref: RunRef,
    turn: int,
    rows: Sequence[EntryRow],
    *,
    model_task_queue: str | None = None,
    purpose: str = "",
) -> CapacityClaim:
    """What the turn's model call asks of the fleet's capacity (``model_task_queue``: the
    queue model calls run on, when this activity runs elsewhere; ``purpose``: a call of the
    turn other than its answer, e.g. a handoff's summary)."""
    info = activity.info()
    queue = model_task_queue or info.task_queue
    limits: tuple[ScopeLimit, ...] = (
        ScopeLimit(model_scope(queue), concurrent=snapshot.limits.max_concurrent_model_calls),
        ScopeLimit(
            profile_scope(profile.id),
            concurrent=profile.max_concurrent_calls,
            requests_per_minute=profile.requests_per_minute,
            tokens_per_minute=profile.tokens_per_minute,
        ),
    )
    caps = caps_of(snapshot.limits.partitions, ref.partition_key)
    if caps is not None and caps.max_concurrent_model_calls is not None:
        scope = partition_scope(model_scope(queue), ref.partition_key)
        limits += (ScopeLimit(scope, concurrent=caps.max_concurrent_model_calls),)
    return CapacityClaim(
        holder=f"{ref.run_id}:t{turn}{f':{purpose}' if purpose else ''}",
        partition_key=ref.partition_key,
        workflow_id=info.workflow_id or ref.run_id,
        limits=limits,
        tokens=_estimated_tokens(profile, rows) if profile.tokens_per_minute else 0,
    )


def tool_claim(snapshot: RuntimeSnapshot, ref: RunRef, call_id: str) -> CapacityClaim:
    """What a tool call asks of the fleet: a permit of ``tool@QUEUE`` (the seed's
    runtime-wide ``max_concurrent_tool_calls``, every worker of the queue)."""
    info = activity.info()
    fleet = f"tool@{info.task_queue}"
    limits: tuple[ScopeLimit, ...] = (
        ScopeLimit(fleet, concurrent=snapshot.limits.max_concurrent_tool_calls),
    )
    caps = caps_of(snapshot.limits.partitions, ref.partition_key)
    if caps is not None and caps.max_concurrent_tool_calls is not None:
        scope = partition_scope(fleet, ref.partition_key)
        limits += (ScopeLimit(scope, concurrent=caps.max_concurrent_tool_calls),)
    return CapacityClaim(
        holder=f"{ref.run_id}:{call_id}",
        partition_key=ref.partition_key,
        workflow_id=info.workflow_id or ref.run_id,
        limits=limits,
    )


def _estimated_tokens(profile: ModelProfile, rows: Sequence[EntryRow]) -> int:
    """The call's tokens before it is made: its context's characters, plus the most it may
    answer (the profile's ``max_tokens``)."""
    characters = sum(len(row.content or "") + len(json.dumps(row.tool_calls or [])) for row in rows)
    return characters // CHARS_PER_TOKEN + (profile.max_tokens or 0)


async def admit(
    context: ActivityContext, claim: CapacityClaim, refused: Callable[[CapacityWait], None]
) -> tuple[CapacityWait | None, int]:
    """Take the claim's permits, waiting up to `WAIT_HERE` for them here; (None, the
    milliseconds waited) once taken, else (how long the workflow should wait, the same).
    ``refused`` hears the first refusal (the caller's `model_waiting`/`tool_waiting` event)."""
    loop = asyncio.get_running_loop()
    woken = _waiting_here.setdefault(claim.holder, asyncio.Event())
    try:
        wait = await _admit_once(context, claim)
        if wait is None:
            return None, 0
        refused(wait)
        started = loop.time()
        async with heartbeating():
            while wait is not None:
                left = started + WAIT_HERE.total_seconds() - loop.time()
                if not await _waited_here(context, claim, wait, left, woken):
                    break
                wait = await _admit_once(context, claim)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await context.io_to_its_end(context.store.capacity.forget_waiter, claim)
        raise
    finally:
        _waiting_here.pop(claim.holder, None)
    return wait, max(1, int((loop.time() - started) * 1000))  # it waited: never "0 ms"


async def admit_here(context: ActivityContext, claim: CapacityClaim) -> None:
    """Take the claim's permits, waiting for them in this activity however long it takes: for
    a call that cannot go back to its workflow to wait (a handoff's summary, made inside the
    handoff's store activity)."""
    async with heartbeating():
        while True:
            wait, _ = await admit(context, claim, lambda wait: None)
            if wait is None:
                return
            await asyncio.sleep(min(wait.retry_in_ms / 1000, WAIT_HERE.total_seconds()))


async def _admit_once(context: ActivityContext, claim: CapacityClaim) -> CapacityWait | None:
    """One decision: the claim's permits taken (None), or how long to wait for them."""
    admission: Admission = await context.io(context.store.capacity.admit, claim, _now())
    _measure(admission)
    if admission.granted:
        return None
    assert admission.scope is not None and admission.reason is not None
    return CapacityWait(
        retry_in_ms=max(1, int(admission.retry_in / timedelta(milliseconds=1))),
        scope=admission.scope,
        reason=admission.reason,
    )


async def _waited_here(
    context: ActivityContext,
    claim: CapacityClaim,
    wait: CapacityWait,
    left: float,
    woken: asyncio.Event,
) -> bool:
    """Wait here for what ends ``wait`` (a release, or its time), if that fits in ``left``
    seconds; False when the workflow should wait instead."""
    if wait.reason not in RELEASED_BY_A_RELEASE:
        pause = wait.retry_in_ms / 1000
        if pause > left:
            return False
        await asyncio.sleep(pause)
        return True
    while left > 0:
        woken.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), min(WOKEN_POLL_SECONDS, left))
            return True
        if await context.io(context.store.capacity.is_woken, claim):
            return True
        left -= WOKEN_POLL_SECONDS
    return False


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


async def wake(context: ActivityContext, woken: Sequence[Woken]) -> None:
    """Tell waiters a permit may be theirs: a call waiting in its activity in this process
    directly, any other by its workflow's signal; a workflow that is gone loses its place."""
    if not woken:
        return
    client = activity.client()
    signalled: set[str] = set()
    for holder, workflow_id in woken:
        here = _waiting_here.get(holder)
        if here is not None:
            here.set()
            continue
        if workflow_id in signalled:
            continue
        signalled.add(workflow_id)
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
