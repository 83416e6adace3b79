"""What each partition spent per day, agent and model profile, and its spend limits
(`otherone.store.spending`).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # New tables: workers of the previous release never read or write them (their calls are
    # not counted against a limit, as before).
    op.create_table(
        "otherone_spend",
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("model_profile_id", sa.String(128), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_picos", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "partition_key", "day", "agent_id", "model_profile_id", name="pk_otherone_spend"
        ),
    )
    op.create_table(
        "otherone_spend_limits",
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("period", sa.String(16), nullable=False),
        sa.Column("limit_picos", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("partition_key", "period", name="pk_otherone_spend_limits"),
    )


def downgrade() -> None:
    op.drop_table("otherone_spend_limits")
    op.drop_table("otherone_spend")
