"""What every part of the store shares: the engine, the prepared statements and the few
helpers more than one part's transactions use (`otherone.store.database.Store` puts the parts
together)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, Table
from sqlalchemy.dialects import postgresql, sqlite

from otherone.contracts import RunRef
from otherone.store.context_cache import ContextCache
from otherone.store.events import in_event_transaction, insert_events
from otherone.store.lifecycle import LifecycleStatements
from otherone.store.records import EntryRow
from otherone.store.rows import entry_values
from otherone.store.statements import TurnStatements

Insert = postgresql.Insert | sqlite.Insert
_T = TypeVar("_T")


class StoreBase:
    """The engine and the statements; helpers of the parts' transactions."""

    def __init__(self, engine: Engine, *, contexts: ContextCache | None = None) -> None:
        self.engine = engine
        #: Sessions' entries as this process last read them (`turn_context`).
        self.contexts = ContextCache() if contexts is None else contexts

    @cached_property
    def _turn(self) -> TurnStatements:
        """A turn's statements, prepared on first use (`otherone.store.statements`)."""
        return TurnStatements(self.engine.dialect)

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

        return in_event_transaction(self.engine, work_and_events)
