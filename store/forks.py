"""The fork part of the store: a forked session shares the entries of the session it was forked
from up to a cut, by reference (`otherone.store.schema.session_forks`), and what a fork's start
needs to read of the original run.

Shared, not copied: the fork's session gets one link row per session it shares from (two or
more for a fork of a fork), and every read of its entries (`session_entries`: a model turn's
context, `load_entries`) takes the source's entries up to the cut in place. Entry ids grow in
append order across sessions, so the shared entries come before the fork's own ones and a
compaction's ``up_to_entry_id`` keeps its meaning. The one row copied is the latest compaction
of the source the cut keeps whole: a summary the fork's context starts from, looked up per
session on every turn (the hot read stays one indexed query).
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from otherone.store.rows import utc_now
from otherone.store.schema import compactions, session_forks
from otherone.store.store_base import StoreBase


class ForkStore(StoreBase):
    """Forked sessions (part of `otherone.store.database.Store`)."""

    def fork_session(
        self, partition_key: str, source_session_id: str, session_id: str, up_to_entry_id: int
    ) -> None:
        """Make ``session_id`` share ``source_session_id``'s transcript up to entry id
        ``up_to_entry_id`` (with what that session itself shares, cut there too). Idempotent:
        a start retried with the same values writes nothing more."""
        with self.engine.begin() as conn:
            links = {source_session_id: up_to_entry_id}
            for source, cut in self._links(conn, partition_key, source_session_id):
                if source != session_id:
                    links[source] = min(cut, up_to_entry_id)
            now = utc_now()
            for source, cut in links.items():
                conn.execute(
                    self._insert(session_forks)
                    .values(
                        partition_key=partition_key,
                        session_id=session_id,
                        source_session_id=source,
                        up_to_entry_id=cut,
                        created_at=now,
                    )
                    .on_conflict_do_nothing()
                )
            self._copy_compaction(
                conn, partition_key, source_session_id, session_id, up_to_entry_id
            )
        self.contexts.discard((partition_key, session_id))

    def session_links(self, partition_key: str, session_id: str) -> dict[str, int]:
        """The sessions ``session_id`` shares entries of, with the cut of each (empty: not a
        fork)."""
        with self.engine.connect() as conn:
            return dict(self._links(conn, partition_key, session_id))

    @staticmethod
    def _links(conn: Connection, partition_key: str, session_id: str) -> list[tuple[str, int]]:
        query = select(session_forks.c.source_session_id, session_forks.c.up_to_entry_id).where(
            (session_forks.c.partition_key == partition_key)
            & (session_forks.c.session_id == session_id)
        )
        return [(row[0], row[1]) for row in conn.execute(query)]

    def _copy_compaction(
        self, conn: Connection, partition_key: str, source: str, session_id: str, cut: int
    ) -> None:
        """The source's latest compaction that summarises entries up to ``cut`` only, as the
        fork's (its key prefixed ``fork:``): the fork's context starts where the original's
        did at that point. Its usage is not copied: the summary's call was counted once."""
        query = (
            select(compactions)
            .where(
                (compactions.c.partition_key == partition_key)
                & (compactions.c.session_id == source)
                & (compactions.c.up_to_entry_id <= cut)
            )
            .order_by(compactions.c.id.desc())
            .limit(1)
        )
        found = conn.execute(query).first()
        if found is None:
            return
        row = found._mapping
        conn.execute(
            self._insert(compactions)
            .values(
                partition_key=partition_key,
                session_id=session_id,
                compaction_key=f"fork:{row['compaction_key']}"[:512],
                summary=row["summary"],
                up_to_entry_id=row["up_to_entry_id"],
                tokens=row["tokens"],
                created_at=utc_now(),
                usage=None,
            )
            .on_conflict_do_nothing(
                index_elements=["partition_key", "session_id", "compaction_key"]
            )
        )
