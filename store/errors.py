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


class RunAlreadyEnded(OtheroneError):
    """A model turn found its run's end already stored, so it wrote nothing and called no model.

    Only one race leads here: a user message arrives while the workflow task that stores a
    completed run's end is open. Temporal refuses that task (a new event came), and the run,
    taken again, sees the message before the answer and goes round once more, although its
    end (record, events, released session) is stored. The turn is refused instead; the run's
    second finish finds the stored end and keeps it, and the message stays in the session for
    the next run there (as any message that arrives while a run ends)."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(
            f"run '{run_id}' had already ended ({status}) when this turn started: the model "
            "is not called; the turn's messages stay in the session, unanswered"
        )
        self.run_id = run_id
        self.status = status


#: `RunStatus` values of a record without an end (not imported: the CLI imports this module).
_OPEN_STATUSES = frozenset(
    {"created", "running", "waiting_for_child", "waiting_for_approval", "sleeping"}
)


class RunIdUsed(OtheroneError):
    """A run started under the id of a run that has ended: another Temporal execution of the
    same workflow id (a second `temporal workflow start` of a closed id, which Temporal's
    default reuse policy allows, also after a termination). A run id is used once: its record,
    events and transcript belong to the run that ended, so nothing is written.

    ``execution_id`` is the earlier execution's (`RunRecord.execution_id`) when the record
    names it; a record still ``running`` is then one whose execution Temporal closed without
    the run storing its end (terminated from outside: only one execution of an id runs at a
    time, and the refused one is running)."""

    def __init__(self, run_id: str, status: str, execution_id: str | None = None) -> None:
        how = status
        if execution_id is not None:
            how = f"{status}, Temporal execution {execution_id}"
            if status in _OPEN_STATUSES:
                how = (
                    f"Temporal execution {execution_id}, terminated or otherwise closed before "
                    "it stored its end"
                )
        super().__init__(
            f"run '{run_id}' has already run and ended ({how}): a run id is used once. "
            "Start a new run (a new id, or an idempotency key of its own); to go on with the "
            "conversation, name the same session"
        )
        self.run_id = run_id
        self.status = status
        self.execution_id = execution_id


class DatabaseLocked(Exception):
    """A call that must not wait met a lock another connection holds; nothing was written
    (`StoreBase.call_without_waiting`). Never leaves the worker: the call is made again in a
    thread, where waiting is fine."""


def is_outage(error: BaseException) -> bool:
    """A database that is down, restarting or briefly busy — worth waiting for — as opposed to
    a statement it refuses (invalid data, a violated constraint, a bug), which it would refuse
    again however long we waited."""
    import sqlalchemy.exc  # here: the CLI imports this module's errors, not SQLAlchemy

    if isinstance(error, sqlalchemy.exc.DBAPIError):
        return (
            error.connection_invalidated
            or isinstance(error, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError)
            or _outage_state(getattr(error.orig, "sqlstate", None))
        )
    return isinstance(
        error, sqlalchemy.exc.DisconnectionError | sqlalchemy.exc.TimeoutError | OSError
    )


#: PostgreSQL conditions of a server that will take the statement once it is itself again:
#: a read-only transaction (a hot standby, or a primary demoted in a failover behind one
#: address: psycopg raises these as `InternalError`, not `OperationalError`), a shutdown or a
#: start in progress, too many connections.
OUTAGE_SQLSTATES = frozenset({"25006", "53300", "57P01", "57P02", "57P03"})


def _outage_state(sqlstate: object) -> bool:
    """Whether a PostgreSQL SQLSTATE says the server is unavailable (class 08: connection)."""
    return isinstance(sqlstate, str) and (sqlstate in OUTAGE_SQLSTATES or sqlstate[:2] == "08")


def describe_store_error(error: BaseException) -> str:
    """The driver's error class and its primary message, without the statement or parameters
    SQLAlchemy adds to its own messages (they hold user data)."""
    import sqlalchemy.exc

    cause = error.orig if isinstance(error, sqlalchemy.exc.DBAPIError) else error
    primary = getattr(getattr(cause, "diag", None), "message_primary", None)
    text = primary or (str(cause).strip().splitlines() or [""])[0]
    return f"{type(cause).__name__}: {text[:200]}" if text else type(cause).__name__
