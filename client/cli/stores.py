"""Opening the store a command reads (events, sessions, outputs stored as artifacts)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from otherone.client.cli.exits import EXIT_USAGE, CliError
from otherone.worker.settings import Settings

if TYPE_CHECKING:  # imported when a store is opened: `show` on a run without one needs neither
    from rich.console import Console

    from otherone.store import Store


def open_store(url: str, *, migrate: bool = True) -> Store:
    from sqlalchemy.exc import ArgumentError

    from otherone.store import Store

    try:
        return Store.open(url, migrate=migrate)
    except ArgumentError as error:
        raise CliError(EXIT_USAGE, f"--database-url: {error}") from None


def existing_store(settings: Settings, *, migrate: bool = False) -> Store | None:
    """The store, unless it is a default SQLite file that does not exist (nothing to read)."""
    url = settings.store_url()
    if absent_sqlite_file(url):
        return None
    return open_store(url, migrate=migrate)


def event_store(settings: Settings, err: Console) -> Store | None:
    """The store to stream events from; None when a default SQLite file does not exist."""
    store = existing_store(settings, migrate=True)
    if store is None:
        err.print(
            f"note: no event store at {settings.store_url().removeprefix('sqlite:///')}: the "
            "output is printed when the run ends (give --database-url / --data-dir as the "
            "worker's to stream)",
            style="dim",
        )
    return store


def watch_store(settings: Settings) -> Store:
    """The store to read events from; a default SQLite file that does not exist is an error."""
    url = settings.store_url()
    if absent_sqlite_file(url):
        raise CliError(
            EXIT_USAGE,
            f"no event store at {url.removeprefix('sqlite:///')} "
            "(give --database-url / --data-dir as the worker's)",
        )
    return open_store(url)


def absent_sqlite_file(url: str) -> bool:
    return url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()


def safe_url(url: str) -> str:
    """``url`` with its password hidden, for printing."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url
