"""A throw-away PostgreSQL database for a benchmark (127.0.0.1:5432, trust auth), dropped after."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextlib.contextmanager
def postgresql_database(prefix: str) -> Iterator[str]:
    """A fresh database named ``<prefix>_<random>``; yields its SQLAlchemy URL."""
    import psycopg  # only benchmarks that use PostgreSQL need the driver

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
