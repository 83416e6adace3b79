"""Event retention: a worker deletes the events of run trees that have been quiet for long.

Events are for watching runs (results come from Temporal), so they need not live forever; whole
quiet trees are pruned (`Store.prune_events`), never part of a live one, so a consumer's cursor
stays valid while a tree is active.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from otherone.store import Store

log = logging.getLogger(__name__)

#: How often a worker prunes (every worker may; deleting is idempotent).
PRUNE_EVERY = timedelta(hours=1)


async def prune_once(store: Store, retention: timedelta) -> int:
    """Delete events of trees quiet for longer than ``retention``; the number deleted."""
    cutoff = datetime.now(UTC) - retention
    deleted = await asyncio.to_thread(store.prune_events, cutoff)
    if deleted:
        log.info("pruned %d events of run trees quiet since %s", deleted, cutoff.isoformat())
    return deleted


async def prune_events_periodically(
    store: Store, retention: timedelta, every: timedelta = PRUNE_EVERY
) -> None:
    """Prune now and then every ``every`` until cancelled; a failed round is logged, not fatal."""
    while True:
        try:
            await prune_once(store, retention)
        except Exception as error:  # the database may be down for a while: try next round
            log.warning("event pruning failed: %s", error)
        await asyncio.sleep(every.total_seconds())
