"""Events stored at most once: a key per event of prepare_run and finish_run, unique per tree.

Temporal runs a local activity again when the workflow task that ran it fails (a worker killed
or shut down before the task completed); the key lets such a re-run find its events stored.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYED = sa.text("event_key IS NOT NULL")


def upgrade() -> None:
    # Nullable, no default: adding it rewrites no rows (PostgreSQL and SQLite alike). The index
    # is partial: building it reads the table once, but it holds only keyed events (none yet),
    # so event appends, nearly all unkeyed, do not maintain it.
    op.add_column("otherone_events", sa.Column("event_key", sa.String(64), nullable=True))
    op.create_index(
        "uq_otherone_events_key",
        "otherone_events",
        ["root_run_id", "event_key"],
        unique=True,
        postgresql_where=KEYED,
        sqlite_where=KEYED,
    )


def downgrade() -> None:
    op.drop_index("uq_otherone_events_key", table_name="otherone_events")
    op.drop_column("otherone_events", "event_key")
