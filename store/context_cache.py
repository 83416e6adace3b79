"""A worker's cache of session contexts (the entries after a session's latest compaction), so
that a turn reads only the entries written since the session was last read instead of all of
them (`Store.turn_context`).

Nothing here trusts the cache: whatever else writes the database (another worker running the
session's next run, a zombie activity attempt, someone deleting entries), each read checks the
cached part against the database in the same transaction and reloads on any difference:

- entries are never updated, only inserted (``ON CONFLICT DO NOTHING``) or, outside our code,
  deleted; so the count, sum and maximum of the ids after the cut tell whether the database
  holds exactly the cached ids plus the new ones. That also catches a row that became visible
  below the newest cached id (PostgreSQL: a transaction that took its id earlier but committed
  later);
- SQLite reuses the highest ids after they are deleted; a reused id lies at or below the newest
  cached one only if that one was deleted too, so the newest cached entry's ``created_at`` is
  compared as well;
- a new compaction moves the cut: cached entries up to it are dropped (a cut that moved back
  reloads).

Entries are shared between the cache and its readers: `EntryRow` is frozen, and the lists and
dicts it holds must not be changed by whoever reads them (context building and providers copy
what they change). Memory is bounded by sessions and by an estimate of their bytes (least
recently used first out).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from otherone.store.records import EntryRow

#: Sessions a worker keeps at most (a worker may run ~1,000 runs at once, each in its session).
DEFAULT_MAX_SESSIONS = 2048
#: Estimated bytes of cached entries a worker keeps at most.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
#: Python objects of one cached entry beyond its text: the row, its strings, its small dicts
#: (measured with tracemalloc: ~1.2-1.4 KB for a tool call or a short tool result).
ROW_OVERHEAD_BYTES = 1200


def row_bytes(row: EntryRow) -> int:
    """Estimated memory of a cached entry (``tokens`` estimate the text and tool calls)."""
    size = ROW_OVERHEAD_BYTES + len(row.content) + 4 * (row.tokens or 0)
    if row.meta:  # reasoning blocks: not counted in ``tokens``, and may be large
        size += len(json.dumps(row.meta))
    return size


@dataclass(frozen=True)
class SessionContext:
    """The entries of a session with ids in (``cut``, ``seen``], in id order, as last read.

    ``marker``: the newest entry's ``created_at`` as read (None without entries), ``id_sum``
    the sum of the ids, ``size`` the estimated bytes.
    """

    cut: int
    seen: int
    rows: tuple[EntryRow, ...]
    marker: Any
    id_sum: int
    size: int

    @classmethod
    def of(
        cls, cut: int, rows: Sequence[EntryRow], marker: Any, *, seen: int = 0
    ) -> SessionContext:
        """``rows``: all the entries after ``cut`` up to ``seen`` (or the newest of them)."""
        newest = (rows[-1].id or 0) if rows else 0
        return cls(
            cut=cut,
            seen=max(cut, seen, newest),
            rows=tuple(rows),
            marker=marker if rows else None,
            id_sum=sum(row.id or 0 for row in rows),
            size=sum(row_bytes(row) for row in rows),
        )

    def trimmed(self, cut: int) -> SessionContext | None:
        """This context after a compaction up to ``cut`` (None: it cannot tell, reload)."""
        if cut < self.cut:
            return None
        if cut == self.cut:
            return self
        # The newest entry (whose ``created_at`` is the marker) goes last, if at all.
        rows = [row for row in self.rows if (row.id or 0) > cut]
        return SessionContext.of(cut, rows, self.marker, seen=self.seen)

    def extended(self, rows: Sequence[EntryRow], marker: Any) -> SessionContext:
        """This context with ``rows`` (entries after ``seen``, read now) appended."""
        if not rows:
            return self
        return SessionContext(
            cut=self.cut,
            seen=rows[-1].id or self.seen,
            rows=self.rows + tuple(rows),
            marker=marker,
            id_sum=self.id_sum + sum(row.id or 0 for row in rows),
            size=self.size + sum(row_bytes(row) for row in rows),
        )

    def fingerprint(self, marker: Any) -> tuple[int, int, int, Any]:
        """What the database must report for this context's ids (`Store.turn_context`): count,
        sum and max of the ids after ``cut``, and ``marker`` (the ``created_at`` of the entry
        that was newest before this read's new ones)."""
        newest = (self.rows[-1].id or 0) if self.rows else 0
        return (len(self.rows), self.id_sum, newest, marker)


class ContextCache:
    """Session contexts by (partition, session), least recently used evicted first.

    Thread-safe: store calls run in worker threads. Two reads of one session racing may store
    an older context last; the next read's check finds that out and reloads.
    """

    def __init__(
        self, max_sessions: int = DEFAULT_MAX_SESSIONS, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._contexts: OrderedDict[tuple[str, str], SessionContext] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> SessionContext | None:
        with self._lock:
            context = self._contexts.get(key)
            if context is not None:
                self._contexts.move_to_end(key)
            return context

    def holds(self, key: tuple[str, str]) -> bool:
        """Whether a context of the session is cached (as last read or written by this
        process): its next read is then of the newer entries only. (Not counted as a use.)"""
        with self._lock:
            return key in self._contexts

    def put(self, key: tuple[str, str], context: SessionContext) -> None:
        with self._lock:
            self._discard(key)
            if context.size > self.max_bytes or self.max_sessions <= 0:
                return  # larger than the whole cache: read it every time
            self._contexts[key] = context
            self._bytes += context.size
            while len(self._contexts) > self.max_sessions or self._bytes > self.max_bytes:
                _, evicted = self._contexts.popitem(last=False)
                self._bytes -= evicted.size

    def discard(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._discard(key)

    def _discard(self, key: tuple[str, str]) -> None:
        old = self._contexts.pop(key, None)
        if old is not None:
            self._bytes -= old.size

    def __len__(self) -> int:
        return len(self._contexts)

    @property
    def bytes(self) -> int:
        """Estimated bytes of the cached entries."""
        return self._bytes
