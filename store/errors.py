"""Errors of the store, mapped to stable failure codes (activities surface them as such)."""

from __future__ import annotations

from otherone.errors import FailureCode, OtheroneError


class StoreError(OtheroneError):
    """The database failed; activities surface it as a retryable storage error."""

    code = FailureCode.STORAGE_ERROR


class SessionBusyError(OtheroneError):
    """Another live run holds the session's writer lease."""

    code = FailureCode.SESSION_BUSY

    def __init__(self, session_id: str, holder: str) -> None:
        super().__init__(f"session '{session_id}' is in use by run '{holder}'")
        self.session_id = session_id
        self.holder = holder


class DatabaseLocked(Exception):
    """A call that must not wait met a lock another connection holds; nothing was written
    (`StoreBase.call_without_waiting`). Never leaves the worker: the call is made again in a
    thread, where waiting is fine."""
