"""Count the model calls of unpriced profiles in `otherone_spend` (their cost is unknown, not
0: `otherone usage` says so instead of showing a cost that looks complete).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # With a server default: workers of the previous build insert rows without the column
    # (their unpriced calls count as priced at 0, as before); rows written before are 0 too.
    with op.batch_alter_table("otherone_spend") as batch:
        batch.add_column(
            sa.Column("unpriced_calls", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("otherone_spend") as batch:
        batch.drop_column("unpriced_calls")
