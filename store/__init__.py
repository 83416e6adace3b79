"""Our own database: transcripts, compactions, tool results, artifacts, run records, memory
points, snapshots, session leases and events.

Only activities and clients touch it; workflows never do I/O. A SQLite file (in the data
directory) by default, PostgreSQL (psycopg) when configured. Tables are in `store.schema`,
created and changed by Alembic migrations (`store.migrate`) that `Store.open` applies.
"""

from store.database import Store
from store.engine import default_database_url
from store.errors import SessionBusyError, StoreError
from store.records import (
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
