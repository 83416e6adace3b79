"""Scrub credentials that earlier versions let into stored configuration snapshots.

A secret pasted where a name belongs, in a URL or under an option the checks missed was
stored in ``otherone_snapshots`` (see `otherone.store.scrub`). This rewrites the bodies that
hold one; versions stay, so runs in flight keep their snapshot. Downgrading restores nothing
(that is the point).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from otherone.store.scrub import scrubbed_snapshot_body

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_snapshots = sa.table(
    "otherone_snapshots", sa.column("version", sa.String), sa.column("body", sa.Text)
)


def upgrade() -> None:
    connection = op.get_bind()
    rows = connection.execute(sa.select(_snapshots.c.version, _snapshots.c.body)).all()
    for version, body in rows:
        try:
            parsed = json.loads(body)
        except ValueError:
            continue  # not ours to judge: the store refuses to read it anyway
        if not isinstance(parsed, dict):
            continue
        scrubbed = scrubbed_snapshot_body(parsed)
        if scrubbed != parsed:
            connection.execute(
                _snapshots.update()
                .where(_snapshots.c.version == version)
                .values(body=json.dumps(scrubbed, separators=(",", ":")))
            )


def downgrade() -> None:
    pass  # a scrubbed secret is not put back
