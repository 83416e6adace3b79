"""Each partition's webhook signing secret (`otherone.store.webhook_secrets`, issue 47).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A new table: workers of the previous release never read it (they send no webhooks).
    op.create_table(
        "otherone_webhook_secrets",
        sa.Column("partition_key", sa.String(128), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("previous_secret", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rotated_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("partition_key", name="pk_otherone_webhook_secrets"),
    )


def downgrade() -> None:
    op.drop_table("otherone_webhook_secrets")
