"""Run records name the Temporal execution they are of, so a later execution of a run's id
(started again after a termination) never writes over them.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: no row is rewritten. Records written before, and by a previous
    # release's workers, name no execution (their id is refused again only once they hold an
    # end, as before).
    op.add_column("otherone_run_records", sa.Column("execution_id", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("otherone_run_records", "execution_id")
