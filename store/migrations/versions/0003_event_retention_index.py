"""An index for event retention: the newest event of each root tree, without a table scan.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # `Store.prune_events` groups by root and takes max(created_at) every hour on every worker.
    op.create_index(
        "ix_otherone_events_root_created", "otherone_events", ["root_run_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_otherone_events_root_created", table_name="otherone_events")
