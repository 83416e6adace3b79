"""The transcript part of the store: a session's entries (appended once each, read back as a
model turn's context through the worker's `otherone.store.context_cache`) and its compactions."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Select, select

from otherone.contracts import RunRef
from otherone.runs import RunStatus
from otherone.store.context_cache import SessionContext
from otherone.store.errors import RunAlreadyEnded
from otherone.store.events import EntryEvents, in_event_transaction, insert_entry_events
from otherone.store.records import Compaction, EntryRow
from otherone.store.rows import (
    compaction_from_mapping,
    compaction_from_values,
    entry_from_mapping,
    entry_from_values,
    utc_now,
)
from otherone.store.schema import compactions, entries, run_records
from otherone.store.spending import CallSpend
from otherone.store.statements import session_entries
from otherone.store.store_base import StoreBase

#: What a turn's start read: the stored answer, or the latest compaction and the entries after it.
_TurnStart = tuple[EntryRow | None, Compaction | None, SessionContext | None]


class TranscriptStore(StoreBase):
    """Entries and compactions (part of `otherone.store.database.Store`)."""

    def append_entries(self, partition_key: str, session_id: str, rows: Iterable[EntryRow]) -> int:
        """Append entries in order; entries whose key already exists are skipped (retries).

        Returns how many were written. ``tokens`` defaults to `estimate_entry_tokens`.
        """
        with self.engine.begin() as conn:
            return self._insert_entries(conn, partition_key, session_id, rows)

    def _insert_entries(
        self, conn: Connection, partition_key: str, session_id: str, rows: Iterable[EntryRow]
    ) -> int:
        return len(self._inserted_keys(conn, partition_key, session_id, rows))

    def append_entries_with_their_events(
        self,
        partition_key: str,
        session_id: str,
        rows: Sequence[EntryRow],
        events: EntryEvents,
    ) -> int:
        """`append_entries`, and in the same transaction the events ``events`` gives for the
        entries written now (an entry already there, from an earlier attempt, brought its
        events with it). Returns the entries written."""

        def write(conn: Connection) -> int:
            written = self._inserted_keys(conn, partition_key, session_id, rows)
            insert_entry_events(conn, self._turn, events, written)
            return len(written)

        return in_event_transaction(self._transaction, write)

    def append_entries_and_events(
        self,
        partition_key: str,
        session_id: str,
        rows: Sequence[EntryRow],
        ref: RunRef,
        bodies: Sequence[dict[str, Any]],
        spent: Sequence[CallSpend] = (),
    ) -> int:
        """`append_entries` and `append_events` in ONE transaction (a model turn's end: its
        entry and its events). Both or neither are written; returns the entries written.
        ``spent``: the model calls' usage, added to its partition's spend when the entries
        are written now (an attempt that finds them stored counted it already)."""

        def entries_and_spend(conn: Connection) -> int:
            written = self._insert_entries(conn, partition_key, session_id, rows)
            if written:
                for call in spent:
                    self.spending.add(conn, call)
            return written

        return self._with_events(ref, bodies, entries_and_spend)

    def turn_context(
        self,
        partition_key: str,
        session_id: str,
        answer_key: str,
        run_id: str,
        tool_call_ids: Sequence[str],
        pending_rows: Callable[[Mapping[str, str]], Sequence[EntryRow]],
        events: EntryEvents | None = None,
        *,
        unless_ended: bool = False,
    ) -> tuple[EntryRow | None, Compaction | None, list[EntryRow]]:
        """A model turn's start in one transaction: read the stored results of ``run_id``'s
        ``tool_call_ids``, append the turn's pending entries (``pending_rows(results)``) and the
        events ``events`` gives for those written now; then the latest compaction, and the
        stored answer under ``answer_key`` if there is one (a retried turn), else the entries
        after that compaction.

        ``unless_ended`` (a turn that brings user messages): first `RunAlreadyEnded`, with
        nothing written, when the run's stored record is terminal (see there); one read more,
        on those turns only.

        The entries come from `contexts` as far as the database confirms them (the returned
        rows are shared with it: never change them); only newer ones are read.
        """
        key = (partition_key, session_id)
        session = {"partition_key": partition_key, "session_id": session_id}
        turn = self._turn

        def start(conn: Connection) -> _TurnStart:
            if unless_ended:
                _refuse_if_ended(conn, partition_key, run_id)
            stored = self._tool_results(conn, partition_key, run_id, tool_call_ids)
            rows = pending_rows(stored)
            written = self._inserted_keys(conn, partition_key, session_id, rows)
            existing = turn.entry_by_key.rows(conn, {**session, "entry_key": answer_key})
            found = turn.latest_compaction.rows(conn, session)
            compaction = compaction_from_values(found[0]) if found else None
            if existing:
                insert_entry_events(conn, turn, events, written)
                return entry_from_values(existing[0]), compaction, None
            cut = compaction.up_to_entry_id if compaction is not None else 0
            context = self._session_context(conn, session, cut, self.contexts.get(key))
            # Last: on PostgreSQL, appending takes the tree's event lock until commit, and
            # every event writer of the tree waits for it (not for the reads).
            insert_entry_events(conn, turn, events, written)
            return None, compaction, context

        answer, compaction, context = in_event_transaction(self._transaction, start)
        if context is None:
            return answer, compaction, []
        self.contexts.put(key, context)  # once committed: the pending entries are in it
        return None, compaction, list(context.rows)

    def _session_context(
        self,
        conn: Connection,
        session: dict[str, str],
        cut: int,
        cached: SessionContext | None,
    ) -> SessionContext:
        """The session's entries after ``cut``: ``cached`` ones the database confirms plus the
        newer ones, else all of them read again (`otherone.store.context_cache`)."""
        turn = self._turn
        base = None if cached is None else cached.trimmed(cut)
        if base is not None:
            newer = turn.entries_after.rows(conn, {**session, "after_id": base.seen})
            context = base.extended(
                [entry_from_values(values) for values in newer],
                newer[-1][-1] if newer else None,
            )
            marker_id = (base.rows[-1].id or 0) if base.rows else 0
            found = turn.entry_fingerprint.rows(
                conn, {**session, "after_id": cut, "marker_id": marker_id}
            )
            if tuple(found[0]) == context.fingerprint(base.marker):
                return context
        loaded = turn.entries_after.rows(conn, {**session, "after_id": cut})
        return SessionContext.of(
            cut,
            [entry_from_values(values) for values in loaded],
            loaded[-1][-1] if loaded else None,
        )

    def load_entries(
        self, partition_key: str, session_id: str, *, after_id: int | None = None
    ) -> list[EntryRow]:
        """The session's entries in append (id) order; only those after ``after_id`` if given.
        A fork's include those it shares with the session it was forked from."""
        query = session_entries(self.engine.dialect.name, *entries.c).order_by("id")
        values = {"partition_key": partition_key, "session_id": session_id}
        with self.engine.connect() as conn:
            found = conn.execute(query, {**values, "after_id": after_id or 0})
            return [entry_from_mapping(row._mapping) for row in found]

    def get_entry(self, partition_key: str, session_id: str, entry_key: str) -> EntryRow | None:
        query = select(entries).where(
            (entries.c.partition_key == partition_key)
            & (entries.c.session_id == session_id)
            & (entries.c.entry_key == entry_key)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else entry_from_mapping(row._mapping)

    # compactions -------------------------------------------------------------------------

    def add_compaction(
        self,
        partition_key: str,
        session_id: str,
        *,
        key: str,
        summary: str,
        up_to_entry_id: int,
        tokens: int,
        usage: dict[str, Any] | None = None,
        spent: Sequence[CallSpend] = (),
    ) -> None:
        """Record a summary of the session's entries up to ``up_to_entry_id`` (once per key),
        with the usage of the call that wrote it; ``spent``, that call's usage, is added to
        the partition's spend when the summary is recorded now (once, as the key is)."""
        statement = self._insert(compactions).values(
            partition_key=partition_key,
            session_id=session_id,
            compaction_key=key,
            summary=summary,
            up_to_entry_id=up_to_entry_id,
            tokens=tokens,
            created_at=utc_now(),
            usage=usage,
        )
        with self.engine.begin() as conn:
            inserted = conn.execute(
                statement.on_conflict_do_nothing(
                    index_elements=["partition_key", "session_id", "compaction_key"]
                )
            ).rowcount
            if inserted:
                for call in spent:
                    self.spending.add(conn, call)

    def latest_compaction(self, partition_key: str, session_id: str) -> Compaction | None:
        """The most recently added compaction of the session (what context starts from)."""
        with self.engine.connect() as conn:
            row = conn.execute(self._latest_compaction_query(partition_key, session_id)).first()
        return None if row is None else compaction_from_mapping(row._mapping)

    @staticmethod
    def _latest_compaction_query(partition_key: str, session_id: str) -> Select[Any]:
        return (
            select(compactions)
            .where(
                (compactions.c.partition_key == partition_key)
                & (compactions.c.session_id == session_id)
            )
            .order_by(compactions.c.id.desc())
            .limit(1)
        )


def _refuse_if_ended(conn: Connection, partition_key: str, run_id: str) -> None:
    query = select(run_records.c.status).where(
        (run_records.c.partition_key == partition_key) & (run_records.c.run_id == run_id)
    )
    status = conn.execute(query).scalar_one_or_none()
    if status is not None and RunStatus(status).is_terminal:
        raise RunAlreadyEnded(run_id, status)
