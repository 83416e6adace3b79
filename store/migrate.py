"""Schema migrations: Alembic scripts shipped in the package, applied when a store opens.

Workers, ``otherone dev`` and ``otherone db upgrade`` all call `upgrade`, so several processes
may start it on the same database at once. Each takes a lock first and reads the schema version
only while holding it: on PostgreSQL a transaction-scoped advisory lock (DDL is transactional
there, so the whole upgrade commits or nothing does); on SQLite the database's write lock,
taken with ``BEGIN IMMEDIATE``. The loser of the race waits, then finds the schema current.

Databases created before migrations existed (by ``metadata.create_all``) hold exactly the
schema of revision `BASELINE_REVISION`; they are stamped with it and upgraded from there.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import OperationalError

from otherone.store.engine import sqlite_locking_engine
from otherone.store.errors import StoreError
from otherone.store.records import MigrationResult

#: Not resolved: `store` is imported inside Temporal's workflow sandbox, where resolve() is not.
MIGRATIONS_DIR = Path(__file__).parent / "migrations"
#: Our own version table, so a database shared with another Alembic project is not confused.
VERSION_TABLE = "otherone_alembic_version"
#: The schema `metadata.create_all` made before Alembic managed it.
BASELINE_REVISION = "0001"
#: Key of the PostgreSQL advisory lock held while migrating (any constant unique to us).
MIGRATION_LOCK_KEY = 0x6F74686572_6F6E65
#: Attempts on SQLite when a concurrent creator still raced us ("table already exists").
SQLITE_ATTEMPTS = 3


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic configuration in code (no ini file to find at run time)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@cache
def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise StoreError(f"no migrations found in {MIGRATIONS_DIR}")
    return head


def current_revision(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def upgrade(engine: Engine) -> MigrationResult:
    """Bring the database to the newest schema under a lock (see the module docstring)."""
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            lock = text("SELECT pg_advisory_xact_lock(:key)")
            connection.execute(lock, {"key": MIGRATION_LOCK_KEY})
            return _upgrade_on(connection)
    return _upgrade_sqlite(engine)


def _upgrade_sqlite(engine: Engine) -> MigrationResult:
    locking = sqlite_locking_engine(engine.url)
    attempt = 1
    try:
        while True:
            try:
                with locking.begin() as connection:
                    return _upgrade_on(connection)
            except OperationalError as error:
                # BEGIN IMMEDIATE serialises migrating processes; a tool that created tables
                # without it can still race us. Once it is done, reading the version again
                # finds its work.
                if "already exists" not in str(error) or attempt >= SQLITE_ATTEMPTS:
                    raise
                attempt += 1
    finally:
        locking.dispose()


def _upgrade_on(connection: Connection) -> MigrationResult:
    before = current_revision(connection)
    head = head_revision()
    if before is None and inspect(connection).has_table("otherone_entries"):
        command.stamp(alembic_config(connection), BASELINE_REVISION)
        before = BASELINE_REVISION
    if before == head:
        return MigrationResult(before, head)
    if before is not None and not _known(before):
        raise StoreError(
            f"the database schema is at revision {before}, newer than this version of otherone "
            f"knows (up to {head}): upgrade otherone"
        )
    command.upgrade(alembic_config(connection), "head")
    return MigrationResult(before, current_revision(connection))


def _known(revision: str) -> bool:
    script = ScriptDirectory.from_config(alembic_config())
    return any(known.revision == revision for known in script.walk_revisions())
