"""Forks (`otherone fork`): a forked session's link to the entries it shares with the session
it was forked from, and on each run's record its configuration snapshot and its lineage.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A new table and nullable columns: workers of the previous release neither read nor
    # write them (their runs' records keep NULL: not known; their sessions are never forks).
    op.create_table(
        "otherone_session_forks",
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(256), nullable=False),
        sa.Column("source_session_id", sa.String(256), nullable=False),
        sa.Column("up_to_entry_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "partition_key", "session_id", "source_session_id", name="pk_otherone_session_forks"
        ),
    )
    records = "otherone_run_records"
    op.add_column(records, sa.Column("snapshot_version", sa.String(64), nullable=True))
    op.add_column(records, sa.Column("forked_from", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("otherone_run_records") as batch:
        batch.drop_column("forked_from")
        batch.drop_column("snapshot_version")
    op.drop_table("otherone_session_forks")
