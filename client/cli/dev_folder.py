"""What ``otherone dev`` claims and leaves behind: the ports and data folder it checks before it
starts (every conflict in one error), the lock and pid file it holds in that folder while it
runs, and the settings other commands need to reach it (printed, and left in ``dev.env``)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from otherone.client.cli.exits import EXIT_USAGE, CliError
from otherone.client.cli.stores import safe_url
from otherone.worker.devserver import DevServer, port_in_use
from otherone.worker.settings import DEV_ENV_FILE, DEV_PID_FILE, Settings

#: Held (flock) by the `otherone dev` of a data folder for as long as its process lives.
DEV_LOCK_FILE = "dev.lock"


@contextlib.contextmanager
def claim_dev_folder(settings: Settings, data_dir: Path) -> Iterator[None]:
    """Hold ``data_dir`` for this process, its pid in ``dev.pid``, once its ports are free.

    A second `otherone dev` in a folder shared its Temporal database (SQLite "database is
    locked") and removed the first one's `dev.env` on stopping; one started on a busy port
    failed later with the server's log. All the conflicts are one `CliError`, so that the
    user fixes them in one go. The lock goes with the process, however it ends."""
    _make_folder(data_dir)
    lock = (data_dir / DEV_LOCK_FILE).open("a")
    try:
        conflicts = _port_conflicts(settings)
        if not _locked(lock):
            conflicts.append(
                f"another `otherone dev`{_pid_note(data_dir)} uses {data_dir} (stop it, or "
                "give this one its own folder with --data-dir)"
            )
        if conflicts:
            raise CliError(EXIT_USAGE, "; ".join(conflicts))
        with _pid_file(data_dir):
            yield
    finally:
        lock.close()


def _make_folder(data_dir: Path) -> None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CliError(
            EXIT_USAGE,
            f"cannot create {data_dir}: {error.strerror or error} "
            "(check --data-dir / OTHERONE_DATA_DIR)",
        ) from None


def _port_conflicts(settings: Settings) -> list[str]:
    ports = ((settings.temporal_port, "--port"), (settings.ui_port, "--ui-port"))
    return [
        f"port {port} is in use (another `otherone dev`?); choose one with {flag}"
        for port, flag in ports
        if port_in_use(port)
    ]


def _locked(lock: IO[str]) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _pid_note(data_dir: Path) -> str:
    """`` (pid N)`` of the folder's running `otherone dev`, when its pid file says."""
    with contextlib.suppress(OSError, ValueError):
        return f" (pid {int((data_dir / DEV_PID_FILE).read_text())})"
    return ""


@contextlib.contextmanager
def _pid_file(data_dir: Path) -> Iterator[None]:
    """``dev.pid`` in the data folder (not the working one, where it got committed once),
    for `kill $(cat .otherone/dev.pid)`; removed when dev stops."""
    path = data_dir / DEV_PID_FILE
    path.write_text(f"{os.getpid()}\n")
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def dev_settings(server: DevServer, settings: Settings, config_path: Path) -> dict[str, str]:
    """Every setting a command started elsewhere needs to work with this dev server as one in
    its folder does: the server, the task queue its worker polls, the configuration it runs
    (so that `otherone run` of an agent it does not define is refused at once) and the store
    its worker writes (without it, `otherone run` cannot stream: "no event store"). A
    database URL's password is hidden (`safe_url`)."""
    values = {
        "OTHERONE_TEMPORAL_ADDRESS": server.address,
        "OTHERONE_NAMESPACE": settings.namespace,
        "OTHERONE_TASK_QUEUE": settings.task_queue,
        "OTHERONE_UI_URL": server.ui_url,
        "OTHERONE_CONFIG": str(config_path.resolve()),
        **_store_settings(settings),
    }
    if settings.encryption_key_file is not None:
        values["OTHERONE_ENCRYPTION_KEY_FILE"] = str(settings.encryption_key_file.resolve())
    return {name: value for name, value in values.items() if value}


def _store_settings(settings: Settings) -> dict[str, str]:
    if settings.database_url is None:
        return {"OTHERONE_DATA_DIR": str(settings.data_dir.resolve())}
    return {"OTHERONE_DATABASE_URL": safe_url(settings.database_url)}


def settings_hint(values: dict[str, str], settings: Settings) -> str:
    """``values`` as ``NAME=value`` words, and the settings that cannot be shown by name."""
    words = " ".join(f"{name}={value}" for name, value in values.items())
    if settings.encryption_keys is not None:
        words += " (and this one's OTHERONE_ENCRYPTION_KEYS)"
    return words


def write_dev_env(data_dir: Path, values: dict[str, str], settings: Settings) -> Path:
    """Leave ``values`` where `Settings` of commands started in this folder read them. A
    database URL with a password is left out (`dev_settings` hid it): commands in the folder
    read it where this one did (environment, .env), and a hidden password would fail them."""
    secret = settings.database_url is not None and _has_password(settings.database_url)
    lines = [
        f"{name}={value}\n"
        for name, value in values.items()
        if not (secret and name == "OTHERONE_DATABASE_URL")
    ]
    path = data_dir / DEV_ENV_FILE
    path.write_text(
        "# Written by `otherone dev` while it runs (removed when it stops).\n" + "".join(lines)
    )
    return path


def _has_password(url: str) -> bool:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).password is not None
    except ArgumentError:
        return False
