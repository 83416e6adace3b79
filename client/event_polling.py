"""How a client follows a run's events: it polls the store, fast while the run is at work,
slower when it is quiet, until the run's terminal event (or, without one, until Temporal says
the run is no longer running).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from otherone.contracts import EventRecord
    from otherone.store import Store

_TERMINAL_EVENTS = {"run_completed", "run_failed", "run_cancelled"}
#: `AgentClient.events` polls fast this long after the last events: a run at work (its next
#: model call's first delta, which someone is waiting for, usually comes within seconds).
BUSY_SECONDS = 3.0
#: Quiet polls between two questions to Temporal whether the run still runs.
_POLLS_PER_LIVENESS_CHECK = 40


async def poll_events(
    store: Store,
    run_id: str,
    *,
    partition_key: str | None,
    after: int,
    is_running: Callable[[str], Awaitable[bool]],
    poll_seconds: float,
    busy_poll_seconds: float,
) -> AsyncGenerator[EventRecord, None]:
    """Events of the run's tree after ``after``, until the run has ended (see
    `AgentClient.events`)."""
    cursor, quiet_polls = after, 0
    last_seen = time.monotonic()
    while True:
        batch = await asyncio.to_thread(
            store.read_events, run_id, after=cursor, partition_key=partition_key
        )
        for event in batch:
            cursor = event.sequence
            yield event
            if event.run_id == run_id and event.event.get("type") in _TERMINAL_EVENTS:
                return
        quiet_polls = 0 if batch else quiet_polls + 1
        if batch:
            last_seen = time.monotonic()
        if (
            quiet_polls
            and quiet_polls % _POLLS_PER_LIVENESS_CHECK == 0
            and not await is_running(run_id)
        ):
            return  # ended without a terminal event (e.g. terminated from the UI)
        if not batch:
            busy = time.monotonic() - last_seen < BUSY_SECONDS
            await asyncio.sleep(min(busy_poll_seconds, poll_seconds) if busy else poll_seconds)
