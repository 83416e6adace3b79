"""SQLAlchemy store (synchronous; activities call it through `asyncio.to_thread`).

Every write an activity makes is idempotent, keyed by something stable across activity retries
(an entry key derived from run id + turn, a tool call id, a compaction or artifact id), because
Temporal may run an activity more than once: writes are ``INSERT ... ON CONFLICT``, so even two
attempts racing each other write once. Every query filters by partition key: the partition is
the tenant boundary (events are addressed by their root run id, which is globally unique, and
are filtered by partition too when the caller names one).

Tables are described in `otherone.store.schema` and created by the migrations in
`otherone.store.migrations`
(`Store.open` applies them). Events (each root tree's sequence) are written and read by
`otherone.store.events`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    Table,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from otherone.config import RuntimeSnapshot
from otherone.contracts import EventRecord, RunRef
from otherone.credentials import snapshot_credential_paths
from otherone.definitions import credentials_refused_message
from otherone.errors import ConfigurationError
from otherone.runs import AgentOutput, RunRecord
from otherone.store.context_cache import ContextCache, SessionContext
from otherone.store.engine import create_store_engine, parse_url
from otherone.store.errors import StoreError
from otherone.store.events import (
    EntryEvents,
    in_event_transaction,
    insert_entry_events,
    insert_events,
    prune_events,
    read_events,
    read_events_mentioning,
)
from otherone.store.lifecycle import (
    LifecycleStatements,
    RunEnd,
    SessionLease,
    acquire,
    release,
    upsert_record,
)
from otherone.store.records import (
    Artifact,
    Compaction,
    EntryRow,
    MigrationResult,
    SessionInfo,
    aware,
)
from otherone.store.rows import (
    artifact_from_mapping,
    compaction_from_mapping,
    compaction_from_values,
    entry_from_mapping,
    entry_from_values,
    entry_values,
    run_record_from_mapping,
    session_info_from_mapping,
    tool_result_values,
    utc_now,
)
from otherone.store.schema import (
    artifacts,
    compactions,
    entries,
    run_records,
    sessions,
    snapshots,
)
from otherone.store.statements import TurnStatements

Insert = postgresql.Insert | sqlite.Insert
_T = TypeVar("_T")
#: What a turn's start read: the stored answer, or the latest compaction and the entries after it.
_TurnStart = tuple[EntryRow | None, Compaction | None, SessionContext | None]


def _refuse_credentials(snapshot_body: dict[str, Any]) -> None:
    """Defence in depth: configuration validation refuses credentials in ``other``, but a
    definition built without validation could still carry one, and this table is kept forever."""
    found = snapshot_credential_paths(snapshot_body)
    if found:
        table, field = found[0]
        paths = [f"{where}.{path}" for where, path in found]
        raise ConfigurationError(
            f"the runtime snapshot was not stored: {credentials_refused_message(paths)}",
            table=table,
            field=field,
        )


class Store:
    """Database access. Create with `Store.open(url)`, which migrates the schema to the newest."""

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

    @classmethod
    def open(cls, url: str, *, migrate: bool = True) -> Store:
        """Connect to ``url`` (a SQLite file or PostgreSQL) and, unless told not to, upgrade.

        Workers and dev servers open with ``migrate=True`` so a new release brings its tables
        along; `otherone db upgrade` does the same explicitly.
        """
        store = cls(create_store_engine(parse_url(url)))
        if migrate:
            try:
                store.upgrade()
            except BaseException:
                store.close()
                raise
        return store

    def upgrade(self) -> MigrationResult:
        """Apply pending migrations (safe while other processes do the same)."""
        # Imported here: Alembic is needed only when migrating, and `store` must stay cheap and
        # sandbox-safe to import (workflow modules import it indirectly).
        from alembic.util import CommandError

        from otherone.store.migrate import upgrade

        try:
            return upgrade(self.engine)
        except (SQLAlchemyError, CommandError) as error:
            raise StoreError(f"cannot migrate the database: {error}") from error

    def close(self) -> None:
        self.engine.dispose()

    def _insert(self, table: Table) -> Insert:
        """INSERT with the backend's ``ON CONFLICT`` support (SQLite and PostgreSQL share it)."""
        if self.engine.dialect.name == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    # snapshots ---------------------------------------------------------------------------

    def save_snapshot(self, snapshot: RuntimeSnapshot) -> None:
        """Store a snapshot once per version; one that carries a credential is never written."""
        body = snapshot.model_dump_json()
        _refuse_credentials(json.loads(body))
        statement = self._insert(snapshots).values(
            version=snapshot.version, body=body, created_at=utc_now()
        )
        with self.engine.begin() as conn:
            conn.execute(statement.on_conflict_do_nothing(index_elements=["version"]))

    def load_snapshot(self, version: str) -> RuntimeSnapshot | None:
        with self.engine.connect() as conn:
            body = conn.execute(
                select(snapshots.c.body).where(snapshots.c.version == version)
            ).scalar_one_or_none()
        return None if body is None else RuntimeSnapshot.model_validate_json(body)

    # sessions ----------------------------------------------------------------------------

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
        """A run's start in one transaction: take ``lease`` (as `acquire_session`: raises
        `SessionBusyError`, and nothing is written, when another live run holds it), store
        ``record`` (`upsert_run_record`) and append ``bodies`` (`append_events`)."""
        statements, turn = self._lifecycle, self._turn

        def write(conn: Connection) -> None:
            acquire(conn, statements, lease)
            upsert_record(conn, statements, record)
            insert_events(conn, turn, ref, bodies)

        in_event_transaction(self.engine, write)

    def end_run(self, end: RunEnd) -> int:
        """A run's end in one transaction (what `RunEnd` lists, in its order); returns the
        entries written (an entry already there, from an earlier attempt, brought its events
        with it). Every part is idempotent: a local activity may run it again whole."""
        ref, statements, turn = end.ref, self._lifecycle, self._turn

        def write(conn: Connection) -> int:
            stored = self._tool_results(conn, ref.partition_key, ref.run_id, end.tool_call_ids)
            rows = end.pending_rows(stored)
            written = self._inserted_keys(conn, ref.partition_key, ref.session_id, rows)
            if end.release_session:
                release(conn, statements, ref.partition_key, ref.session_id, ref.run_id)
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
            entry_events = end.entry_events.bodies_for(written) if end.entry_events else []
            # Last: on PostgreSQL, appending takes the tree's event lock until commit.
            insert_events(conn, turn, ref, [*end.events_before, *entry_events, *end.events_after])
            return len(written)

        return in_event_transaction(self.engine, write)

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
        self, partition_key: str, *, include_internal: bool = False
    ) -> list[SessionInfo]:
        """Sessions of a partition with their lease state, oldest first (`list_sessions`)."""
        query = select(sessions).where(sessions.c.partition_key == partition_key)
        if not include_internal:
            query = query.where(sessions.c.internal.is_(False))
        query = query.order_by(sessions.c.created_at, sessions.c.session_id)
        with self.engine.connect() as conn:
            return [session_info_from_mapping(row._mapping) for row in conn.execute(query)]

    # entries -----------------------------------------------------------------------------

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

        return in_event_transaction(self.engine, write)

    def append_entries_and_events(
        self,
        partition_key: str,
        session_id: str,
        rows: Sequence[EntryRow],
        ref: RunRef,
        bodies: Sequence[dict[str, Any]],
    ) -> int:
        """`append_entries` and `append_events` in ONE transaction (a model turn's end: its
        entry and its events). Both or neither are written; returns the entries written."""
        return self._with_events(
            ref, bodies, lambda conn: self._insert_entries(conn, partition_key, session_id, rows)
        )

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

    def turn_context(
        self,
        partition_key: str,
        session_id: str,
        answer_key: str,
        run_id: str,
        tool_call_ids: Sequence[str],
        pending_rows: Callable[[Mapping[str, str]], Sequence[EntryRow]],
        events: EntryEvents | None = None,
    ) -> tuple[EntryRow | None, Compaction | None, list[EntryRow]]:
        """A model turn's start in one transaction: read the stored results of ``run_id``'s
        ``tool_call_ids``, append the turn's pending entries (``pending_rows(results)``) and the
        events ``events`` gives for those written now; then the stored answer under
        ``answer_key`` if there is one (a retried turn), else the latest compaction and the
        entries after it.

        The entries come from `contexts` as far as the database confirms them (the returned
        rows are shared with it: never change them); only newer ones are read.
        """
        key = (partition_key, session_id)
        session = {"partition_key": partition_key, "session_id": session_id}
        turn = self._turn

        def start(conn: Connection) -> _TurnStart:
            stored = self._tool_results(conn, partition_key, run_id, tool_call_ids)
            rows = pending_rows(stored)
            written = self._inserted_keys(conn, partition_key, session_id, rows)
            existing = turn.entry_by_key.rows(conn, {**session, "entry_key": answer_key})
            if existing:
                insert_entry_events(conn, turn, events, written)
                return entry_from_values(existing[0]), None, None
            found = turn.latest_compaction.rows(conn, session)
            compaction = compaction_from_values(found[0]) if found else None
            cut = compaction.up_to_entry_id if compaction is not None else 0
            context = self._session_context(conn, session, cut, self.contexts.get(key))
            # Last: on PostgreSQL, appending takes the tree's event lock until commit, and
            # every event writer of the tree waits for it (not for the reads).
            insert_entry_events(conn, turn, events, written)
            return None, compaction, context

        answer, compaction, context = in_event_transaction(self.engine, start)
        if context is None:
            return answer, None, []
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
        """The session's entries in append (id) order; only those after ``after_id`` if given."""
        query = select(entries).where(
            (entries.c.partition_key == partition_key) & (entries.c.session_id == session_id)
        )
        if after_id is not None:
            query = query.where(entries.c.id > after_id)
        with self.engine.connect() as conn:
            return [
                entry_from_mapping(row._mapping)
                for row in conn.execute(query.order_by(entries.c.id))
            ]

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
    ) -> None:
        """Record a summary of the session's entries up to ``up_to_entry_id`` (once per key)."""
        statement = self._insert(compactions).values(
            partition_key=partition_key,
            session_id=session_id,
            compaction_key=key,
            summary=summary,
            up_to_entry_id=up_to_entry_id,
            tokens=tokens,
            created_at=utc_now(),
        )
        with self.engine.begin() as conn:
            conn.execute(
                statement.on_conflict_do_nothing(
                    index_elements=["partition_key", "session_id", "compaction_key"]
                )
            )

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

    # artifacts ---------------------------------------------------------------------------

    def put_artifact(
        self,
        partition_key: str,
        *,
        artifact_id: str,
        run_id: str,
        name: str,
        media_type: str,
        content: bytes,
    ) -> None:
        """Store a blob under ``artifact_id`` (once: a retry with the same id writes nothing)."""
        statement = self._insert(artifacts).values(
            partition_key=partition_key,
            artifact_id=artifact_id,
            run_id=run_id,
            name=name,
            media_type=media_type,
            size_bytes=len(content),
            content=content,
            created_at=utc_now(),
        )
        with self.engine.begin() as conn:
            conn.execute(
                statement.on_conflict_do_nothing(index_elements=["partition_key", "artifact_id"])
            )

    def get_artifact(self, partition_key: str, artifact_id: str) -> Artifact | None:
        query = select(artifacts).where(
            (artifacts.c.partition_key == partition_key) & (artifacts.c.artifact_id == artifact_id)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else artifact_from_mapping(row._mapping)

    def resolve_output(self, output: AgentOutput) -> AgentOutput:
        """The output with its value read back from its artifact (unchanged if carried inline
        or if the artifact is gone)."""
        if not output.is_reference:
            return output
        assert output.artifact is not None
        stored = self.get_artifact(output.artifact.partition_key, output.artifact.artifact_id)
        return output if stored is None else output.with_stored_value(stored.content)

    # run records -------------------------------------------------------------------------

    def upsert_run_record(self, record: RunRecord) -> None:
        """Insert or replace a run's record, keyed by (partition, run id).

        A terminal record is final: a late non-terminal write (an activity retried after the
        run ended) does not overwrite it.
        """
        with self.engine.begin() as conn:
            upsert_record(conn, self._lifecycle, record)

    def get_run_record(self, partition_key: str, run_id: str) -> RunRecord | None:
        query = select(run_records).where(
            (run_records.c.partition_key == partition_key) & (run_records.c.run_id == run_id)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else run_record_from_mapping(row._mapping)

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

    # tool results ------------------------------------------------------------------------

    def put_tool_result(
        self,
        partition_key: str,
        run_id: str,
        tool_call_id: str,
        *,
        tool_name: str,
        content: str,
        error_kind: str | None,
    ) -> None:
        """Store (or replace, on a retried tool call) the result of one tool call."""
        values = tool_result_values(
            partition_key, run_id, tool_call_id, tool_name, content, error_kind
        )
        with self.engine.begin() as conn:
            self._turn.upsert_tool_result.rows(conn, values)

    def put_tool_result_and_events(
        self,
        ref: RunRef,
        tool_call_id: str,
        bodies: Sequence[dict[str, Any]],
        *,
        tool_name: str,
        content: str,
        error_kind: str | None,
    ) -> None:
        """`put_tool_result` (of ``ref``'s run) and `append_events` in ONE transaction (a tool
        call's end: its result and its events)."""
        values = tool_result_values(
            ref.partition_key, ref.run_id, tool_call_id, tool_name, content, error_kind
        )
        upsert = self._turn.upsert_tool_result
        self._with_events(ref, bodies, lambda conn: upsert.rows(conn, values))

    def get_tool_results(
        self, partition_key: str, run_id: str, tool_call_ids: Sequence[str]
    ) -> dict[str, str]:
        if not tool_call_ids:
            return {}
        with self.engine.connect() as conn:
            return self._tool_results(conn, partition_key, run_id, tool_call_ids)

    def _tool_results(
        self, conn: Connection, partition_key: str, run_id: str, tool_call_ids: Sequence[str]
    ) -> dict[str, str]:
        if not tool_call_ids:
            return {}
        values = {"partition_key": partition_key, "run_id": run_id}
        values.update((f"tool_call_id_{i}", id_) for i, id_ in enumerate(tool_call_ids))
        found = self._turn.tool_results(len(tool_call_ids)).rows(conn, values)
        return {row[0]: row[1] for row in found}

    # events ------------------------------------------------------------------------------

    def append_events(self, ref: RunRef, bodies: Sequence[dict[str, Any]]) -> list[int]:
        """Append events to the root tree's sequence (one gap-free sequence per root run).

        PostgreSQL serialises appenders of one root with an advisory lock; SQLite's single
        writer does that for it. A unique (root, sequence) constraint backs both: should two
        writers still pick the same numbers, the loser reads again and retries.

        A body carrying `EVENT_KEY` is stored at most once per root under that key (the field
        is not stored): a writer that may run again whole (a local activity re-run after its
        workflow task failed) finds its events there. Returns the sequences written.
        """
        if not bodies:
            return []
        turn = self._turn
        return in_event_transaction(
            self.engine, lambda conn: insert_events(conn, turn, ref, bodies)
        )

    def prune_events(self, older_than: datetime) -> int:
        """Delete the events of ended root trees that have been quiet since before
        ``older_than``.

        Whole trees only: pruning part of a live tree could let its sequence restart below a
        consumer's cursor. Returns the number of events deleted.
        """
        with self.engine.begin() as conn:
            return prune_events(conn, older_than)

    def read_events(
        self,
        root_run_id: str,
        *,
        after: int = 0,
        limit: int = 500,
        partition_key: str | None = None,
    ) -> list[EventRecord]:
        """Events of a root tree after sequence ``after``, in order (of ``partition_key`` only,
        when given)."""
        with self.engine.connect() as conn:
            return read_events(
                conn, root_run_id, after=after, limit=limit, partition_key=partition_key
            )

    def read_events_mentioning(
        self, root_run_id: str, values: Collection[str]
    ) -> list[EventRecord]:
        """Events of a root tree whose body holds one of ``values`` as a JSON string (a tool
        call id, say), in order. The database filters the text, so asking about a few calls
        does not read every event of a long tree; a value may also turn up elsewhere in a
        body (a model's text), so callers look at what they get."""
        with self.engine.connect() as conn:
            return read_events_mentioning(conn, root_run_id, values)
