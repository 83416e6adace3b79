"""SQLAlchemy engines for the two databases we support: SQLite files and PostgreSQL.

Why only these two: idempotent writes use ``INSERT ... ON CONFLICT`` and migrations lock with
backend-specific means (a PostgreSQL advisory lock, SQLite's ``BEGIN IMMEDIATE``); both
backends run the same test suite.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import NullPool, Pool, SingletonThreadPool

from otherone.errors import ConfigurationError
from otherone.redaction import redact_keeping_json, remember
from otherone.store.locations import default_database_url as default_database_url

SUPPORTED = "a SQLite file (sqlite:///PATH) or PostgreSQL (postgresql+psycopg://...)"


def parse_url(url: str) -> URL:
    """The URL with psycopg as PostgreSQL driver (``postgresql://`` alone would mean psycopg2).

    Raises `ConfigurationError` for anything but a SQLite file or PostgreSQL.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise ConfigurationError(f"database URL: {error}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigurationError(f"database URL: in-memory SQLite is unsupported; use {SUPPORTED}")
    if backend not in ("sqlite", "postgresql"):
        raise ConfigurationError(f"database URL: '{backend}' is not supported; use {SUPPORTED}")
    return parsed


#: How long `_enable_wal` keeps trying while another connection holds a new file (~10 s).
WAL_ATTEMPTS = 200
WAL_RETRY_SECONDS = 0.05
#: Seconds a PostgreSQL connection attempt may take.
PG_CONNECT_TIMEOUT = 10
#: libpq settings of the store's PostgreSQL connections: the connect timeout, and TCP
#: keepalives and a user timeout, so that a connection to a server that went away without
#: closing it (a failover, dropped packets) fails in about a minute instead of blocking a
#: worker thread or an API request for the kernel's ~15 minutes.
PG_CONNECT_ARGS = {
    "connect_timeout": PG_CONNECT_TIMEOUT,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,  # milliseconds
}


def create_store_engine(url: str | URL) -> Engine:
    """The engine the store uses for everything but migrations."""
    parsed = parse_url(url) if isinstance(url, str) else url
    remember(parsed.password if isinstance(parsed.password, str) else None)
    if parsed.get_backend_name() == "postgresql":
        # A database that does not answer (failover, dropped packets) fails a connect in
        # seconds instead of hanging a worker thread; activities then retry (`_io`).
        return redacting(create_engine(parsed, pool_pre_ping=True, connect_args=PG_CONNECT_ARGS))
    _make_parent_dir(parsed)
    engine = create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
    event.listen(engine, "connect", _sqlite_pragmas)
    return redacting(engine)


def redacting(engine: Engine) -> Engine:
    """``engine``, whose statements never write a piece of a secret this process resolved
    (`otherone.redaction`): the last line under every table (events, transcript, records,
    snapshots), whichever code path wrote the text."""
    event.listen(engine, "before_cursor_execute", _redacted_statement, retval=True)
    return engine


def _redacted_statement(
    connection: Any,
    cursor: Any,
    statement: str,
    parameters: Any,
    context: Any,
    executemany: bool,
) -> tuple[str, Any]:
    if executemany and isinstance(parameters, list):
        return statement, [_redacted_parameters(each) for each in parameters]
    return statement, _redacted_parameters(parameters)


def _redacted_parameters(parameters: Any) -> Any:
    if isinstance(parameters, dict):
        return {key: _redacted_value(value) for key, value in parameters.items()}
    if isinstance(parameters, tuple | list):
        return type(parameters)(_redacted_value(value) for value in parameters)
    return parameters


def _redacted_value(value: Any) -> Any:
    return redact_keeping_json(value) if isinstance(value, str) else value


def sqlite_no_wait_engine(url: URL) -> Engine:
    """One SQLite connection per thread that never waits: a statement that needs a lock another
    connection holds fails at once (`is_sqlite_busy`) instead of waiting up to the busy
    timeout, and committing never checkpoints the WAL (``wal_autocheckpoint=0``: the caller
    checkpoints elsewhere). So a call made with it takes as long as its own work, which is what
    a call made on an event loop needs (`StoreBase.call_without_waiting`)."""
    # Closed by `Engine.dispose` from whichever thread closes the store.
    return _no_wait_engine(url, SingletonThreadPool)


def sqlite_held_engine(url: URL) -> Engine:
    """`sqlite_no_wait_engine`'s connections, unpooled: each ``connect`` opens one, for a
    thread to keep (`StoreBase._transaction`: checking a connection out of a pool and back in
    for every transaction costs more than the transaction's own statements, profiled ~0.1 ms
    on a busy worker). Their owner closes them."""
    return _no_wait_engine(url, NullPool)


def _no_wait_engine(url: URL, poolclass: type[Pool]) -> Engine:
    _make_parent_dir(url)
    engine = create_engine(
        url, poolclass=poolclass, connect_args={"check_same_thread": False, "timeout": 0}
    )
    event.listen(engine, "connect", _no_wait_pragmas)
    return redacting(engine)


def is_sqlite_busy(error: BaseException) -> bool:
    """Whether ``error`` is SQLite's "database is locked" (another connection holds a lock
    the statement needs); nothing was written, the same call may be made again."""
    cause = error.orig if isinstance(error, DBAPIError) else error
    if not isinstance(cause, sqlite3.OperationalError):
        return False
    # The extended codes (BUSY_SNAPSHOT, BUSY_RECOVERY...) carry the primary one in the low byte.
    primary = getattr(cause, "sqlite_errorcode", 0) & 0xFF
    return primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def sqlite_locking_engine(url: URL) -> Engine:
    """A one-connection SQLite engine whose transactions start with ``BEGIN IMMEDIATE``.

    Python's sqlite3 module runs DDL outside transactions and starts them lazily; for a
    migration we want the database's write lock *before* reading the schema version, so a
    second process opening the same file waits and then finds the schema current.
    """
    _make_parent_dir(url)
    engine = create_engine(url, poolclass=NullPool, connect_args={"timeout": 30})
    event.listen(engine, "connect", _sqlite_autocommit_driver)
    event.listen(engine, "begin", _begin_immediate)
    return redacting(engine)


def _make_parent_dir(url: URL) -> None:
    if not url.database:
        return
    parent = Path(url.database).expanduser().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # read-only, a file in the way, no permission: not a traceback
        raise ConfigurationError(
            f"cannot create the store's directory {parent}: {error.strerror or error} "
            "(check --data-dir / OTHERONE_DATA_DIR or OTHERONE_DATABASE_URL)",
            field="database_url",
        ) from None


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the client read events while workers write; busy_timeout makes concurrent
    # writers wait instead of failing with "database is locked".
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")
    _enable_wal(cursor)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _no_wait_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # The journal mode is the file's (the store's own engine set WAL when it first connected);
    # setting it here could wait for the file, which is what this connection must not do.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=0")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA wal_autocheckpoint=0")
    cursor.close()


def _enable_wal(cursor: Any) -> None:
    """Switch to WAL. Changing the journal mode needs the file to itself and SQLite reports
    "database is locked" at once (no busy handler) while another connection is opening a new
    file, e.g. processes starting together: try again for a while."""
    for attempt in range(WAL_ATTEMPTS):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or attempt == WAL_ATTEMPTS - 1:
                raise
            time.sleep(WAL_RETRY_SECONDS)


def _sqlite_autocommit_driver(dbapi_connection: Any, record: Any) -> None:
    _sqlite_pragmas(dbapi_connection, record)
    dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (`_begin_immediate`)


def _begin_immediate(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")
