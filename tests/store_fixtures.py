"""A PostgreSQL server for the store tests: found on 127.0.0.1:5432, or started for the session.

Why: the store must behave the same on SQLite and PostgreSQL, so its suite runs on both, each
test in a fresh database of its own (~50 ms to create). Where to find the server:

- ``OTHERONE_TEST_POSTGRES=<libpq URL>`` (e.g. ``postgresql://postgres@db:5432/postgres``):
  that server only, reached as that user (who must be allowed to create databases);
- ``OTHERONE_TEST_POSTGRES=initdb``: always a throw-away cluster (to test this module);
- unset: 127.0.0.1:5432 as ``postgres``, then as ``root`` (trust auth, as in CI); if nothing
  answers and ``initdb``/``pg_ctl`` exist (on PATH or in ``/usr/lib/postgresql/*/bin``), a
  throw-away cluster in a temporary directory on a free port, stopped when the session ends.
  As root (PostgreSQL refuses to run as root) the cluster runs as the ``postgres`` user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL

from otherone.store import Store
from otherone.worker.devserver import free_port

ENV_VAR = "OTHERONE_TEST_POSTGRES"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5432
DEFAULT_USERS = ("postgres", "root")
CONNECT_TIMEOUT = 3
CLUSTER_START_TIMEOUT = 60


class PostgresUnavailable(Exception):
    """No server could be found or started; the message says what was tried."""


@dataclass(frozen=True)
class PostgresServer:
    """A server we may create databases on, through a kept-open admin connection."""

    host: str
    port: int
    user: str
    password: str | None
    admin_dbname: str

    def connect_admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=self.admin_dbname,
            connect_timeout=CONNECT_TIMEOUT,
            autocommit=True,
        )

    def url(self, dbname: str) -> str:
        """SQLAlchemy URL (psycopg driver) of database ``dbname`` on this server."""
        url = URL.create(
            "postgresql+psycopg",
            username=self.user,
            password=self.password,
            host=self.host,
            port=self.port,
            database=dbname,
        )
        return url.render_as_string(hide_password=False)


class TestDatabases:
    """Creates and drops one database per test on ``server``.

    Migrated databases are copies of a template migrated once per session (``CREATE DATABASE
    ... TEMPLATE``): cloning is as cheap as creating, migrating each time is not.
    """

    __test__ = False  # not a test class, despite its name

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self._admin = server.connect_admin()
        self._template: str | None = None

    @contextlib.contextmanager
    def database(self, *, migrated: bool = False) -> Iterator[str]:
        """A fresh database (its SQLAlchemy URL), empty or at the newest schema; dropped after."""
        name = self._create(self._migrated_template() if migrated else None)
        try:
            yield self.server.url(name)
        finally:
            self._drop(name)

    def _create(self, template: str | None) -> str:
        name = f"otherone_test_{uuid.uuid4().hex[:16]}"
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self._admin.execute(statement)
        return name

    def _drop(self, name: str) -> None:
        # FORCE: a test that leaked a connection must not leave a database behind.
        self._admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def _migrated_template(self) -> str:
        if self._template is None:
            name = self._create(None)
            Store.open(self.server.url(name)).close()  # close: a template must be idle
            self._template = name
        return self._template

    def close(self) -> None:
        if self._template is not None:
            self._drop(self._template)
        self._admin.close()


def _can_create_databases(server: PostgresServer) -> bool:
    try:
        with server.connect_admin() as conn:
            row = conn.execute(
                "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
    except psycopg.Error:
        return False
    return bool(row and row[0])


def find_running_server() -> PostgresServer | None:
    """The server at 127.0.0.1:5432 as the first user that may create databases, if any."""
    for user in DEFAULT_USERS:
        for dbname in ("postgres", user):
            server = PostgresServer(DEFAULT_HOST, DEFAULT_PORT, user, None, dbname)
            if _can_create_databases(server):
                return server
    return None


def server_from_url(url: str) -> PostgresServer:
    params = conninfo_to_dict(url)
    server = PostgresServer(
        host=str(params.get("host") or DEFAULT_HOST),
        port=int(params.get("port") or DEFAULT_PORT),
        user=str(params.get("user") or "postgres"),
        password=None if params.get("password") is None else str(params["password"]),
        admin_dbname=str(params.get("dbname") or "postgres"),
    )
    if not _can_create_databases(server):
        raise PostgresUnavailable(f"{ENV_VAR}={url}: cannot connect or may not create databases")
    return server


def postgres_bindir() -> Path | None:
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    for bindir in reversed(candidates):
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            return bindir
    return None


class ThrowawayCluster:
    """``initdb`` + ``pg_ctl start`` in a temporary directory; `stop` removes everything."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="otherone-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._runner: list[str] = []

    def _runner_prefix(self) -> list[str]:
        """Run PostgreSQL's tools as ``postgres`` when we are root (they refuse root)."""
        if os.geteuid() != 0:
            return []
        runuser = shutil.which("runuser")
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            account = None
        if runuser is None or account is None:
            raise PostgresUnavailable(
                "running as root, and there is no 'postgres' user or runuser to start "
                "initdb/pg_ctl as"
            )
        os.chown(self.root, account.pw_uid, account.pw_gid)
        return [runuser, "-u", "postgres", "--"]

    def _run(self, tool: str, *args: str) -> None:
        command = [*self._runner, str(self.bindir / tool), *args]
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=CLUSTER_START_TIMEOUT, check=False
        )
        if completed.returncode != 0:
            output = (completed.stdout + completed.stderr).strip()
            raise PostgresUnavailable(f"{tool} failed ({completed.returncode}): {output[-2000:]}")

    def start(self) -> PostgresServer:
        self._runner = self._runner_prefix()
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-sync",
        )  # fmt: skip
        self.resume()
        return PostgresServer(DEFAULT_HOST, self.port, "postgres", None, "postgres")

    def resume(self) -> None:
        """Start the server on the cluster's data (again, after `pause`)."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses={DEFAULT_HOST} -c fsync=off "
            "-c full_page_writes=off -c synchronous_commit=off"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options,
            "-w", "-t", str(CLUSTER_START_TIMEOUT), "start",
        )  # fmt: skip

    def pause(self) -> None:
        """Stop the server, keeping its data (a database outage, for fault tests)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def stop(self) -> None:
        with contextlib.suppress(PostgresUnavailable, subprocess.TimeoutExpired):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A usable server for the session (see the module docstring), or `PostgresUnavailable`."""
    setting = os.environ.get(ENV_VAR, "").strip()
    if setting and setting != "initdb":
        yield server_from_url(setting)
        return
    found = None if setting == "initdb" else find_running_server()
    if found is not None:
        yield found
        return
    bindir = postgres_bindir()
    if bindir is None:
        raise PostgresUnavailable(
            f"no PostgreSQL server at {DEFAULT_HOST}:{DEFAULT_PORT} "
            f"(as {' or '.join(DEFAULT_USERS)}) and no initdb/pg_ctl to start one; set "
            f"{ENV_VAR}=postgresql://USER@HOST:PORT/DB"
        )
    cluster = ThrowawayCluster(bindir)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def running_in_ci() -> bool:
    """CI sets ``CI=true``; there, a PostgreSQL test that cannot run is a failure."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
