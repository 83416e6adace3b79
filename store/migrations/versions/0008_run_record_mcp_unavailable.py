"""Run records say which MCP servers granted to the agent offered no tools when it started.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
# "0007" once merged with the branch that adds 0007_scrub_snapshot_credentials.py.
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: no row is rewritten (records written before name no servers), and a
    # previous release's workers, which do not know the column, keep writing without it.
    op.add_column("otherone_run_records", sa.Column("mcp_unavailable", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("otherone_run_records", "mcp_unavailable")
