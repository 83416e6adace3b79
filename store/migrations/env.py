"""Alembic environment of our tables.

The runtime (`otherone.store.migrate`) hands Alembic an open connection, already holding the
migration
lock and inside the transaction the migration must run in; this module only runs the scripts on
it. Developers writing a new migration run Alembic's own command line instead (see
``alembic.ini`` next to this file); the database URL then comes from ``-x url=...`` or
``OTHERONE_DATABASE_URL``.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection

from otherone.store.engine import create_store_engine
from otherone.store.migrate import VERSION_TABLE
from otherone.store.schema import metadata


def _run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things in place: autogenerate batch (copy-and-move) ops.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_from_url() -> None:
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get(
        "OTHERONE_DATABASE_URL"
    )
    if not url:
        raise SystemExit("give the database with -x url=... or OTHERONE_DATABASE_URL")
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            _run_on(connection)
            connection.commit()
    finally:
        engine.dispose()


def _main() -> None:
    connection = context.config.attributes.get("connection")
    if context.is_offline_mode():
        raise SystemExit("offline (--sql) migrations are not supported: run against a database")
    if isinstance(connection, Connection):
        _run_on(connection)
    else:
        _run_from_url()


_main()
