"""Our programs in processes of their own, for tests: ``otherone`` commands run to completion
(`otherone`), and long-running ones (workers, ``otherone dev``, a streaming ``run``) started in
the background (`BackgroundProcess`, `start_worker`), with their output collected as it comes.

Every process gets `cli_env`-style settings: this process's environment without the developer's
own ``OTHERONE_*`` variables, the repository importable, and the settings the test names.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient
from otherone.examples import EXAMPLE_CONFIG
from otherone.store import Store
from tests.harness import wait_until

REPO_ROOT = Path(__file__).resolve().parent.parent
#: What ``otherone worker`` prints (stderr) once it polls.
WORKER_BANNER = "worker on task queue"


def address_of(env: WorkflowEnvironment) -> str:
    """The address of ``env``'s Temporal server, as processes are given it."""
    return env.client.service_client.config.target_host


@dataclass
class SharedStore:
    """What a test shares with the worker processes it starts (and kills): the dev server's
    address, a SQLite store's URL, that store opened in the test and a client reading it."""

    address: str
    url: str
    store: Store
    agents: AgentClient


@contextlib.contextmanager
def shared_store(
    env: WorkflowEnvironment, client: Client, task_queue: str, workdir: Path
) -> Iterator[SharedStore]:
    """A `SharedStore` in ``workdir`` (the store closed when the block ends)."""
    url = f"sqlite:///{workdir / 'store.db'}"
    store = Store.open(url)
    try:
        agents = AgentClient(client, task_queue=task_queue, store=store)
        yield SharedStore(address_of(env), url, store, agents)
    finally:
        store.close()


def cli_env(
    address: str,
    task_queue: str | None,
    tmp_path: Path,
    *,
    config: Path | None = EXAMPLE_CONFIG,
    database: str = "store.db",
    **extra: str,
) -> dict[str, str]:
    """Settings of an ``otherone`` process: the Temporal server at ``address``, ``task_queue``
    (unless None), a SQLite store ``database`` and the data dir in ``tmp_path``, ``config``
    (None: no OTHERONE_CONFIG, so the default `otherone.toml` of the process's folder, if any);
    ``extra`` adds or overrides variables."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTHERONE_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        OTHERONE_TEMPORAL_ADDRESS=address,
        OTHERONE_DATABASE_URL=f"sqlite:///{tmp_path / database}",
        OTHERONE_DATA_DIR=str(tmp_path / "data"),
    )
    if config is not None:
        env["OTHERONE_CONFIG"] = str(config)
    if task_queue is not None:
        env["OTHERONE_TASK_QUEUE"] = task_queue
    env.update(extra)
    return env


def cli_command(*args: str) -> tuple[str, ...]:
    """``python -m otherone.client.cli ARGS`` (the ``otherone`` command of this interpreter)."""
    return (sys.executable, "-m", "otherone.client.cli", *args)


@dataclass
class Completed:
    code: int
    stdout: str
    stderr: str
    elapsed: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def describe(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


async def otherone(
    *args: str, env: dict[str, str], limit: float = 60.0, cwd: Path = REPO_ROOT
) -> Completed:
    """Run ``otherone ARGS`` to completion (killed after ``limit`` seconds)."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *cli_command(*args),
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), limit)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"otherone {' '.join(args)} did not finish in {limit} s") from None
    assert process.returncode is not None
    return Completed(
        process.returncode,
        stdout.decode(),
        stderr.decode(),
        time.monotonic() - started,
    )


@dataclass
class BackgroundProcess:
    """A running process whose output lines (stdout and stderr together) are collected as they
    come, so a chatty process never blocks on a full pipe and a failure can show its output."""

    process: asyncio.subprocess.Process
    name: str
    lines: list[str] = field(default_factory=list)
    pump: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls, *command: str, env: dict[str, str], cwd: Path = REPO_ROOT, name: str | None = None
    ) -> BackgroundProcess:
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        started = cls(process, name or " ".join(command[1:4]))
        started.pump = asyncio.create_task(started._read())
        return started

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def saw(self, needle: str, *, whole_line: bool = False) -> bool:
        if whole_line:
            return any(needle == line.strip() for line in self.lines)
        return any(needle in line for line in self.lines)

    async def wait_for(self, needle: str, within: float = 60, *, whole_line: bool = False) -> None:
        """Until a line contains ``needle`` (or is it); fails with the output if the process
        exits first or ``within`` seconds pass."""

        def seen() -> bool:
            if self.saw(needle, whole_line=whole_line):
                return True
            exited = self.process.returncode is not None
            if exited and (self.pump is None or self.pump.done()):  # and all its output read
                raise AssertionError(f"{self.name} exited ({self.process.returncode})")
            return False

        try:
            await wait_until(seen, within=within, message=repr(needle))
        except AssertionError as error:
            raise AssertionError(f"{error}\n--- {self.name} output\n{self.output}") from None

    def send_signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    async def exit_code(self, within: float = 60) -> int:
        """The exit code, once the process has exited and its output is read."""
        try:
            await asyncio.wait_for(self.process.wait(), within)
        except TimeoutError:
            raise AssertionError(
                f"{self.name} still running after {within} s:\n{self.output}"
            ) from None
        if self.pump is not None:
            await self.pump
        assert self.process.returncode is not None
        return self.process.returncode

    async def stop(self, within: float = 45, signum: signal.Signals = signal.SIGTERM) -> None:
        """Ask the process to stop (``signum``); kill it if it is still running after
        ``within`` seconds. For clean-ups: never fails."""
        if self.process.returncode is None:
            self.process.send_signal(signum)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), within)
        await self.kill()

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pump


async def start_worker(
    env: dict[str, str], *args: str, within: float = 60, name: str = "worker"
) -> BackgroundProcess:
    """``otherone worker ARGS``, once it polls (its banner printed)."""
    worker = await BackgroundProcess.start(*cli_command("worker", *args), env=env, name=name)
    try:
        await worker.wait_for(WORKER_BANNER, within)
    except BaseException:
        await worker.kill()
        raise
    return worker


@contextlib.asynccontextmanager
async def worker_module(
    module: str,
    address: str,
    task_queue: str,
    store_url: str,
    workdir: Path,
    **environ: str,
) -> AsyncIterator[BackgroundProcess]:
    """A test worker module (``python -m MODULE ADDRESS QUEUE STORE_URL WORKDIR``, printing
    ``ready`` once it polls) in its own process, with ``environ`` added to this process's
    environment (e.g. ``OTHERONE_WORKFLOW_SANDBOX``); killed when the block ends."""
    worker = await BackgroundProcess.start(
        sys.executable,
        "-m",
        module,
        address,
        task_queue,
        store_url,
        str(workdir),
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **environ},
    )
    try:
        await worker.wait_for("ready", whole_line=True)
        yield worker
    finally:
        await worker.kill()
