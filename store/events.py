"""Event storage: each root run tree's gap-free event sequence (``otherone_events``).

The events of a tree (a root run and its sub-runs) share one sequence, numbered from 1, so one
cursor follows the whole tree. An append reads the tree's last sequence number and writes the
next ones, in the writer's transaction: PostgreSQL serialises a tree's appenders with an advisory
lock held until commit (take it last in a transaction, so other appenders wait for the insert
only) and tells `EVENT_CHANNEL` the root at commit; SQLite's single writer serialises them
anyway. A unique (root, sequence) constraint backs both: a writer that still meets numbers
another took runs its whole transaction again (`in_event_transaction`).

`otherone.store.database.Store` is the API (`append_events`, `read_events`, `prune_events`, and
the writes that store events with their entries or tool results); this module does the work.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic_core import PydanticSerializationError, to_json
from sqlalchemy import Connection, delete, func, or_, select
from sqlalchemy.exc import IntegrityError

from otherone.contracts import EventRecord, RunRef
from otherone.runs import RunStatus
from otherone.store.errors import StoreError
from otherone.store.records import EVENT_KEY
from otherone.store.schema import events, run_records
from otherone.store.statements import TurnStatements

#: Namespace of the PostgreSQL advisory locks that serialise event appends per root run.
EVENT_LOCK_NAMESPACE = 0x6F7465
#: Attempts to append events when a concurrent writer took the same sequence numbers.
EVENT_APPEND_ATTEMPTS = 20
#: PostgreSQL channel told the root run id of every event append, at commit (LISTEN to follow
#: trees without polling: `otherone.api.notify`).
EVENT_CHANNEL = "otherone_events"

#: The largest event sequence a database holds (a signed 64-bit integer column): reading after
#: it finds nothing, and no driver takes a larger number as a parameter.
MAX_EVENT_SEQUENCE = 2**63 - 1
#: Values `read_events_mentioning` asks about in one statement: one LIKE each, ORed, and SQLite
#: refuses an expression deeper than 1000 (a run may end owing events for more calls than that).
MENTIONS_PER_QUERY = 200

#: Statuses of a run that has not ended.
LIVE_STATUSES = tuple(status for status in RunStatus if not status.is_terminal)

_T = TypeVar("_T")


@dataclass(frozen=True)
class EntryEvents:
    """Events that belong to entries, written in the entries' transaction: ``bodies_for``
    gets the keys of the entries written then (not those an earlier attempt wrote, which
    brought their events with them), so each entry's events are stored once."""

    ref: RunRef
    bodies_for: Callable[[Collection[str]], Sequence[dict[str, Any]]]


class _SequenceTaken(Exception):
    """Another writer appended events to the root ``root_run_id`` between our read and our
    insert."""

    def __init__(self, root_run_id: str) -> None:
        super().__init__(root_run_id)
        self.root_run_id = root_run_id


def in_event_transaction(
    transaction: Callable[[], AbstractContextManager[Connection]], work: Callable[[Connection], _T]
) -> _T:
    """``work``'s result, ``work`` run in a ``transaction()`` of its own (`StoreBase._transaction`);
    run whole again (it must be idempotent) when the events it appends (`insert_events`) met
    sequence numbers another writer took, up to `EVENT_APPEND_ATTEMPTS` times. Returns once
    committed."""
    root = ""
    for _ in range(EVENT_APPEND_ATTEMPTS):
        try:
            with transaction() as conn:
                return work(conn)
        except _SequenceTaken as taken:
            root = taken.root_run_id
    raise StoreError(f"could not append events for root '{root}'")


def insert_events(
    conn: Connection, turn: TurnStatements, ref: RunRef, bodies: Sequence[dict[str, Any]]
) -> list[int]:
    """Append ``bodies`` to ``ref``'s tree in the caller's transaction (`in_event_transaction`);
    the sequences written. A refused insert (a sequence number or event key another writer took)
    has the whole transaction tried again; a refusal of the caller's own writes is not."""
    if not bodies:
        return []
    try:
        return _insert_events(conn, turn, ref, bodies)
    except IntegrityError as error:
        raise _SequenceTaken(ref.root_run_id) from error


def insert_entry_events(
    conn: Connection, turn: TurnStatements, events: EntryEvents | None, written: Collection[str]
) -> None:
    """The events ``events`` gives for the entries ``written`` now (`insert_events`)."""
    if events is not None:
        insert_events(conn, turn, events.ref, events.bodies_for(written))


def _insert_events(
    conn: Connection, turn: TurnStatements, ref: RunRef, bodies: Sequence[dict[str, Any]]
) -> list[int]:
    postgres = conn.dialect.name == "postgresql"
    root = ref.root_run_id
    if postgres:
        turn.event_lock.rows(conn, {"namespace": EVENT_LOCK_NAMESPACE, "root": root})
    keyed = _unstored(conn, turn, root, bodies)
    if not keyed:
        return []
    last = turn.last_sequence.rows(conn, {"root_run_id": root})[0][0]
    first = int(last or 0) + 1
    sequences = list(range(first, first + len(keyed)))
    rows: list[dict[str, Any]] = []
    for sequence, (key, body) in zip(sequences, keyed, strict=True):
        timestamp = datetime.now(UTC)
        rows.append(
            {
                "partition_key": ref.partition_key,
                "root_run_id": root,
                "sequence": sequence,
                "body": envelope_json(ref, sequence, timestamp, body),
                "created_at": timestamp,
                "event_key": key,
            }
        )
    turn.insert_event.run_many(conn, rows)  # one executemany, not a statement per event
    if postgres:
        # Delivered when (and only if) the transaction commits, after the rows are visible.
        turn.event_notify.rows(conn, {"channel": EVENT_CHANNEL, "root": root})
    return sequences


def _unstored(
    conn: Connection, turn: TurnStatements, root_run_id: str, bodies: Sequence[dict[str, Any]]
) -> list[tuple[str | None, dict[str, Any]]]:
    """``bodies`` with their `EVENT_KEY` taken off (key, body), less the keyed ones the tree
    already has (or that came earlier in ``bodies``). Read in the appending transaction: a
    writer racing us with the same key takes the same sequence numbers, or meets the unique
    key index, and one of us reads again (`insert_events`)."""
    keys = [str(body[EVENT_KEY]) for body in bodies if EVENT_KEY in body]
    if not keys:
        return [(None, body) for body in bodies]
    values = {"root_run_id": root_run_id}
    values.update((f"event_key_{index}", key) for index, key in enumerate(keys))
    stored = {row[0] for row in turn.stored_event_keys(len(keys)).rows(conn, values)}
    kept: list[tuple[str | None, dict[str, Any]]] = []
    for body in bodies:
        if EVENT_KEY not in body:
            kept.append((None, body))
            continue
        key = str(body[EVENT_KEY])
        if key not in stored:
            stored.add(key)
            kept.append((key, {name: value for name, value in body.items() if name != EVENT_KEY}))
    return kept


def envelope_json(ref: RunRef, sequence: int, timestamp: datetime, body: dict[str, Any]) -> str:
    """The stored JSON of an `EventRecord` (schema version 1) around ``body``: what
    ``EventRecord(...).model_dump_json()`` gives, byte for byte, in less than half the time
    (no model built and validated for each event; a turn writes five). A body that is not
    JSON raises the record's `ValidationError`, naming the field."""
    envelope = {
        "schema_version": 1,
        "event_id": _event_id(),
        "sequence": sequence,
        "timestamp": timestamp,
        "root_run_id": ref.root_run_id,
        "run_id": ref.run_id,
        "parent_run_id": ref.parent_run_id,
        "agent_id": ref.agent_id,
        "depth": ref.depth,
        "event": body,
    }
    try:
        # inf and NaN as null: what the record's serialisation writes (valid JSON for readers).
        return to_json(envelope, inf_nan_mode="null").decode()
    except PydanticSerializationError:
        EventRecord.model_validate(envelope)  # raises, saying which field
        raise


def _event_id() -> str:
    """A random (version 4) UUID's hex, as `uuid.uuid4` makes, from `random` instead of
    `os.urandom`: an event id needs to be unique, not unguessable, and a system call for each
    event was measurable on a busy worker (~2 % of a turn's store time)."""
    return uuid.UUID(int=random.getrandbits(128), version=4).hex


def read_events(
    conn: Connection, root_run_id: str, *, after: int, limit: int, partition_key: str | None
) -> list[EventRecord]:
    """`Store.read_events`."""
    if after >= MAX_EVENT_SEQUENCE:
        return []
    query = select(events.c.body).where(
        (events.c.root_run_id == root_run_id) & (events.c.sequence > after)
    )
    if partition_key is not None:
        query = query.where(events.c.partition_key == partition_key)
    query = query.order_by(events.c.sequence).limit(limit)
    return [EventRecord.model_validate_json(body) for body in conn.execute(query).scalars()]


def read_events_mentioning(
    conn: Connection, root_run_id: str, values: Collection[str]
) -> list[EventRecord]:
    """`Store.read_events_mentioning`."""
    # Each value as the JSON string the stored body holds it as (quotes included, so that
    # `call_1` does not find `call_10`), by the encoder that wrote the bodies (pydantic's);
    # LIKE with its wildcards escaped.
    needles = sorted({to_json(value).decode() for value in values})
    found: dict[int, str] = {}  # by sequence: an event may mention values of two batches
    for start in range(0, len(needles), MENTIONS_PER_QUERY):
        mentions = [
            events.c.body.contains(needle, autoescape=True)
            for needle in needles[start : start + MENTIONS_PER_QUERY]
        ]
        query = select(events.c.sequence, events.c.body).where(
            (events.c.root_run_id == root_run_id) & or_(*mentions)
        )
        found.update((sequence, body) for sequence, body in conn.execute(query))
    return [EventRecord.model_validate_json(found[sequence]) for sequence in sorted(found)]


def prune_events(conn: Connection, older_than: datetime) -> int:
    """`Store.prune_events`."""
    quiet_roots = (
        select(events.c.root_run_id)
        .group_by(events.c.root_run_id)
        .having(func.max(events.c.created_at) < older_than)
    )
    # A root whose record says it still runs keeps its events, however quiet (a run that
    # waits days for a slow tool or a message is still followed by someone's cursor).
    live_roots = select(run_records.c.run_id).where(
        (run_records.c.run_id == run_records.c.root_run_id)
        & run_records.c.status.in_([status.value for status in LIVE_STATUSES])
    )
    result = conn.execute(
        delete(events).where(
            events.c.root_run_id.in_(quiet_roots) & events.c.root_run_id.not_in(live_roots)
        )
    )
    return int(result.rowcount or 0)
