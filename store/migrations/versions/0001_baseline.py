"""Baseline: the tables `metadata.create_all` made before migrations existed.

Databases created then hold exactly this schema; `otherone.store.migrate` stamps them with this
revision
instead of running it.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "otherone_snapshots",
        sa.Column("version", sa.String(64), primary_key=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "otherone_sessions",
        sa.Column("partition_key", sa.String(128), primary_key=True),
        sa.Column("session_id", sa.String(256), primary_key=True),
        sa.Column("internal", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_run_id", sa.String(300), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
    )
    _create_entries()
    op.create_table(
        "otherone_tool_results",
        sa.Column("partition_key", sa.String(128), primary_key=True),
        sa.Column("run_id", sa.String(300), primary_key=True),
        sa.Column("tool_call_id", sa.String(256), primary_key=True),
        sa.Column("tool_name", sa.String(128), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("error_kind", sa.String(32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "otherone_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("root_run_id", sa.String(300), nullable=False),
        sa.Column("sequence", sa.Integer, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("root_run_id", "sequence", name="uq_event_sequence"),
    )


def _create_entries() -> None:
    op.create_table(
        "otherone_entries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(256), nullable=False),
        sa.Column("entry_key", sa.String(512), nullable=False),
        sa.Column("run_id", sa.String(300), nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("tool_calls", sa.JSON, nullable=True),
        sa.Column("tool_call_id", sa.String(256), nullable=True),
        sa.Column("tool_name", sa.String(128), nullable=True),
        sa.Column("error_kind", sa.String(32), nullable=True),
        sa.Column("usage", sa.JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("partition_key", "session_id", "entry_key", name="uq_entry_key"),
    )
    op.create_index("ix_otherone_entries_partition_key", "otherone_entries", ["partition_key"])


def downgrade() -> None:
    for table in (
        "otherone_events",
        "otherone_tool_results",
        "otherone_entries",
        "otherone_sessions",
        "otherone_snapshots",
    ):
        op.drop_table(table)
