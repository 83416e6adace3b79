"""The runs part of the store: sessions' writer leases, a run's start and end transactions and
its record (statements in `otherone.store.lifecycle`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, select, update

from otherone.contracts import RunRef
from otherone.runs import RunRecord
from otherone.store.context_cache import SessionContext
from otherone.store.events import LIVE_STATUSES, in_event_transaction, insert_events
from otherone.store.lifecycle import (
    EndStored,
    RunEnd,
    SessionLease,
    acquire,
    release,
    start_record,
    upsert_record,
)
from otherone.store.records import KeyedRun, SessionInfo, aware, event_key, utc
from otherone.store.rows import (
    run_record_from_mapping,
    run_record_values,
    session_info_from_mapping,
    tool_result_values,
    utc_now,
)
from otherone.store.schema import idempotency_keys, run_records, sessions
from otherone.store.store_base import StoreBase


class RunStore(StoreBase):
    """Sessions, runs' starts and ends, run records (part of `otherone.store.database.Store`)."""

    @staticmethod
    def _session_key(partition_key: str, session_id: str) -> ColumnElement[bool]:
        return (sessions.c.partition_key == partition_key) & (sessions.c.session_id == session_id)

    def acquire_session(
        self,
        partition_key: str,
        session_id: str,
        run_id: str,
        *,
        internal: bool,
        lease_until: datetime,
    ) -> None:
        """Take the session's writer lease for ``run_id`` until ``lease_until``.

        Re-entrant for the run that holds it; free once released or expired. Taking it is one
        conditional UPDATE (or an INSERT of a new session), so two runs racing for the same
        session cannot both win. Raises `SessionBusyError` when another live run holds it.
        """
        lease = SessionLease(partition_key, session_id, run_id, lease_until, internal)
        with self.engine.begin() as conn:
            acquire(conn, self._lifecycle, lease)

    def release_session(self, partition_key: str, session_id: str, run_id: str) -> None:
        """Give the lease back; only the run holding it can (a late release is a no-op)."""
        with self.engine.begin() as conn:
            release(conn, self._lifecycle, partition_key, session_id, run_id)

    def start_run(
        self, lease: SessionLease, record: RunRecord, ref: RunRef, bodies: Sequence[dict[str, Any]]
    ) -> None:
        """A run's start in one transaction: store ``record`` (raises `RunIdUsed`, and
        nothing is written, when the run id's record holds an end: another execution of an
        ended run's id), take ``lease`` (as `acquire_session`: raises `SessionBusyError`, and
        nothing is written, when another live run holds it) and append ``bodies``
        (`append_events`).

        A session created now has no entries: its (empty) context goes into `contexts`, so its
        first turn knows it without a read (`ContextCache.holds`)."""
        statements, turn = self._lifecycle, self._turn

        def write(conn: Connection) -> bool:
            start_record(conn, statements, record)  # first: a used run id takes no lease
            created = acquire(conn, statements, lease)
            insert_events(conn, turn, ref, bodies)
            return created

        if in_event_transaction(self._transaction, write):
            key = (lease.partition_key, lease.session_id)
            self.contexts.put(key, SessionContext.of(0, [], None))

    def end_run(self, end: RunEnd) -> EndStored:
        """A run's end in one transaction (what `RunEnd` lists, in its order); says the
        entries written (an entry already there, from an earlier attempt, brought its events
        with it) and an earlier, different end kept instead of this one. Every part is
        idempotent: a local activity may run it again whole."""
        ref, statements, turn = end.ref, self._lifecycle, self._turn

        def write(conn: Connection) -> EndStored:
            stored = self._tool_results(conn, ref.partition_key, ref.run_id, end.tool_call_ids)
            rows = end.pending_rows(stored)
            written = self._inserted_keys(conn, ref.partition_key, ref.session_id, rows)
            if end.release_session:
                release(conn, statements, ref.partition_key, ref.session_id, ref.run_id)
            entry_events = end.entry_events.bodies_for(written) if end.entry_events else []
            earlier = self._earlier_end(conn, end.record)
            if earlier is not None:
                insert_events(conn, turn, ref, entry_events)
                return EndStored(len(written), earlier)
            if end.record is not None:
                upsert_record(conn, statements, end.record)
            result = end.call_result
            if result is not None:
                values = tool_result_values(
                    ref.partition_key,
                    result.caller_run_id,
                    result.call_id,
                    result.tool_name,
                    result.content,
                    None,
                )
                turn.upsert_tool_result.rows(conn, values)
            # Last: on PostgreSQL, appending takes the tree's event lock until commit.
            insert_events(conn, turn, ref, [*end.events_before, *entry_events, *end.events_after])
            return EndStored(len(written))

        return in_event_transaction(self._transaction, write)

    def _earlier_end(self, conn: Connection, record: RunRecord | None) -> RunRecord | None:
        """The run's stored record if it holds an end other than ``record``'s (another status,
        output or failure; the same end again is a finish run again whole)."""
        if record is None or not record.status.is_terminal:
            return None
        stored = _read_record(conn, record.partition_key, record.run_id)
        if stored is None:
            return None
        end = (record.status, record.output, record.failure)
        ended_otherwise = (
            stored.status.is_terminal and (stored.status, stored.output, stored.failure) != end
        )
        return stored if ended_otherwise else None

    def session_holder(self, partition_key: str, session_id: str) -> str | None:
        """The run holding the session's writer lease now (None: free, expired or unknown)."""
        query = select(sessions.c.lease_run_id, sessions.c.lease_until).where(
            self._session_key(partition_key, session_id)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None or row.lease_run_id is None or row.lease_until is None:
            return None
        return str(row.lease_run_id) if aware(row.lease_until) > utc_now() else None

    def list_sessions(self, partition_key: str, *, include_internal: bool = False) -> list[str]:
        """Session ids of a partition, oldest first; child runs' internal ones only on request."""
        infos = self.session_infos(partition_key, include_internal=include_internal)
        return [info.session_id for info in infos]

    def session_infos(
        self,
        partition_key: str,
        *,
        include_internal: bool = False,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[SessionInfo]:
        """Sessions of a partition with their lease state, oldest first (`list_sessions`): at
        most ``limit``, those listed after the session ``after`` (a page's last; unknown: none)."""
        query = select(sessions).where(sessions.c.partition_key == partition_key)
        if not include_internal:
            query = query.where(sessions.c.internal.is_(False))
        query = query.order_by(sessions.c.created_at, sessions.c.session_id)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            if after is not None:
                cursor = conn.execute(
                    select(sessions.c.created_at).where(self._session_key(partition_key, after))
                ).scalar_one_or_none()
                if cursor is None:
                    return []
                query = query.where(
                    (sessions.c.created_at > cursor)
                    | ((sessions.c.created_at == cursor) & (sessions.c.session_id > after))
                )
            return [session_info_from_mapping(row._mapping) for row in conn.execute(query)]

    # run records -------------------------------------------------------------------------

    def upsert_run_record(self, record: RunRecord) -> None:
        """Insert or replace a run's record, keyed by (partition, run id).

        A terminal record is final: a late non-terminal write (an activity retried after the
        run ended) does not overwrite it.
        """
        with self.engine.begin() as conn:
            upsert_record(conn, self._lifecycle, record)

    def get_run_record(self, partition_key: str, run_id: str) -> RunRecord | None:
        with self.engine.connect() as conn:
            return _read_record(conn, partition_key, run_id)

    def find_run_record(self, run_id: str, partition_key: str | None = None) -> RunRecord | None:
        """The run's record by id, in ``partition_key`` or (None) in whichever partition holds
        it (run ids are unique across partitions: a keyed root's is derived from its partition,
        any other's is random, a child's nests under its caller's)."""
        if partition_key is not None:
            return self.get_run_record(partition_key, run_id)
        query = select(run_records).where(run_records.c.run_id == run_id).limit(1)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else run_record_from_mapping(row._mapping)

    # idempotency keys --------------------------------------------------------------------

    def keyed_run(self, partition_key: str, run_id: str) -> KeyedRun | None:
        """What the store knows of the keyed root ``run_id``: the fingerprint kept for it
        (`keep_idempotency_fingerprint`), else whether it has the run's record (None: neither).
        Two primary-key lookups in one connection."""
        kept = select(idempotency_keys.c.fingerprint).where(
            (idempotency_keys.c.partition_key == partition_key)
            & (idempotency_keys.c.run_id == run_id)
        )
        recorded = select(run_records.c.run_id).where(
            (run_records.c.partition_key == partition_key) & (run_records.c.run_id == run_id)
        )
        with self.engine.connect() as conn:
            fingerprint = conn.execute(kept).scalar_one_or_none()
            if fingerprint is not None:
                return KeyedRun(str(fingerprint))
            return KeyedRun(None) if conn.execute(recorded).first() is not None else None

    def keep_idempotency_fingerprint(
        self, partition_key: str, run_id: str, fingerprint: str
    ) -> None:
        """Keep the fingerprint of the request that started the keyed root ``run_id``; the
        first one kept stays (every caller keeps the one Temporal's memo confirmed)."""
        values = {
            "partition_key": partition_key,
            "run_id": run_id,
            "fingerprint": fingerprint,
            "created_at": utc_now(),
        }
        statement = self._insert(idempotency_keys).values(values).on_conflict_do_nothing()
        with self.engine.begin() as conn:
            conn.execute(statement)

    def list_run_records(self, partition_key: str, root_run_id: str) -> list[RunRecord]:
        """Every record of a root's tree: by depth (the root first), then start time."""
        query = (
            select(run_records)
            .where(
                (run_records.c.partition_key == partition_key)
                & (run_records.c.root_run_id == root_run_id)
            )
            .order_by(
                run_records.c.depth,
                run_records.c.started_at.asc().nulls_last(),
                run_records.c.run_id,
            )
        )
        with self.engine.connect() as conn:
            return [run_record_from_mapping(row._mapping) for row in conn.execute(query)]

    # reconciling (`otherone.worker.reconciler`) --------------------------------------------

    def open_run_records(
        self,
        updated_before: datetime,
        *,
        limit: int = 100,
        after: OpenRecord | None = None,
    ) -> list[OpenRecord]:
        """Records of every partition that do not hold an end (``running``, waiting) and were
        last written before ``updated_before``: the least recently written first, at most
        ``limit``, those after ``after`` (the last of a previous page)."""
        query = open_records_query(updated_before, limit, after)
        with self.engine.connect() as conn:
            return [
                OpenRecord(run_record_from_mapping(row._mapping), aware(row.updated_at))
                for row in conn.execute(query)
            ]

    def close_open_run(self, record: RunRecord, ended: Sequence[dict[str, Any]] = ()) -> bool:
        """Store ``record``'s end for a run whose record is still open, in one transaction: the
        record is replaced only if it holds no end yet (a conditional UPDATE: of several
        closers, and of a late `end_run`, one wins); then the session's lease the run holds is
        given back and ``ended`` (its end event) appended. A child's end event is written only
        where its start is (a tree that keeps no events of its descendants gets none). True
        when this call closed the record; False when it held an end already (nothing
        written)."""
        if not record.status.is_terminal:
            raise ValueError(f"a run is closed with an end, not {record.status.value}")
        values = run_record_values(record)
        key = (run_records.c.partition_key == record.partition_key) & (
            run_records.c.run_id == record.run_id
        )
        closing = (
            update(run_records)
            .where(key & run_records.c.status.in_([status.value for status in LIVE_STATUSES]))
            .values({name: value for name, value in values.items() if name not in _KEY})
            .returning(run_records.c.run_id)
        )
        ref = RunRef(
            run_id=record.run_id,
            root_run_id=record.root_run_id,
            parent_run_id=record.parent_run_id,
            agent_call_id=record.agent_call_id,
            agent_id=record.agent_id,
            depth=record.depth,
            partition_key=record.partition_key,
            session_id=record.session_id or "",
            snapshot_version="",
        )
        statements, turn = self._lifecycle, self._turn

        def write(conn: Connection) -> bool:
            if conn.execute(closing).first() is None:
                return False
            if record.session_id:
                release(conn, statements, record.partition_key, record.session_id, record.run_id)
            bodies = list(ended)
            if bodies and record.depth > 0:
                started = {"root_run_id": record.root_run_id, "event_key_0": _started(record)}
                if not turn.stored_event_keys(1).rows(conn, started):
                    bodies = []
            insert_events(conn, turn, ref, bodies)
            return True

        return in_event_transaction(self._transaction, write)


@dataclass(frozen=True)
class OpenRecord:
    """A record `RunStore.open_run_records` found open, and when it was last written."""

    record: RunRecord
    updated_at: datetime


_KEY = ("partition_key", "run_id")


def open_records_query(
    updated_before: datetime, limit: int, after: OpenRecord | None
) -> Select[Any]:
    """`RunStore.open_run_records`'s query: by status and time written, which the index
    ``ix_otherone_run_records_open`` serves (without it every record, most of them ended
    long ago, would be read on each reconciler pass; migration 0011)."""
    query = select(run_records).where(
        run_records.c.status.in_([status.value for status in LIVE_STATUSES])
        & (run_records.c.updated_at < utc(updated_before))
    )
    if after is not None:
        at = utc(after.updated_at)
        partition_key, run_id = after.record.partition_key, after.record.run_id
        query = query.where(
            (run_records.c.updated_at > at)
            | (
                (run_records.c.updated_at == at)
                & (
                    (run_records.c.partition_key > partition_key)
                    | (
                        (run_records.c.partition_key == partition_key)
                        & (run_records.c.run_id > run_id)
                    )
                )
            )
        )
    return query.order_by(
        run_records.c.updated_at, run_records.c.partition_key, run_records.c.run_id
    ).limit(limit)


def _started(record: RunRecord) -> str:
    """The key of the run's `run_started` event (`otherone.activities.prepare_run`)."""
    return event_key(record.run_id, "started")


def _read_record(conn: Connection, partition_key: str, run_id: str) -> RunRecord | None:
    query = select(run_records).where(
        (run_records.c.partition_key == partition_key) & (run_records.c.run_id == run_id)
    )
    row = conn.execute(query).first()
    return None if row is None else run_record_from_mapping(row._mapping)
