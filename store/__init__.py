"""Our own database: transcripts, compactions, tool results, artifacts, run records, memory
points, snapshots, session leases and events.

Only activities and clients touch it; workflows never do I/O. A SQLite file (in the data
directory) by default, PostgreSQL (psycopg) when configured. Tables are in `otherone.store.schema`,
created and changed by Alembic migrations (`otherone.store.migrate`) that `Store.open` applies.

Names are imported on first use: SQLAlchemy is loaded only by what opens a database, not by a
command that only names the default file (`default_database_url`) or catches a store error.
"""

from typing import TYPE_CHECKING

from otherone.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from otherone.store.database import Store
    from otherone.store.errors import SessionBusyError, StoreError
    from otherone.store.locations import default_database_url
    from otherone.store.records import (
        Artifact,
        Compaction,
        EntryRow,
        MigrationResult,
        SessionInfo,
        estimate_tokens,
    )

#: Names served lazily by `__getattr__`: name → module that defines it.
_LAZY_EXPORTS = {
    "Store": "otherone.store.database",
    **dict.fromkeys(("SessionBusyError", "StoreError"), "otherone.store.errors"),
    "default_database_url": "otherone.store.locations",
    **dict.fromkeys(
        (
            "Artifact",
            "Compaction",
            "EntryRow",
            "MigrationResult",
            "SessionInfo",
            "estimate_tokens",
        ),
        "otherone.store.records",
    ),
}

__getattr__ = lazy_exports(__name__, _LAZY_EXPORTS)

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
