"""`otherone serve` and `otherone dev --serve` as processes: they say where they listen (and that
they stay on 127.0.0.1 without tokens), answer, and on SIGTERM / Ctrl-C end open event streams
cleanly and exit 0."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.examples import EXAMPLE_CONFIG
from otherone.store import Store
from otherone.worker.devserver import free_port
from tests.harness import agent_env, scripted_config
from tests.sse import parse_frame
from tests.test_cli import ANSWER, QUESTION, REPO_ROOT, address_of, cli_env

_URL = re.compile(rb"(http://127\.0\.0\.1:\d+)")


@asynccontextmanager
async def process(
    *args: str, env: dict[str, str], cwd: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    started = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "otherone.client.cli",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield started
    finally:
        if started.returncode is None:
            started.kill()
            await started.wait()


async def read_until(stream: asyncio.StreamReader | None, needle: bytes) -> bytes:
    assert stream is not None
    seen = b""
    while needle not in seen:
        line = await asyncio.wait_for(stream.readline(), 60)
        assert line, f"the process ended before printing {needle!r}: {seen.decode()}"
        seen += line
    return seen


async def test_serve_binds_loopback_without_tokens_and_ends_streams_on_sigterm(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    env.update(OTHERONE_SERVE_HOST="0.0.0.0", OTHERONE_SERVE_PORT=str(free_port()))
    env["OTHERONE_UI_URL"] = "http://temporal-ui.internal:8080"  # known, but not shown by default
    # The workers' configuration, as `otherone serve` reads it (it refuses agents it lacks):
    # the example's, and the `slow` agent the worker below plays.
    served = tmp_path / "otherone.toml"
    served.write_text(
        EXAMPLE_CONFIG.read_text(encoding="utf-8")
        + '\n[agents.slow]\ndescription = "Slow to answer."\nmodel = "demo"\n',
        encoding="utf-8",
    )
    env["OTHERONE_CONFIG"] = str(served)
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    script = {"assistant": [{"text": ANSWER}], "slow": [{"delay_seconds": 60, "text": "late"}]}
    try:
        config = scripted_config(script)
        async with (
            agent_env(client, task_queue, config, tmp_path, store=store) as worker,
            process("serve", env=env, cwd=REPO_ROOT) as server,
        ):
            banner = await read_until(server.stderr, b"Ctrl-C to stop")
            assert b"127.0.0.1 only (not 0.0.0.0)" in banner, banner
            match = _URL.search(banner)
            assert match is not None, banner
            async with httpx.AsyncClient(base_url=match[1].decode(), timeout=30) as http:
                agents = {agent["id"] for agent in (await http.get("/v1/agents")).json()}
                assert {"assistant", "coordinator"} <= agents
                info = (await http.get("/v1/info")).json()
                assert info["ui_url"] is None and info["namespace"] is None, info
                body = {"entry_agent": "assistant", "input": QUESTION}
                started = (await http.post("/v1/runs", json=body)).json()
                assert started["ui_url"] is None, started
                run_id = started["run_id"]
                answer = (await http.get(f"/v1/runs/{run_id}/result")).json()
                assert ANSWER in answer["output"]["value"]

                # A stream of a run that goes on; SIGTERM ends it cleanly and the server exits 0.
                slow = {"entry_agent": "slow", "input": "take your time"}
                other = (await http.post("/v1/runs", json=slow)).json()["run_id"]
                frames = []
                async with http.stream("GET", f"/v1/runs/{other}/events") as response:
                    assert response.status_code == 200
                    async for chunk in response.aiter_text():
                        frames += [parse_frame(text) for text in chunk.split("\n\n") if text]
                        if any(frame.event == "model_started" for frame in frames):
                            server.send_signal(signal.SIGTERM)
                # The stream ended (no error) while the run goes on: clients resume elsewhere.
                assert not any(frame.event == "run_completed" for frame in frames)
            _, rest = await asyncio.wait_for(server.communicate(), 30)
            assert server.returncode == 0, rest.decode()
            await worker.agents.cancel(other)
    finally:
        store.close()


async def test_dev_serve_flag_serves_the_api_beside_the_dev_server(tmp_path: Path) -> None:
    port, ui_port, http_port = free_port(), free_port(), free_port()
    env = cli_env(f"127.0.0.1:{port}", "otherone", tmp_path)
    del env["OTHERONE_DATABASE_URL"]
    env.update(OTHERONE_TEMPORAL_PORT=str(port), OTHERONE_UI_PORT=str(ui_port))
    async with process(
        "dev", "--serve", "--http-port", str(http_port), env=env, cwd=tmp_path
    ) as dev:
        banner = await read_until(dev.stdout, b"http api")
        assert f"http://127.0.0.1:{http_port}".encode() in banner, banner
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", timeout=30) as http:
            info = (await http.get("/v1/info")).json()
            assert info["ui_url"] == f"http://127.0.0.1:{ui_port}"  # shown by default in dev
            body = {"entry_agent": "assistant", "input": QUESTION}
            started = (await http.post("/v1/runs", json=body)).json()
            assert started["ui_url"].startswith(f"http://127.0.0.1:{ui_port}/namespaces/default/")
            answer = (await http.get(f"/v1/runs/{started['run_id']}/result")).json()
            assert ANSWER in answer["output"]["value"]
            # Checked against the dev server's configuration, as `otherone serve` checks.
            ghost = await http.post("/v1/runs", json={"entry_agent": "ghost", "input": "x"})
            assert ghost.status_code == 422, ghost.text
            assert ghost.json()["field"] == "entry_agent"
        dev.send_signal(signal.SIGINT)
        _, rest = await asyncio.wait_for(dev.communicate(), 30)
        assert dev.returncode == 0, rest.decode()
