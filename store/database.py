"""SQLAlchemy store (synchronous; activities call it through `asyncio.to_thread`).

Every write an activity makes is idempotent, keyed by something stable across activity retries
(an entry key derived from run id + turn, a tool call id), because Temporal may run an activity
more than once. Every query filters by partition key: the partition is the tenant boundary.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from otherone.config import RuntimeSnapshot
from otherone.contracts import EventRecord, RunRef
from otherone.errors import FailureCode, OtheroneError

metadata = MetaData()

snapshots = Table(
    "otherone_snapshots",
    metadata,
    Column("version", String(64), primary_key=True),
    Column("body", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

sessions = Table(
    "otherone_sessions",
    metadata,
    Column("partition_key", String(128), primary_key=True),
    Column("session_id", String(256), primary_key=True),
    Column("internal", Boolean, nullable=False, default=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("lease_run_id", String(300), nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
)

entries = Table(
    "otherone_entries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("partition_key", String(128), nullable=False, index=True),
    Column("session_id", String(256), nullable=False),
    Column("entry_key", String(512), nullable=False),
    Column("run_id", String(300), nullable=True),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("tool_calls", JSON, nullable=True),
    Column("tool_call_id", String(256), nullable=True),
    Column("tool_name", String(128), nullable=True),
    Column("error_kind", String(32), nullable=True),
    Column("usage", JSON, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("partition_key", "session_id", "entry_key", name="uq_entry_key"),
)

tool_results = Table(
    "otherone_tool_results",
    metadata,
    Column("partition_key", String(128), primary_key=True),
    Column("run_id", String(300), primary_key=True),
    Column("tool_call_id", String(256), primary_key=True),
    Column("tool_name", String(128), nullable=False),
    Column("content", Text, nullable=False),
    Column("error_kind", String(32), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

events = Table(
    "otherone_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("root_run_id", String(300), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("root_run_id", "sequence", name="uq_event_sequence"),
)


class StoreError(OtheroneError):
    """The database failed; activities surface it as a retryable storage error."""

    code = FailureCode.STORAGE_ERROR


class SessionBusyError(OtheroneError):
    """Another live run holds the session's writer lease."""

    code = FailureCode.SESSION_BUSY

    def __init__(self, session_id: str, holder: str) -> None:
        super().__init__(f"session '{session_id}' is in use by run '{holder}'")
        self.session_id = session_id
        self.holder = holder


@dataclass(frozen=True)
class EntryRow:
    """One transcript entry, as written (the model context is rebuilt from these)."""

    entry_key: str
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    error_kind: str | None = None
    usage: dict[str, Any] | None = None
    run_id: str | None = None


def default_database_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / 'otherone.db').resolve()}"


def _now() -> datetime:
    return datetime.now(UTC)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the client read events while workers write; busy_timeout makes concurrent
    # writers wait instead of failing with "database is locked".
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class Store:
    """Database access. Create with `Store.open(url)`; tables are created if missing."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, url: str) -> Store:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
            event.listen(engine, "connect", _sqlite_pragmas)
        else:
            engine = create_engine(url, pool_pre_ping=True)
        try:
            metadata.create_all(engine)
        except SQLAlchemyError as error:
            raise StoreError(f"cannot open database: {error}") from error
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    # snapshots ---------------------------------------------------------------------------

    def save_snapshot(self, snapshot: RuntimeSnapshot) -> None:
        with self.engine.begin() as conn:
            exists = conn.execute(
                select(snapshots.c.version).where(snapshots.c.version == snapshot.version)
            ).first()
            if exists is None:
                conn.execute(
                    insert(snapshots).values(
                        version=snapshot.version,
                        body=snapshot.model_dump_json(),
                        created_at=_now(),
                    )
                )

    def load_snapshot(self, version: str) -> RuntimeSnapshot | None:
        with self.engine.connect() as conn:
            body = conn.execute(
                select(snapshots.c.body).where(snapshots.c.version == version)
            ).scalar_one_or_none()
        return None if body is None else RuntimeSnapshot.model_validate_json(body)

    # sessions ----------------------------------------------------------------------------

    def acquire_session(
        self,
        partition_key: str,
        session_id: str,
        run_id: str,
        *,
        internal: bool,
        lease_until: datetime,
    ) -> None:
        """Take the session's writer lease for ``run_id`` (re-entrant for the same run)."""
        now = _now()
        with self.engine.begin() as conn:
            key = (sessions.c.partition_key == partition_key) & (
                sessions.c.session_id == session_id
            )
            row = conn.execute(
                select(sessions.c.lease_run_id, sessions.c.lease_until).where(key)
            ).first()
            if row is None:
                self._create_session(conn, partition_key, session_id, run_id, internal, lease_until)
                return
            holder, until = row
            if holder not in (None, run_id) and until is not None and _aware(until) > now:
                raise SessionBusyError(session_id, holder)
            conn.execute(
                update(sessions)
                .where(key)
                .values(lease_run_id=run_id, lease_until=lease_until, updated_at=now)
            )

    def _create_session(
        self,
        conn: Any,
        partition_key: str,
        session_id: str,
        run_id: str,
        internal: bool,
        lease_until: datetime,
    ) -> None:
        now = _now()
        try:
            conn.execute(
                insert(sessions).values(
                    partition_key=partition_key,
                    session_id=session_id,
                    internal=internal,
                    created_at=now,
                    updated_at=now,
                    lease_run_id=run_id,
                    lease_until=lease_until,
                )
            )
        except IntegrityError:
            raise SessionBusyError(session_id, "another run") from None

    def release_session(self, partition_key: str, session_id: str, run_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(sessions)
                .where(
                    (sessions.c.partition_key == partition_key)
                    & (sessions.c.session_id == session_id)
                    & (sessions.c.lease_run_id == run_id)
                )
                .values(lease_run_id=None, lease_until=None, updated_at=_now())
            )

    def list_sessions(self, partition_key: str, *, include_internal: bool = False) -> list[str]:
        query = select(sessions.c.session_id).where(sessions.c.partition_key == partition_key)
        if not include_internal:
            query = query.where(sessions.c.internal.is_(False))
        with self.engine.connect() as conn:
            return list(conn.execute(query.order_by(sessions.c.created_at)).scalars())

    # entries -----------------------------------------------------------------------------

    def append_entries(self, partition_key: str, session_id: str, rows: Iterable[EntryRow]) -> int:
        """Append entries in order; entries whose key already exists are skipped (retries)."""
        written = 0
        with self.engine.begin() as conn:
            existing = set(
                conn.execute(
                    select(entries.c.entry_key).where(
                        (entries.c.partition_key == partition_key)
                        & (entries.c.session_id == session_id)
                    )
                ).scalars()
            )
            for row in rows:
                if row.entry_key in existing:
                    continue
                conn.execute(
                    insert(entries).values(**self._entry_values(partition_key, session_id, row))
                )
                existing.add(row.entry_key)
                written += 1
        return written

    @staticmethod
    def _entry_values(partition_key: str, session_id: str, row: EntryRow) -> dict[str, Any]:
        return {
            "partition_key": partition_key,
            "session_id": session_id,
            "entry_key": row.entry_key,
            "run_id": row.run_id,
            "role": row.role,
            "content": row.content,
            "tool_calls": row.tool_calls,
            "tool_call_id": row.tool_call_id,
            "tool_name": row.tool_name,
            "error_kind": row.error_kind,
            "usage": row.usage,
            "created_at": _now(),
        }

    def load_entries(self, partition_key: str, session_id: str) -> list[EntryRow]:
        query = (
            select(entries)
            .where(
                (entries.c.partition_key == partition_key) & (entries.c.session_id == session_id)
            )
            .order_by(entries.c.id)
        )
        with self.engine.connect() as conn:
            return [self._entry_row(row._mapping) for row in conn.execute(query)]

    def get_entry(self, partition_key: str, session_id: str, entry_key: str) -> EntryRow | None:
        query = select(entries).where(
            (entries.c.partition_key == partition_key)
            & (entries.c.session_id == session_id)
            & (entries.c.entry_key == entry_key)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._entry_row(row._mapping)

    @staticmethod
    def _entry_row(mapping: Any) -> EntryRow:
        return EntryRow(
            entry_key=mapping["entry_key"],
            role=mapping["role"],
            content=mapping["content"],
            tool_calls=mapping["tool_calls"],
            tool_call_id=mapping["tool_call_id"],
            tool_name=mapping["tool_name"],
            error_kind=mapping["error_kind"],
            usage=mapping["usage"],
            run_id=mapping["run_id"],
        )

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
        with self.engine.begin() as conn:
            key = (
                (tool_results.c.partition_key == partition_key)
                & (tool_results.c.run_id == run_id)
                & (tool_results.c.tool_call_id == tool_call_id)
            )
            if conn.execute(select(tool_results.c.run_id).where(key)).first() is not None:
                conn.execute(
                    update(tool_results).where(key).values(content=content, error_kind=error_kind)
                )
                return
            conn.execute(
                insert(tool_results).values(
                    partition_key=partition_key,
                    run_id=run_id,
                    tool_call_id=tool_call_id,
                    tool_name=tool_name,
                    content=content,
                    error_kind=error_kind,
                    created_at=_now(),
                )
            )

    def get_tool_results(
        self, partition_key: str, run_id: str, tool_call_ids: Sequence[str]
    ) -> dict[str, str]:
        if not tool_call_ids:
            return {}
        query = select(tool_results.c.tool_call_id, tool_results.c.content).where(
            (tool_results.c.partition_key == partition_key)
            & (tool_results.c.run_id == run_id)
            & (tool_results.c.tool_call_id.in_(list(tool_call_ids)))
        )
        with self.engine.connect() as conn:
            return {row[0]: row[1] for row in conn.execute(query)}

    # events ------------------------------------------------------------------------------

    def append_events(self, ref: RunRef, bodies: Sequence[dict[str, Any]]) -> list[int]:
        """Append events to the root tree's sequence (one sequence per root run)."""
        if not bodies:
            return []
        for _ in range(20):
            try:
                return self._append_events_once(ref, bodies)
            except IntegrityError:
                continue  # a concurrent writer took the same sequence numbers: read again
        raise StoreError(f"could not append events for root '{ref.root_run_id}'")

    def _append_events_once(self, ref: RunRef, bodies: Sequence[dict[str, Any]]) -> list[int]:
        sequences: list[int] = []
        with self.engine.begin() as conn:
            last = conn.execute(
                select(func.max(events.c.sequence)).where(events.c.root_run_id == ref.root_run_id)
            ).scalar_one_or_none()
            sequence = int(last or 0)
            for body in bodies:
                sequence += 1
                envelope = EventRecord(
                    event_id=uuid.uuid4().hex,
                    sequence=sequence,
                    timestamp=_now(),
                    root_run_id=ref.root_run_id,
                    run_id=ref.run_id,
                    parent_run_id=ref.parent_run_id,
                    agent_id=ref.agent_id,
                    depth=ref.depth,
                    event=body,
                )
                conn.execute(
                    insert(events).values(
                        root_run_id=ref.root_run_id,
                        sequence=sequence,
                        body=envelope.model_dump_json(),
                        created_at=envelope.timestamp,
                    )
                )
                sequences.append(sequence)
        return sequences

    def read_events(
        self, root_run_id: str, *, after: int = 0, limit: int = 500
    ) -> list[EventRecord]:
        query = (
            select(events.c.body)
            .where((events.c.root_run_id == root_run_id) & (events.c.sequence > after))
            .order_by(events.c.sequence)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [EventRecord.model_validate_json(body) for body in conn.execute(query).scalars()]


def _aware(value: datetime) -> datetime:
    # SQLite returns naive datetimes even for timezone=True columns; we always store UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
