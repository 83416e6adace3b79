"""Keyed root starts' request fingerprints, kept beyond Temporal's retention; run records found
by run id alone.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A new table: a previous release's clients and workers never read or write it (their keyed
    # starts keep Temporal's retention-bound idempotency only).
    op.create_table(
        "otherone_idempotency_keys",
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(300), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("partition_key", "run_id", name="pk_otherone_idempotency_keys"),
    )
    op.create_index("ix_otherone_run_records_run_id", "otherone_run_records", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_otherone_run_records_run_id", table_name="otherone_run_records")
    op.drop_table("otherone_idempotency_keys")
