"""The statements of a turn's three store calls (`Store.turn_context`, the model turn's end,
the tool call's end), each prepared once per engine (`otherone.store.prepared`).

They are the Core statements the store used to build on every call, with bind parameters in
place of values; one change of form: a retried tool result's upsert sets the columns from
``excluded`` (the proposed row) instead of repeating the values as parameters — the same update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Dialect, Select, bindparam, func, select, text, true, union_all
from sqlalchemy.dialects import postgresql, sqlite

from otherone.store.prepared import Prepared
from otherone.store.schema import compactions, entries, events, session_forks, tool_results

#: The entry columns hot reads select, in this order (`entry_from_values` reads them so).
ENTRY_COLUMNS = (
    entries.c.id,
    entries.c.entry_key,
    entries.c.role,
    entries.c.content,
    entries.c.tool_calls,
    entries.c.tool_call_id,
    entries.c.tool_name,
    entries.c.error_kind,
    entries.c.usage,
    entries.c.run_id,
    entries.c.tokens,
    entries.c.meta,
    entries.c.created_at,
)
#: Columns of an entry insert (`otherone.store.rows.entry_values` gives their values).
ENTRY_INSERT_COLUMNS = (
    "partition_key",
    "session_id",
    "entry_key",
    "run_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "error_kind",
    "usage",
    "tokens",
    "meta",
    "created_at",
)
#: Tool-result reads of up to this many ids have a prepared statement (a turn has a few).
MAX_PREPARED_IDS = 32


def _session(table: Any) -> Any:
    return (table.c.partition_key == bindparam("partition_key")) & (
        table.c.session_id == bindparam("session_id")
    )


def session_entries(dialect_name: str, *columns: Any) -> Any:
    """``columns`` of a session's entries after ``after_id`` (bind parameters ``partition_key``,
    ``session_id``, ``after_id``): its own, and those it shares as a fork (`session_forks`:
    the source session's entries up to the fork's cut, read in place). Ids grow in append
    order across sessions, so the shared ones all come before the fork's own in id order.

    Two selects, not one with OR: each is a range of the entries' session index. The shared
    one is driven by the link rows (a session that is not a fork has none: one primary-key
    probe), never by the partition's entries, whatever the planner's statistics say: a
    LATERAL subquery per link on PostgreSQL; on SQLite (no LATERAL) ``IN`` over the links,
    which SQLite turns into index ranges (a plain join let it scan the partition's entries).
    """
    own = select(*columns).where(_session(entries) & (entries.c.id > bindparam("after_id")))
    links = _session(session_forks)
    after = entries.c.id > bindparam("after_id")
    if dialect_name == "postgresql":
        per_link = (
            select(*columns)
            .where(
                (entries.c.partition_key == session_forks.c.partition_key)
                & (entries.c.session_id == session_forks.c.source_session_id)
                & after
                & (entries.c.id <= session_forks.c.up_to_entry_id)
            )
            .lateral("shared")
        )
        shared = select(*per_link.c).select_from(session_forks.join(per_link, true())).where(links)
        return union_all(shared, own)
    sources = select(session_forks.c.source_session_id).where(links)
    cut = (
        select(session_forks.c.up_to_entry_id)
        .where(links & (session_forks.c.source_session_id == entries.c.session_id))
        .scalar_subquery()
    )
    shared = select(*columns).where(
        (entries.c.partition_key == bindparam("partition_key"))
        & entries.c.session_id.in_(sources)
        & after
        & (entries.c.id <= cut)
    )
    return union_all(shared, own)


class TurnStatements:
    """The prepared statements, for one engine's dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        self.insert_entry = Prepared(
            insert(entries)
            .values({name: bindparam(name) for name in ENTRY_INSERT_COLUMNS})
            .on_conflict_do_nothing(index_elements=["partition_key", "session_id", "entry_key"])
            # RETURNING, not rowcount: psycopg reports -1 for an INSERT that returns the id.
            .returning(entries.c.id),
            dialect,
        )
        self.entry_by_key = Prepared(
            select(*ENTRY_COLUMNS).where(
                _session(entries) & (entries.c.entry_key == bindparam("entry_key"))
            ),
            dialect,
        )
        self.entries_after = Prepared(
            session_entries(dialect.name, *ENTRY_COLUMNS).order_by("id"), dialect
        )
        # What the cached entries of a session are checked against (`ContextCache`): count,
        # sum and max of the ids after the cut, and when the newest cached one was written.
        written_at = (
            select(entries.c.created_at)
            .where(entries.c.id == bindparam("marker_id"))
            .scalar_subquery()
        )
        visible = session_entries(dialect.name, entries.c.id).subquery()
        self.entry_fingerprint = Prepared(
            select(
                func.count(visible.c.id),
                func.coalesce(func.sum(visible.c.id), 0),
                func.coalesce(func.max(visible.c.id), 0),
                written_at,
            ),
            dialect,
        )
        self.latest_compaction = Prepared(
            select(compactions)
            .where(_session(compactions))
            .order_by(compactions.c.id.desc())
            .limit(1),
            dialect,
        )
        upsert = insert(tool_results).values(
            {
                name: bindparam(name)
                for name in (
                    "partition_key",
                    "run_id",
                    "tool_call_id",
                    "tool_name",
                    "content",
                    "error_kind",
                    "created_at",
                )
            }
        )
        self.upsert_tool_result = Prepared(
            upsert.on_conflict_do_update(
                index_elements=["partition_key", "run_id", "tool_call_id"],
                set_={
                    "content": upsert.excluded.content,
                    "error_kind": upsert.excluded.error_kind,
                },
            ),
            dialect,
        )
        self.last_sequence = Prepared(
            select(func.max(events.c.sequence)).where(
                events.c.root_run_id == bindparam("root_run_id")
            ),
            dialect,
        )
        self.insert_event = Prepared(
            events.insert().values(
                {
                    name: bindparam(name)
                    for name in (
                        "partition_key",
                        "root_run_id",
                        "sequence",
                        "body",
                        "created_at",
                        "event_key",
                    )
                }
            ),
            dialect,
        )
        self.event_lock = Prepared(
            text("SELECT pg_advisory_xact_lock(:namespace, hashtext(:root))"), dialect
        )
        self.event_notify = Prepared(text("SELECT pg_notify(:channel, :root)"), dialect)
        self._by_count: dict[tuple[str, int], Prepared] = {}

    def tool_results(self, count: int) -> Prepared:
        """The read of ``count`` tool results (``tool_call_id_0`` ...), prepared once per count
        up to `MAX_PREPARED_IDS`."""
        return self._per_count(
            "tool_results",
            count,
            lambda: select(tool_results.c.tool_call_id, tool_results.c.content).where(
                (tool_results.c.partition_key == bindparam("partition_key"))
                & (tool_results.c.run_id == bindparam("run_id"))
                & tool_results.c.tool_call_id.in_(_numbered("tool_call_id", count))
            ),
        )

    def stored_event_keys(self, count: int) -> Prepared:
        """Which of ``count`` event keys (``event_key_0`` ...) the tree of ``root_run_id``
        holds, prepared once per count up to `MAX_PREPARED_IDS` (a run's start and end ask)."""
        return self._per_count(
            "stored_event_keys",
            count,
            lambda: select(events.c.event_key).where(
                (events.c.root_run_id == bindparam("root_run_id"))
                & events.c.event_key.is_not(None)  # (lets PostgreSQL use the partial index)
                & events.c.event_key.in_(_numbered("event_key", count))
            ),
        )

    def _per_count(self, name: str, count: int, statement: Callable[[], Select[Any]]) -> Prepared:
        """``statement()`` prepared, kept per (name, count) for counts up to
        `MAX_PREPARED_IDS` (larger ones are rare: prepared for the call only)."""
        prepared = self._by_count.get((name, count))
        if prepared is None:
            prepared = Prepared(statement(), self.dialect)
            if count <= MAX_PREPARED_IDS:
                self._by_count[name, count] = prepared  # (a race builds it twice: harmless)
        return prepared


def _numbered(name: str, count: int) -> list[Any]:
    """``count`` bind parameters ``name_0`` ... for an ``IN`` list."""
    return [bindparam(f"{name}_{index}") for index in range(count)]
