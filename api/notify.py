"""Wake the event streams of a tree as soon as its events change.

One `EventNotifier` per server process; every SSE stream subscribes to its root run id and
sleeps until woken, then reads the store. What wakes it depends on the database:

- PostgreSQL: `Store.append_events` runs ``pg_notify('otherone_events', <root run id>)`` in the
  appending transaction, so a notification arrives right after the rows are committed; one
  ``LISTEN`` connection serves every stream (`PostgresListener`).
- SQLite (one file, no server to push): one task polls the newest sequence of each followed
  tree every `SQLITE_POLL_SECONDS` in a single query (`SequencePoller`), so the cost does not
  grow with the number of clients, only with the number of trees followed.

While the listener has no connection (a restart, or a pooler that refuses LISTEN) it polls like
SQLite; streams also re-read on their own every few seconds, so a lost notification delays an
event, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import psycopg
from sqlalchemy import func, select

from otherone.store import Store
from otherone.store.events import EVENT_CHANNEL
from otherone.store.schema import events

__all__ = ["SQLITE_POLL_SECONDS", "EventNotifier", "PostgresListener", "SequencePoller"]

#: How often the SQLite poller looks for new events of the followed trees.
SQLITE_POLL_SECONDS = 0.02
#: Wait before the PostgreSQL listener connects again after losing its connection.
RECONNECT_SECONDS = 1.0

_log = logging.getLogger("otherone.api")


class EventNotifier:
    """Streams wait on an `asyncio.Event` per subscription; a source sets them."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        #: Notifications per tree so far: a read started at version v has seen every event
        #: whose notification came before it (`otherone.api.streams.TreeReader`).
        self._versions: dict[str, int] = {}

    @contextlib.contextmanager
    def subscribe(self, root_run_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever ``root_run_id``'s tree may have new events (clear it before
        reading the store, so a notification during the read is not lost)."""
        woken = asyncio.Event()
        self._waiters.setdefault(root_run_id, set()).add(woken)
        try:
            yield woken
        finally:
            waiting = self._waiters.get(root_run_id)
            if waiting is not None:
                waiting.discard(woken)
                if not waiting:
                    del self._waiters[root_run_id]
                    self._versions.pop(root_run_id, None)

    def followed(self) -> list[str]:
        return list(self._waiters)

    def version(self, root_run_id: str) -> int:
        return self._versions.get(root_run_id, 0)

    def notify(self, root_run_id: str) -> None:
        waiting = self._waiters.get(root_run_id)
        if not waiting:
            return
        self._versions[root_run_id] = self.version(root_run_id) + 1
        for woken in waiting:
            woken.set()

    def notify_all(self) -> None:
        for root_run_id in self.followed():
            self.notify(root_run_id)


class SequencePoller:
    """Wakes the streams of trees whose newest event sequence changed (any backend)."""

    def __init__(
        self, store: Store, notifier: EventNotifier, interval: float = SQLITE_POLL_SECONDS
    ) -> None:
        self.store = store
        self.notifier = notifier
        self.interval = interval
        self._seen: dict[str, int] = {}
        self._failing = False  # the last poll failed (logged once an outage)

    async def run(self) -> None:
        while True:
            await self.poll_once()
            await asyncio.sleep(self.interval)

    async def poll_for(self, seconds: float) -> None:
        """Poll for ``seconds`` (the PostgreSQL listener's stand-in while it reconnects)."""
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            await self.poll_once()
            await asyncio.sleep(self.interval)

    async def poll_once(self) -> None:
        roots = self.notifier.followed()
        if not roots:
            return
        try:
            newest = await asyncio.to_thread(self._newest, roots)
        except Exception as error:  # the streams re-read on their own meanwhile
            # Once per outage, not on every poll (several a second: a user saw a flood).
            if not self._failing:
                _log.warning("event poll failed (said once until it works again): %s", error)
            self._failing = True
            return
        if self._failing:
            _log.info("event poll works again")
        self._failing = False
        for root in roots:
            sequence = newest.get(root, 0)
            if self._seen.get(root) != sequence:
                self._seen[root] = sequence
                self.notifier.notify(root)
        self._seen = {root: self._seen[root] for root in roots if root in self._seen}

    def _newest(self, roots: list[str]) -> dict[str, int]:
        query = (
            select(events.c.root_run_id, func.max(events.c.sequence))
            .where(events.c.root_run_id.in_(roots))
            .group_by(events.c.root_run_id)
        )
        with self.store.engine.connect() as conn:
            return {root: int(sequence) for root, sequence in conn.execute(query)}


class PostgresListener:
    """``LISTEN otherone_events`` on one connection; each notification names a root run."""

    def __init__(self, store: Store, notifier: EventNotifier) -> None:
        self.conninfo = store.engine.url.set(drivername="postgresql").render_as_string(
            hide_password=False
        )
        self.notifier = notifier
        self.connected = asyncio.Event()
        #: Stands in while there is no LISTEN connection (e.g. behind a pooler that refuses it).
        self.poller = SequencePoller(store, notifier)

    async def run(self) -> None:
        while True:
            try:
                await self._listen()
            except (psycopg.Error, OSError) as error:
                _log.warning(
                    "event listener has no connection (%s); polling meanwhile, reconnecting", error
                )
            self.connected.clear()
            await self.poller.poll_for(RECONNECT_SECONDS)

    async def _listen(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
            await conn.execute(f"LISTEN {EVENT_CHANNEL}")
            self.connected.set()
            self.notifier.notify_all()  # anything appended while we were not listening
            async for notification in conn.notifies():
                self.notifier.notify(notification.payload)


def notification_source(store: Store, notifier: EventNotifier) -> SequencePoller | PostgresListener:
    """PostgreSQL pushes; everything else is polled."""
    if store.engine.dialect.name == "postgresql":
        return PostgresListener(store, notifier)
    return SequencePoller(store, notifier)
