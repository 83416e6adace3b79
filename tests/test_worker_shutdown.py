"""Graceful shutdown of ``otherone worker`` (`otherone.worker.shutdown`) and its health file.

Why: a deploy or a scale-down sends SIGTERM to workers in the middle of tool calls. The
contract: the worker stops polling, lets in-flight activities finish (up to
``OTHERONE_SHUTDOWN_GRACE_SECONDS``), reports their results to Temporal and exits 0, so a
side effect happens exactly once and another worker carries the run on from there. Past the
grace period the activity is cancelled and Temporal retries it elsewhere; a second signal exits
at once. Each test runs real ``otherone worker`` subprocesses against the session's Temporal dev
server, with a configuration whose agent calls `tests.shutdown_tools.record_side_effect`, a
tool that waits until the test releases it (so nothing here depends on timing).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from uuid import uuid4

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request, root_run_id
from otherone.runs import AgentRunResult, RunOutcome
from otherone.worker import health
from tests.harness import wait_until
from tests.processes import REPO_ROOT, BackgroundProcess, address_of, cli_env, start_worker
from tests.shutdown_tools import SIDE_EFFECTS_DIR_ENV

pytestmark = pytest.mark.timeout(180)

HEALTH_SCRIPT = REPO_ROOT / "worker" / "health.py"
ANSWER = "Recorded once."

CONFIG = """
[runtime]
default_model = "scripted"
tools = ["tests.shutdown_tools:record_side_effect"]

[policy]
tools = "all"

[models.scripted]
provider = "scripted"
model = "test"

[[models.scripted.script.recorder]]
tool_calls = [{ name = "record_side_effect", arguments = { label = "first" } }]

[[models.scripted.script.recorder]]
chunks = ["Recorded ", "once."]

[agents.recorder]
description = "Records one side effect through a slow tool."
system_prompt = "Record what you are asked to, with the tool."
model = "scripted"
tools = ["record_side_effect"]
"""


@dataclass
class Setup:
    env: dict[str, str]
    side_effects: Path
    health_file: Path
    agents: AgentClient
    started: list[BackgroundProcess] = field(default_factory=list)

    async def start_worker(self, **extra_env: str) -> BackgroundProcess:
        worker = await start_worker({**self.env, **extra_env})
        self.started.append(worker)
        return worker

    def lines(self, name: str) -> list[str]:
        path = self.side_effects / name
        return path.read_text().splitlines() if path.exists() else []

    def release(self) -> None:
        (self.side_effects / "release").touch()


@pytest_asyncio.fixture
async def setup(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> AsyncIterator[Setup]:
    side_effects = tmp_path / "side-effects"
    side_effects.mkdir()
    config = tmp_path / "otherone.toml"
    config.write_text(CONFIG)
    health_file = tmp_path / "worker.alive"
    env = cli_env(
        address_of(temporal_env),
        task_queue,
        tmp_path,
        config=config,
        OTHERONE_HEALTH_FILE=str(health_file),
        **{SIDE_EFFECTS_DIR_ENV: str(side_effects)},
    )
    result = Setup(env, side_effects, health_file, AgentClient(client, task_queue=task_queue))
    try:
        yield result
    finally:
        result.release()  # unblocks a tool still waiting, whatever happened
        for worker in result.started:
            await worker.kill()


async def start_run(agents: AgentClient) -> str:
    request = build_request(
        entry_agent="recorder", input="Record it.", idempotency_key=f"shutdown-{uuid4().hex}"
    )
    handle = await agents.start(request)
    assert handle.run_id == root_run_id(request)
    return handle.run_id


async def result_of(agents: AgentClient, run_id: str, within: float = 90) -> AgentRunResult:
    return await asyncio.wait_for(agents.result(run_id), within)


def healthy(path: Path) -> int:
    """Exit code of the container healthcheck script, run exactly as the image runs it."""
    return subprocess.run(
        [sys.executable, "-P", str(HEALTH_SCRIPT), str(path)],
        capture_output=True,
        timeout=30,
        check=False,
    ).returncode


async def terminate_quietly(client: Client, run_id: str) -> None:
    with contextlib.suppress(RPCError):
        await client.get_workflow_handle(run_id).terminate("test cleanup")


def one_line(lines: list[str], what: str) -> str:
    assert len(lines) == 1, f"{what}: {lines}"
    return lines[0]


async def test_sigterm_drains_the_running_tool_then_exits_0_and_another_worker_finishes(
    setup: Setup,
) -> None:
    first = await setup.start_worker(OTHERONE_SHUTDOWN_GRACE_SECONDS="90")
    run_id = await start_run(setup.agents)
    await wait_until(lambda: bool(setup.lines("started")), within=60, message="the tool to start")
    await wait_until(lambda: healthy(setup.health_file) == 0, within=30, message="healthy")

    first.send_signal(signal.SIGTERM)
    await first.wait_for("draining 1 in-flight activity")
    # Draining: no longer healthy, still running (the tool has not been released yet).
    assert healthy(setup.health_file) == 1
    assert first.process.returncode is None, first.output
    assert setup.lines("effects") == []

    setup.release()
    assert await first.exit_code() == 0, first.output
    exited_at = time.time()
    # The tool finished inside the first worker, before it exited, exactly once.
    effect = one_line(setup.lines("effects"), "side effects when the first worker exited")
    key, label, finished_at = effect.split()
    assert label == "first" and float(finished_at) <= exited_at
    assert one_line(setup.lines("started"), "tool attempts") == f"{key} attempt 1"
    assert first.saw("worker stopped") and not first.saw("cancelled"), first.output

    # A second worker carries the run on from the reported tool result: no second attempt.
    second = await setup.start_worker()
    result = await result_of(setup.agents, run_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == ANSWER
    assert result.usage.tool_calls == 1 and result.usage.model_calls == 2
    assert setup.lines("started") == [f"{key} attempt 1"]
    assert setup.lines("effects") == [effect]

    second.send_signal(signal.SIGTERM)
    assert await second.exit_code() == 0, second.output
    assert second.saw("no activity in flight"), second.output


async def test_past_the_grace_period_the_tool_is_cancelled_and_retried_elsewhere(
    setup: Setup, client: Client
) -> None:
    first = await setup.start_worker(OTHERONE_SHUTDOWN_GRACE_SECONDS="1")
    run_id = await start_run(setup.agents)
    try:
        await wait_until(lambda: bool(setup.lines("started")), within=60, message="tool start")

        first.send_signal(signal.SIGTERM)
        assert await first.exit_code() == 0, first.output
        assert first.saw("draining 1 in-flight activity (up to 1 s)"), first.output
        assert first.saw("1 in-flight activity cancelled after the grace period"), first.output
        assert setup.lines("effects") == []  # cancelled before it could finish

        setup.release()
        await setup.start_worker()
        result = await result_of(setup.agents, run_id)
        assert result.outcome is RunOutcome.COMPLETED, result.failure
        assert result.text == ANSWER
        started = setup.lines("started")
        key = started[0].split()[0]
        assert started == [f"{key} attempt 1", f"{key} attempt 2"]  # same idempotency key
        assert one_line(setup.lines("effects"), "side effects").startswith(f"{key} first ")
    finally:
        await terminate_quietly(client, run_id)


async def test_a_second_signal_exits_at_once(setup: Setup, client: Client) -> None:
    first = await setup.start_worker(OTHERONE_SHUTDOWN_GRACE_SECONDS="90")
    run_id = await start_run(setup.agents)
    try:
        await wait_until(lambda: bool(setup.lines("started")), within=60, message="tool start")
        first.send_signal(signal.SIGTERM)
        await first.wait_for("draining 1 in-flight activity")
        first.send_signal(signal.SIGTERM)
        assert await first.exit_code(within=30) == 0, first.output
        assert first.saw("second signal: exiting with 1 in-flight activity still running")
        assert setup.lines("effects") == []
    finally:
        await terminate_quietly(client, run_id)


# --------------------------------------------------------------------------- health file


def test_health_script_reports_missing_stale_and_fresh_files(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    assert healthy(path) == 1  # never written
    health.write(path)
    assert healthy(path) == 0
    old = time.time() - health.MAX_AGE_SECONDS - 5
    os.utime(path, (old, old))
    assert healthy(path) == 1
    assert "stuck" in (health.problem(path) or "")
    health.remove(path)
    assert healthy(path) == 1


def test_health_script_without_a_file_setting_is_unhealthy() -> None:
    env = {key: value for key, value in os.environ.items() if key != health.HEALTH_FILE_ENV}
    result = subprocess.run(
        [sys.executable, "-P", str(HEALTH_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert result.returncode == 1
    assert health.HEALTH_FILE_ENV in result.stderr


async def test_beat_keeps_the_file_fresh_only_while_alive(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    state = {"alive": True}
    alive: Callable[[], bool] = lambda: state["alive"]  # noqa: E731
    task = asyncio.create_task(health.beat(path, alive, every=0.05))
    try:
        await wait_until(path.exists, within=10, message="the first beat")
        state["alive"] = False
        await wait_until(lambda: not path.exists(), within=10, message="the file to go")
        state["alive"] = True
        await wait_until(path.exists, within=10, message="the file to come back")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert not path.exists()  # cancelled (shutdown): removed
