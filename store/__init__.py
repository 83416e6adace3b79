"""Our own database: transcripts, compactions, tool results, artifacts, run records, memory
points, snapshots, session leases and events.

Only activities and clients touch it; workflows never do I/O. A SQLite file (in the data
directory) by default, PostgreSQL (psycopg) when configured. Tables are in `otherone.store.schema`,
created and changed by Alembic migrations (`otherone.store.migrate`) that `Store.open` applies.
"""

from otherone.store.database import Store
from otherone.store.engine import default_database_url
from otherone.store.errors import SessionBusyError, StoreError
from otherone.store.records import (
    Artifact,
    Compaction,
    EntryRow,
    MigrationResult,
    SessionInfo,
    estimate_tokens,
)

__all__ = [
    "Artifact",
    "Compaction",
    "EntryRow",
    "MigrationResult",
    "SessionBusyError",
    "SessionInfo",
    "Store",
    "StoreError",
    "default_database_url",
    "estimate_tokens",
]
