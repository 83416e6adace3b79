"""A compaction keeps the usage of the model call that wrote its summary.

A model call retried after its turn's compaction was stored (its worker killed in between)
finds the summary written and must still count that call in the run's usage and budgets: the
usage is read back from here.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: no row is rewritten; compactions stored before have no usage
    # (their calls were counted when they were made), and a previous release's workers, which
    # do not know the column, keep inserting without it.
    op.add_column("otherone_compactions", sa.Column("usage", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("otherone_compactions", "usage")
