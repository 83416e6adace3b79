"""Our own database: transcripts, tool results, snapshots, session leases and events.

Only activities and clients touch it; workflows never do I/O. SQLite (a file in the data
directory) by default, any SQLAlchemy URL otherwise.
"""

from store.database import (
    EntryRow,
    SessionBusyError,
    Store,
    StoreError,
    default_database_url,
)

__all__ = ["EntryRow", "SessionBusyError", "Store", "StoreError", "default_database_url"]
