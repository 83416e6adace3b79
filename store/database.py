"""SQLAlchemy store (synchronous; activities call it in a thread, or on SQLite a turn's brief
calls on their event loop: `StoreBase.call_without_waiting`).

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
from collections.abc import Collection, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from otherone.config import RuntimeSnapshot
from otherone.contracts import EventRecord, RunRef
from otherone.credentials import snapshot_credential_paths
from otherone.definitions import credentials_refused_message
from otherone.errors import ConfigurationError
from otherone.runs import AgentOutput
from otherone.store.capacity import CapacityStore
from otherone.store.engine import create_store_engine, parse_url
from otherone.store.errors import StoreError, is_outage
from otherone.store.events import (
    in_event_transaction,
    insert_events,
    prune_events,
    read_events,
    read_events_mentioning,
)
from otherone.store.forks import ForkStore
from otherone.store.records import Artifact, MigrationResult
from otherone.store.rows import artifact_from_mapping, tool_result_values, utc_now
from otherone.store.run_store import RunStore
from otherone.store.schema import artifacts, snapshots
from otherone.store.transcript import TranscriptStore


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


class Store(TranscriptStore, RunStore, ForkStore):
    """Database access. Create with `Store.open(url)`, which migrates the schema to the newest.

    The transcript (`otherone.store.transcript`) and the runs (`otherone.store.run_store`) are
    parts of their own; snapshots, artifacts, tool results and events are here."""

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
            if is_outage(error):  # not about migrating: any command opening it says this
                raise StoreError(f"cannot reach the database: {error}") from error
            raise StoreError(f"cannot migrate the database: {error}") from error

    @cached_property
    def capacity(self) -> CapacityStore:
        """Permits shared by the fleet (`otherone.store.capacity`)."""
        return CapacityStore(self._engine)

    def close(self) -> None:
        self._close_no_wait()
        self._engine.dispose()

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
            self._transaction, lambda conn: insert_events(conn, turn, ref, bodies)
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
