"""Capacity shared by the fleet: permit scopes and their holders (`otherone.store.capacity`).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # New tables: workers of the previous release never read or write them (their model calls
    # take no fleet permit, as before).
    op.create_table(
        "otherone_capacity_scopes",
        sa.Column("scope", sa.String(400), nullable=False),
        sa.Column("paused_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decisions", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("scope", name="pk_otherone_capacity_scopes"),
    )
    op.create_table(
        "otherone_capacity_holders",
        sa.Column("scope", sa.String(400), nullable=False),
        sa.Column("holder", sa.String(332), nullable=False),
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("workflow_id", sa.String(300), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("scope", "holder", name="pk_otherone_capacity_holders"),
    )


def downgrade() -> None:
    op.drop_table("otherone_capacity_holders")
    op.drop_table("otherone_capacity_scopes")
