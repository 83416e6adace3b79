"""Token counts and metadata on entries, partitioned events; compactions, memory points,
artifacts and run records.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _created_at() -> sa.Column[datetime]:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False)


def upgrade() -> None:
    op.add_column("otherone_entries", sa.Column("tokens", sa.Integer, nullable=True))
    op.add_column("otherone_entries", sa.Column("meta", sa.JSON, nullable=True))
    # Reads are by (partition, session) after an id: one composite index serves them.
    op.drop_index("ix_otherone_entries_partition_key", table_name="otherone_entries")
    op.create_index(
        "ix_otherone_entries_session", "otherone_entries", ["partition_key", "session_id", "id"]
    )
    # Rows written before this revision keep NULL: their partition was never recorded.
    op.add_column("otherone_events", sa.Column("partition_key", sa.String(128), nullable=True))
    _create_compactions()
    _create_memory_points()
    _create_artifacts()
    _create_run_records()


def _create_compactions() -> None:
    op.create_table(
        "otherone_compactions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(256), nullable=False),
        sa.Column("compaction_key", sa.String(512), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("up_to_entry_id", sa.Integer, nullable=False),
        sa.Column("tokens", sa.Integer, nullable=False),
        _created_at(),
        sa.UniqueConstraint(
            "partition_key", "session_id", "compaction_key", name="uq_compaction_key"
        ),
    )


def _create_memory_points() -> None:
    op.create_table(
        "otherone_memory_points",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(300), nullable=False),
        sa.Column("types", sa.String(512), nullable=False),
        sa.Column("storage", sa.Text, nullable=False),
        sa.Column("source_run_id", sa.String(300), nullable=True),
        sa.Column("source_agent_id", sa.String(128), nullable=True),
        sa.Column("source_session_id", sa.String(256), nullable=True),
        sa.Column("active", sa.Boolean, nullable=False, server_default=sa.true()),
        _created_at(),
    )
    op.create_index(
        "ix_otherone_memory_points_scope", "otherone_memory_points", ["partition_key", "scope"]
    )


def _create_artifacts() -> None:
    op.create_table(
        "otherone_artifacts",
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("artifact_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(300), nullable=False),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("media_type", sa.String(128), nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("content", sa.LargeBinary, nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("partition_key", "artifact_id", name="pk_otherone_artifacts"),
    )


def _create_run_records() -> None:
    op.create_table(
        "otherone_run_records",
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(300), nullable=False),
        sa.Column("root_run_id", sa.String(300), nullable=False),
        sa.Column("parent_run_id", sa.String(300), nullable=True),
        sa.Column("agent_call_id", sa.String(256), nullable=True),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("agent_version", sa.Integer, nullable=True),
        sa.Column("session_id", sa.String(256), nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("usage", sa.JSON, nullable=True),
        sa.Column("failure", sa.JSON, nullable=True),
        sa.Column("output", sa.JSON, nullable=True),
        sa.Column("meta", sa.JSON, nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("partition_key", "run_id", name="pk_otherone_run_records"),
    )
    op.create_index(
        "ix_otherone_run_records_root", "otherone_run_records", ["partition_key", "root_run_id"]
    )


def downgrade() -> None:
    for table in (
        "otherone_run_records",
        "otherone_artifacts",
        "otherone_memory_points",
        "otherone_compactions",
    ):
        op.drop_table(table)
    with op.batch_alter_table("otherone_events") as batch:
        batch.drop_column("partition_key")
    op.drop_index("ix_otherone_entries_session", table_name="otherone_entries")
    with op.batch_alter_table("otherone_entries") as batch:
        batch.drop_column("meta")
        batch.drop_column("tokens")
    op.create_index("ix_otherone_entries_partition_key", "otherone_entries", ["partition_key"])
