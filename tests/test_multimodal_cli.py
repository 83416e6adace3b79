"""``otherone run``/``send`` with ``--image`` and ``--file``, and ``show`` listing them, as real
subprocesses against the session's Temporal server and a worker in this process (issue 44)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import build_request
from otherone.examples import EXAMPLE_CONFIG
from otherone.partitions import DEFAULT_PARTITION
from otherone.store import Store
from otherone.toml_config import load_config
from tests.harness import agent_env, scripted_config
from tests.processes import address_of, cli_env, otherone
from tests.providers import RecordingProvider
from tests.test_multimodal import PDF, PNG

pytestmark = pytest.mark.timeout(120)


async def test_run_with_an_image_and_a_file_then_show_lists_them(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    (tmp_path / "photo.png").write_bytes(PNG)
    (tmp_path / "report.pdf").write_bytes(PDF)
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    try:
        config = load_config(EXAMPLE_CONFIG)
        async with agent_env(client, task_queue, config, tmp_path, store=store):
            ran = await otherone(
                "run",
                "assistant",
                "what is this?",
                "--image",
                str(tmp_path / "photo.png"),
                "--file",
                str(tmp_path / "report.pdf"),
                "--json",
                env=env,
            )
            assert ran.code == 0, ran.describe()
            result = json.loads(ran.stdout)
            shown = await otherone("show", result["run_id"], env=env)
            missing = await otherone(
                "run", "assistant", "and this?", "--image", str(tmp_path / "no.png"), env=env
            )
            not_an_image = await otherone(
                "run", "assistant", "and this?", "--image", str(tmp_path / "report.pdf"), env=env
            )
        png = hashlib.sha256(PNG).hexdigest()
        pdf = hashlib.sha256(PDF).hexdigest()
        assert result["outcome"] == "completed"
        partition = DEFAULT_PARTITION
        assert store.get_artifact(partition, png) is not None
        assert store.get_artifact(partition, pdf) is not None
    finally:
        store.close()
    assert shown.code == 0, shown.describe()
    assert f"attachment  [image image/png {len(PNG)} bytes sha256:{png[:12]}]" in shown.stdout
    assert f"attachment  [file application/pdf {len(PDF)} bytes sha256:{pdf[:12]}]" in shown.stdout
    assert missing.code == 2, missing.describe()
    assert "input.0.content.1.path" in missing.stderr and "cannot read" in missing.stderr
    assert not_an_image.code == 2, not_an_image.describe()
    assert "the bytes are application/pdf" in not_an_image.stderr


async def test_send_with_an_image_reaches_the_running_runs_next_call(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    (tmp_path / "photo.png").write_bytes(PNG)
    provider = RecordingProvider()
    gate = provider.gate("looker", 1)
    config = scripted_config({"looker": ["first", "a cat"]})
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    try:
        async with agent_env(
            client, task_queue, config, tmp_path, store=store, providers={"scripted": provider}
        ) as agents:
            handle = await agents.agents.start(build_request(entry_agent="looker", input="hi"))
            await asyncio.wait_for(provider.started.wait(), 10)
            sent = await otherone(
                "send",
                handle.run_id,
                "and this?",
                "--image",
                str(tmp_path / "photo.png"),
                env=env,
            )
            assert sent.code == 0, sent.describe()
            await handle.record()  # the signal is in the run's history
            gate.set()
            result = await handle.result()
    finally:
        store.close()
    assert result.text == "a cat"
    last = provider.calls()[1].messages[-1]
    assert last["content"][0] == {"type": "text", "text": "and this?"}
    assert last["content"][1]["media_type"] == "image/png"
    assert base64.b64decode(last["content"][1]["data"]) == PNG
