"""What every part of the store shares: the engine, the prepared statements and the few
helpers more than one part's transactions use (`otherone.store.database.Store` puts the parts
together)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from functools import cached_property
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError

from otherone.contracts import RunRef
from otherone.store.context_cache import ContextCache
from otherone.store.engine import is_sqlite_busy, sqlite_held_engine, sqlite_no_wait_engine
from otherone.store.errors import DatabaseLocked
from otherone.store.events import in_event_transaction, insert_events
from otherone.store.lifecycle import LifecycleStatements
from otherone.store.records import EntryRow
from otherone.store.rows import entry_values
from otherone.store.spending import SpendStore
from otherone.store.statements import TurnStatements
from otherone.store.webhook_secrets import WebhookSecrets

Insert = postgresql.Insert | sqlite.Insert
_T = TypeVar("_T")

logger = logging.getLogger(__name__)

#: Calls without waiting between two WAL checkpoints (their connection makes none itself; a
#: call writes a few pages, SQLite's own checkpoints come every 1,000).
CHECKPOINT_EVERY_CALLS = 100


class _Transaction:
    """``with``: `Connection.begin` on a connection, giving the connection (`Engine.begin` does
    so for a connection it checks out)."""

    __slots__ = ("_conn", "_transaction")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def __enter__(self) -> Connection:
        self._transaction = self._conn.begin()
        return self._conn

    def __exit__(self, *exc_info: Any) -> None:
        self._transaction.__exit__(*exc_info)


class StoreBase:
    """The engine and the statements; helpers of the parts' transactions."""

    def __init__(self, engine: Engine, *, contexts: ContextCache | None = None) -> None:
        self._engine = engine
        #: Sessions' entries as this process last read them (`turn_context`).
        self.contexts = ContextCache() if contexts is None else contexts
        #: Set on a thread while `call_without_waiting` runs a call there.
        self._no_wait = threading.local()
        self._calls_since_checkpoint = 0
        self._checkpoint: Future[None] | None = None
        #: The connections threads keep for their transactions (`_transaction`), to close.
        self._held: list[Connection] = []
        self._held_lock = threading.Lock()
        self._held_closed = False

    @property
    def engine(self) -> Engine:
        """The engine the store's statements run on: the store's own (pooled; a lock another
        connection holds is waited for), or within `call_without_waiting` the calling
        thread's connection that never waits."""
        if getattr(self._no_wait, "active", False):
            return self._no_wait_engine
        return self._engine

    @property
    def calls_without_waiting(self) -> bool:
        """Whether `call_without_waiting` can be used: on SQLite (a local file: a call is a
        fraction of a millisecond of work), not on PostgreSQL (every call a network round trip,
        made in a thread)."""
        return self._engine.dialect.name == "sqlite"

    def call_without_waiting(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``function(*args, **kwargs)`` on the calling thread (an event loop's: no hop to a
        thread), the store's statements it makes on a connection that never waits for a lock
        (`sqlite_no_wait_engine`). Raises `DatabaseLocked` when another connection holds a
        lock the call needs: its transaction was rolled back, nothing was written, and the
        same call can be made again where waiting is fine (in a thread, on `engine`).

        Only for SQLite (`calls_without_waiting`), and for calls with bounded work: the calling
        thread runs all of it."""
        if not self.calls_without_waiting:
            raise ValueError("calls without waiting are for SQLite stores")
        outer = getattr(self._no_wait, "active", False)  # a nested call leaves it as it was
        self._no_wait.active = True
        try:
            return function(*args, **kwargs)
        except DBAPIError as error:
            if is_sqlite_busy(error):
                raise DatabaseLocked from None
            raise
        finally:
            self._no_wait.active = outer
            self._checkpoint_now_and_then()

    @cached_property
    def _no_wait_engine(self) -> Engine:
        return sqlite_no_wait_engine(self._engine.url)

    def _transaction(self) -> AbstractContextManager[Connection]:
        """A transaction on `engine` (committed when the block ends, rolled back if it raises).
        Within `call_without_waiting` it runs on a connection the calling thread keeps
        (`sqlite_held_engine`), not one checked out of a pool for it. Not nested."""
        if not getattr(self._no_wait, "active", False) or self._held_closed:
            return self.engine.begin()
        conn: Connection | None = getattr(self._no_wait, "held", None)
        if conn is None or conn.invalidated:  # (invalidated: a lost file, see `prepared.run`)
            conn = self._hold_connection()
        return _Transaction(conn)

    def _hold_connection(self) -> Connection:
        """A new connection for the calling thread to keep; closed with the store."""
        stale: Connection | None = getattr(self._no_wait, "held", None)
        conn = self._held_engine.connect()
        with self._held_lock:
            if stale is not None:
                self._held.remove(stale)
                stale.close()
            self._held.append(conn)
        self._no_wait.held = conn
        return conn

    @cached_property
    def _held_engine(self) -> Engine:
        return sqlite_held_engine(self._engine.url)

    @cached_property
    def _checkpointer(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="otherone-wal-checkpoint")

    def _checkpoint_now_and_then(self) -> None:
        """Every `CHECKPOINT_EVERY_CALLS` calls without waiting, a passive WAL checkpoint in a
        thread of its own: copying the WAL into the database file (and syncing it) can take
        milliseconds, too long for an event loop; without checkpoints the WAL would grow."""
        self._calls_since_checkpoint += 1
        if self._calls_since_checkpoint < CHECKPOINT_EVERY_CALLS:
            return
        if self._checkpoint is not None and not self._checkpoint.done():
            return  # the last one is still copying: the next call asks again
        self._calls_since_checkpoint = 0
        # RuntimeError: the store is closing (its last connection's close checkpoints).
        with contextlib.suppress(RuntimeError):
            self._checkpoint = self._checkpointer.submit(self._checkpoint_wal)

    def _checkpoint_wal(self) -> None:
        # PASSIVE: copies what no reader still needs, never waits for readers or writers.
        try:
            with self._engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
        except Exception as error:  # the next one tries again; SQLite's own ones still run
            logger.warning("WAL checkpoint failed: %s", type(error).__name__)

    def _close_no_wait(self) -> None:
        """Stop checkpointing (after the one under way) and close the connections that never
        wait, if any were made."""
        if "_checkpointer" in self.__dict__:
            self._checkpointer.shutdown(wait=True)
        with self._held_lock:
            self._held_closed = True  # a later call takes a pooled connection, as before
            for conn in self._held:
                conn.close()
            self._held.clear()
        if "_no_wait_engine" in self.__dict__:
            self._no_wait_engine.dispose()

    @cached_property
    def _turn(self) -> TurnStatements:
        """A turn's statements, prepared on first use (`otherone.store.statements`)."""
        return TurnStatements(self.engine.dialect)

    @cached_property
    def spending(self) -> SpendStore:
        """What partitions spent on model calls, and their limits (`otherone.store.spending`)."""
        return SpendStore(self._engine)

    @cached_property
    def webhook_secrets(self) -> WebhookSecrets:
        """Each partition's webhook signing secret (`otherone.store.webhook_secrets`)."""
        return WebhookSecrets(self._engine)

    @cached_property
    def _lifecycle(self) -> LifecycleStatements:
        """A run's lease and record statements, prepared on first use."""
        return LifecycleStatements(self.engine.dialect)

    def _insert(self, table: Table) -> Insert:
        """INSERT with the backend's ``ON CONFLICT`` support (SQLite and PostgreSQL share it)."""
        if self.engine.dialect.name == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    def _inserted_keys(
        self, conn: Connection, partition_key: str, session_id: str, rows: Iterable[EntryRow]
    ) -> set[str]:
        """Insert ``rows`` (keys already there are skipped); the keys inserted now."""
        insert = self._turn.insert_entry
        return {
            row.entry_key
            for row in rows
            if insert.rows(conn, entry_values(partition_key, session_id, row))
        }

    def _tool_results(
        self, conn: Connection, partition_key: str, run_id: str, tool_call_ids: Sequence[str]
    ) -> dict[str, str]:
        if not tool_call_ids:
            return {}
        values = {"partition_key": partition_key, "run_id": run_id}
        values.update((f"tool_call_id_{i}", id_) for i, id_ in enumerate(tool_call_ids))
        found = self._turn.tool_results(len(tool_call_ids)).rows(conn, values)
        return {row[0]: row[1] for row in found}

    def _with_events(
        self, ref: RunRef, bodies: Sequence[dict[str, Any]], work: Callable[[Connection], _T]
    ) -> _T:
        """``work`` and appending ``bodies`` in one transaction (`in_event_transaction`:
        ``work`` must be idempotent, it runs again when another writer took the same event
        sequence numbers)."""

        def work_and_events(conn: Connection) -> _T:
            done = work(conn)
            insert_events(conn, self._turn, ref, bodies)
            return done

        return in_event_transaction(self._transaction, work_and_events)
