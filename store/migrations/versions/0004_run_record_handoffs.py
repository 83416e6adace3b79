"""Run records keep the run's handoffs (`agent.handoff`): who handed the conversation to whom.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: records written before handoffs existed have none.
    op.add_column("otherone_run_records", sa.Column("handoffs", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("otherone_run_records", "handoffs")
