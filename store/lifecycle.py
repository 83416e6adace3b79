"""A run's start and end in the store: the session's writer lease and the run's record.

`prepare_run` takes the lease, records the run as running and announces it; `finish_run`
writes the run's last entries, gives the lease back, records how the run ended (and a child's
result for its caller) and announces the end. Each was three or four transactions, each with
its Core statements built anew (a record's upsert alone cost SQLAlchemy ~1 ms of CPU); now
each is one transaction (`Store.start_run`, `Store.end_run`) of statements prepared once
(`otherone.store.prepared`), which counts most for short runs, where these two steps are a
large share of the store work.

The statements are the Core ones the store used to build per call, with bind parameters in
place of values; the single-purpose `Store` methods (`acquire_session`, `release_session`,
`upsert_run_record`) run them too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnClause,
    ColumnElement,
    Connection,
    Dialect,
    bindparam,
    func,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from otherone.contracts import RunRef
from otherone.runs import RunRecord, RunStatus
from otherone.store.errors import RunIdUsed, SessionBusyError
from otherone.store.events import EntryEvents
from otherone.store.prepared import Prepared
from otherone.store.records import EntryRow, utc
from otherone.store.rows import run_record_values, utc_now
from otherone.store.schema import run_records, sessions

#: A run record's columns (`otherone.store.rows.run_record_values` gives their values).
RECORD_COLUMNS = tuple(column.name for column in run_records.columns)
_RECORD_KEY = ("partition_key", "run_id")
#: Written as SQL literals, not parameters: a prepared statement has a fixed parameter list.
_TERMINAL: list[ColumnClause[Any]] = [
    literal_column(f"'{status.value}'") for status in RunStatus if status.is_terminal
]


class LifecycleStatements:
    """The lease and record statements, prepared for one engine's dialect."""

    def __init__(self, dialect: Dialect) -> None:
        insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        session = (sessions.c.partition_key == bindparam("partition_key")) & (
            sessions.c.session_id == bindparam("session_id")
        )
        # Bind names differ from the columns': an UPDATE keeps those for its SET clause.
        free = (
            sessions.c.lease_run_id.is_(None)
            | (sessions.c.lease_run_id == bindparam("run_id"))
            | sessions.c.lease_until.is_(None)
            | (sessions.c.lease_until <= bindparam("now", type_=sessions.c.lease_until.type))
        )
        self.take_lease = Prepared(
            update(sessions)
            .where(session & free)
            .values(
                lease_run_id=bindparam("run_id"),
                lease_until=bindparam("until", type_=sessions.c.lease_until.type),
                updated_at=bindparam("now", type_=sessions.c.updated_at.type),
            )
            .returning(sessions.c.session_id),  # (rowcount is not reliable on every driver)
            dialect,
        )
        self.create_session = Prepared(
            insert(sessions)
            .values(
                {
                    name: bindparam(name)
                    for name in (
                        "partition_key",
                        "session_id",
                        "internal",
                        "created_at",
                        "updated_at",
                        "lease_run_id",
                        "lease_until",
                    )
                }
            )
            .on_conflict_do_nothing(index_elements=["partition_key", "session_id"])
            .returning(sessions.c.session_id),
            dialect,
        )
        self.lease_holder = Prepared(select(sessions.c.lease_run_id).where(session), dialect)
        self.release = Prepared(
            update(sessions)
            .where(session & (sessions.c.lease_run_id == bindparam("run_id")))
            .values(
                lease_run_id=null(),
                lease_until=null(),
                updated_at=bindparam("now", type_=sessions.c.updated_at.type),
            ),
            dialect,
        )
        upsert = insert(run_records).values({name: bindparam(name) for name in RECORD_COLUMNS})
        excluded = upsert.excluded
        replaced: dict[str, ColumnElement[Any]] = {
            name: excluded[name] for name in RECORD_COLUMNS if name not in _RECORD_KEY
        }
        # A write that does not name the execution (a run's end: the workflow's record) keeps
        # the one its start stored.
        replaced["execution_id"] = func.coalesce(excluded.execution_id, run_records.c.execution_id)
        # Written by the start only (the workflow's record does not know the snapshot).
        for kept in ("snapshot_version", "forked_from"):
            replaced[kept] = func.coalesce(excluded[kept], run_records.c[kept])
        stored, writing = run_records.c.execution_id, excluded.execution_id
        upserted = upsert.on_conflict_do_update(
            index_elements=list(_RECORD_KEY),
            set_=replaced,
            # A terminal record is final: a late non-terminal write does not replace it.
            # A record is its execution's: another Temporal execution of the same workflow id
            # (started again after a termination) never writes over it.
            where=(run_records.c.status.not_in(_TERMINAL) | excluded.status.in_(_TERMINAL))
            & (stored.is_(None) | writing.is_(None) | (stored == writing)),
        )
        self.upsert_record = Prepared(upserted, dialect)
        #: The same, saying whether it wrote (no row back: the run's record is terminal).
        self.start_record = Prepared(upserted.returning(run_records.c.run_id), dialect)


def acquire(
    conn: Connection,
    statements: LifecycleStatements,
    lease: SessionLease,
) -> bool:
    """Take ``lease`` in the caller's transaction (`Store.acquire_session`); raises
    `SessionBusyError` when another live run holds it. True when the session was created
    now."""
    values = {
        "partition_key": lease.partition_key,
        "session_id": lease.session_id,
        "run_id": lease.run_id,
        "until": utc(lease.until),
    }
    # Twice: a session created by a racer between our UPDATE and INSERT may already be free
    # again.
    for _ in range(2):
        now = utc_now()
        if statements.take_lease.rows(conn, {**values, "now": now}):
            return False
        created = {
            "partition_key": lease.partition_key,
            "session_id": lease.session_id,
            "internal": lease.internal,
            "created_at": now,
            "updated_at": now,
            "lease_run_id": lease.run_id,
            "lease_until": values["until"],
        }
        if statements.create_session.rows(conn, created):
            return True
    found = statements.lease_holder.rows(conn, values)
    holder = found[0][0] if found else None
    raise SessionBusyError(lease.session_id, holder or "another run")


def release(
    conn: Connection,
    statements: LifecycleStatements,
    partition_key: str,
    session_id: str,
    run_id: str,
) -> None:
    """Give the lease back in the caller's transaction (`Store.release_session`)."""
    values = {"partition_key": partition_key, "session_id": session_id, "run_id": run_id}
    statements.release.rows(conn, {**values, "now": utc_now()})


def start_record(conn: Connection, statements: LifecycleStatements, record: RunRecord) -> None:
    """``record`` of a run that starts, in the caller's transaction; `RunIdUsed` when the run
    id's record holds an end or is another Temporal execution's (the transaction then writes
    nothing)."""
    if not statements.start_record.rows(conn, run_record_values(record)):
        stored = conn.execute(
            select(run_records.c.status, run_records.c.execution_id).where(
                (run_records.c.partition_key == record.partition_key)
                & (run_records.c.run_id == record.run_id)
            )
        ).one()
        raise RunIdUsed(record.run_id, str(stored.status), stored.execution_id)


def upsert_record(conn: Connection, statements: LifecycleStatements, record: RunRecord) -> None:
    """Insert or replace ``record`` in the caller's transaction (`Store.upsert_run_record`)."""
    statements.upsert_record.rows(conn, run_record_values(record))


@dataclass(frozen=True)
class SessionLease:
    """A run's writer lease on its session, until ``until``."""

    partition_key: str
    session_id: str
    run_id: str
    until: datetime
    #: Whether the session is a child run's own (created for it, not listed by default).
    internal: bool = False


@dataclass(frozen=True)
class CallerResult:
    """A child run's result, stored as its caller's result of the call that started it (the
    caller's model reads it by reference: `Store.put_tool_result`)."""

    caller_run_id: str
    call_id: str
    tool_name: str
    content: str


@dataclass(frozen=True)
class EndStored:
    """What `Store.end_run` did: the entries it wrote now, and the run's ``earlier_end`` when
    another end of the run was stored before (then kept: a run ends once)."""

    entries: int
    earlier_end: RunRecord | None = None


@dataclass(frozen=True)
class RunEnd:
    """What `Store.end_run` writes in one transaction, in this order: the events decided
    before the end (``events_before``); the run's last entries (``pending_rows`` given the
    stored results of ``tool_call_ids``) with the events ``entry_events`` gives for those
    written now; the session's lease given back (``release_session``); the run's ``record``;
    a child's result for its caller (``call_result``); then ``events_after`` (the run's end).

    A run ends once: when its record already holds a different end (stored by an earlier
    finish whose workflow task then failed: a cancellation or a message arrived meanwhile and
    the workflow, run again, took another path), only the entries are written; that end is
    kept and returned (`EndStored.earlier_end`)."""

    ref: RunRef
    tool_call_ids: Sequence[str] = ()
    pending_rows: Callable[[Mapping[str, str]], Sequence[EntryRow]] = field(
        default=lambda _stored: ()
    )
    entry_events: EntryEvents | None = None
    release_session: bool = False
    record: RunRecord | None = None
    call_result: CallerResult | None = None
    events_before: Sequence[dict[str, Any]] = field(default_factory=list)
    events_after: Sequence[dict[str, Any]] = field(default_factory=list)
