"""An index for the reconciler's query of open run records, by status and time written.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Read by every worker's reconciler pass (`Store.open_run_records`): records with a live
    # status written before a cutoff, oldest first. Without it each pass reads the whole table,
    # most of it runs that ended long ago. Built by reading the table once (on PostgreSQL it
    # blocks record writes while it builds: docs/operations.md).
    op.create_index(
        "ix_otherone_run_records_open", "otherone_run_records", ["status", "updated_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_otherone_run_records_open", table_name="otherone_run_records")
