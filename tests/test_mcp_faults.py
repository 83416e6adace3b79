"""A worker SIGKILLed during MCP calls: the calls are retried (idempotent server) or reported
to the model (others), the runs complete, and no stdio server process is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import build_request
from otherone.runs import RunOutcome
from tests.harness import wait_until
from tests.processes import BackgroundProcess, shared_store, worker_module

pytestmark = pytest.mark.timeout(180)


def worker_process(
    address: str, task_queue: str, store_url: str, workdir: Path
) -> contextlib.AbstractAsyncContextManager[BackgroundProcess]:
    """`tests.mcp_fault_worker` in its own process, ready to poll; killed when the block ends."""
    return worker_module("tests.mcp_fault_worker", address, task_queue, store_url, workdir)


def attempts(workdir: Path) -> list[str]:
    log = workdir / "attempts.log"
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def server_pids(workdir: Path) -> set[int]:
    pids = workdir / "pids"
    return {int(entry.name) for entry in pids.iterdir()} if pids.exists() else set()


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_sigkill_during_mcp_calls_retries_or_reports_and_leaks_no_server(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    with shared_store(temporal_env, client, task_queue, tmp_path) as shared:
        address, store_url, store, agents = shared.address, shared.url, shared.store, shared.agents
        async with worker_process(address, task_queue, store_url, tmp_path) as first:
            steady = await agents.start(build_request(entry_agent="steady", input="wait"))
            once = await agents.start(build_request(entry_agent="once", input="wait"))
            await wait_until(
                lambda: sorted(attempts(tmp_path)) == ["once", "steady"],
                within=60,
                message="both MCP calls in flight",
            )
            first_servers = server_pids(tmp_path)
            assert len(first_servers) == 2 and all(alive(pid) for pid in first_servers)
            first.send_signal(signal.SIGKILL)
            await first.exit_code()
        # The killed worker's servers see their stdin close and exit: nothing leaks.
        await wait_until(
            lambda: not any(alive(pid) for pid in first_servers),
            within=20,
            message="the killed worker's MCP servers to exit",
        )

        async with worker_process(address, task_queue, store_url, tmp_path) as second:
            await wait_until(
                lambda: attempts(tmp_path).count("steady") == 2,
                within=60,
                message="the idempotent server's call retried on the new worker",
            )
            (tmp_path / "release").touch()
            steady_result, once_result = await asyncio.wait_for(
                asyncio.gather(steady.result(), once.result()), 90
            )
            all_servers = server_pids(tmp_path)
            second.send_signal(signal.SIGKILL)
            await second.exit_code()
        await wait_until(
            lambda: not any(alive(pid) for pid in all_servers),
            within=20,
            message="every MCP server process to exit",
        )

        assert steady_result.outcome is RunOutcome.COMPLETED, steady_result.failure
        assert once_result.outcome is RunOutcome.COMPLETED, once_result.failure
        assert steady_result.text == "steady done" and once_result.text == "once done"
        # Idempotent: retried once on the new worker, whose server answered.
        [steady_row] = [
            r for r in store.load_entries("local", steady_result.session_id) if r.role == "tool"
        ]
        assert steady_row.error_kind is None
        released = json.loads(steady_row.content)["structured_content"]
        assert released == {"result": "released steady"}
        # Not idempotent: never called twice; the model was told the call failed.
        assert attempts(tmp_path).count("once") == 1
        [once_row] = [
            r for r in store.load_entries("local", once_result.session_id) if r.role == "tool"
        ]
        assert once_row.error_kind == "recoverable"
        assert "mcp.once.wait_for_release" in json.loads(once_row.content)["error"]
