"""Payload encryption (`otherone.worker.codec`) and the codec server
(`otherone.worker.codec_server`).

Why these tests: with encryption on, nothing a user wrote may reach Temporal's history in
plaintext, while every client and worker holding the keys reads runs as before, keys rotate
without losing old histories, and an operator can still read payloads through the codec
server. The end-to-end tests run real agent runs on the session dev server and look for a
unique marker in the raw bytes of the stored history events; a control run without the codec
shows the same check finds the marker when it is there.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import build_request
from otherone.client.cli import run_cli
from otherone.definitions import AgentDefinition
from otherone.errors import ConfigurationError
from otherone.runs import AgentRunResult, RunOutcome
from otherone.tools import tool
from otherone.worker.app import connect
from otherone.worker.codec import (
    ENCODING,
    KEY_ID_METADATA,
    EncryptionCodec,
    EncryptionKey,
    PayloadDecryptionError,
    codec_from_settings,
    load_key_file,
    parse_keys,
)
from otherone.worker.codec_server import CodecServer
from otherone.worker.devserver import DevServer, free_port
from otherone.worker.settings import Settings
from tests.browser import chromium_path
from tests.harness import agent_env, scripted_config

pytestmark = pytest.mark.timeout(120)

REPO_ROOT = Path(__file__).resolve().parent.parent
ORIGIN = "http://127.0.0.1:8233"


def secret(seed: int) -> bytes:
    return bytes([seed]) * 32


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def key(key_id: str, seed: int) -> EncryptionKey:
    return EncryptionKey(key_id, secret(seed))


def json_payload(value: Any) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


# --------------------------------------------------------------------------- the codec


async def test_round_trip_encrypts_with_a_fresh_nonce_and_restores_the_payload() -> None:
    codec = EncryptionCodec([key("k1", 1)])
    original = json_payload({"prompt": "MARKER-round-trip"})
    first, second = await codec.encode([original, original])
    assert first.metadata["encoding"] == ENCODING
    assert first.metadata[KEY_ID_METADATA] == b"k1"
    assert b"MARKER" not in first.data and b"json/plain" not in first.data
    assert first.data[:12] != second.data[:12], "the nonce must be random per payload"
    assert await codec.decode([first, second]) == [original, original]


async def test_rotation_old_key_decrypts_new_key_encrypts() -> None:
    old = EncryptionCodec([key("k1", 1)])
    rotated = EncryptionCodec([key("k2", 2), key("k1", 1)])
    written_before = (await old.encode([json_payload("before rotation")]))[0]
    written_after = (await rotated.encode([json_payload("after rotation")]))[0]
    assert written_after.metadata[KEY_ID_METADATA] == b"k2"
    assert rotated.active_key_id == "k2" and rotated.key_ids == ["k2", "k1"]
    assert await rotated.decode([written_before, written_after]) == [
        json_payload("before rotation"),
        json_payload("after rotation"),
    ]
    # A process still on the old key set cannot read the new key's payloads, and says why.
    with pytest.raises(PayloadDecryptionError, match=r"key 'k2', which is not configured") as info:
        await old.decode([written_after])
    assert info.value.key_id == "k2"
    assert "OTHERONE_ENCRYPTION_KEYS" in info.value.message


async def test_wrong_key_under_the_same_id_fails_authentication() -> None:
    sealed = (await EncryptionCodec([key("k1", 1)]).encode([json_payload("x")]))[0]
    with pytest.raises(PayloadDecryptionError, match="failed authentication"):
        await EncryptionCodec([key("k1", 9)]).decode([sealed])


@pytest.mark.parametrize("tamper", ["flip_ciphertext", "flip_nonce", "swap_key_id", "truncate"])
async def test_tampered_payload_is_refused(tamper: str) -> None:
    codec = EncryptionCodec([key("k1", 1), key("k2", 2)])
    sealed = (await codec.encode([json_payload({"amount": 100})]))[0]
    data = bytearray(sealed.data)
    metadata = dict(sealed.metadata)
    match tamper:
        case "flip_ciphertext":
            data[-20] ^= 0x01
        case "flip_nonce":
            data[0] ^= 0x80
        case "swap_key_id":  # the key id is authenticated data: moving it breaks the tag
            metadata[KEY_ID_METADATA] = b"k2"
        case "truncate":
            data = data[:20]
    altered = Payload(metadata=metadata, data=bytes(data))
    with pytest.raises(PayloadDecryptionError, match=r"failed authentication|truncated"):
        await codec.decode([altered])


async def test_payloads_written_before_encryption_pass_through() -> None:
    plain = json_payload("written before encryption was turned on")
    assert await EncryptionCodec([key("k1", 1)]).decode([plain]) == [plain]


# --------------------------------------------------------------------------- keys from settings

GOOD = b64(secret(7))


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ("", "no keys given"),
        ("k1", "entry 1 is not 'id:base64key'"),
        (f"k1:{GOOD},{GOOD}", "entry 2 is not 'id:base64key'"),
        ("k1:not base64!", "key 'k1' is not valid base64"),
        (f"k1:{b64(b'short key')}", "key 'k1' decodes to 9 bytes; AES-256 needs 32"),
        (f"k1:{b64(secret(1) + b'x')}", "key 'k1' decodes to 33 bytes"),
        (f"k1:{GOOD},k1:{b64(secret(8))}", "key id 'k1' is given twice"),
        (f"bad id:{GOOD}", "key id 'bad id' must match"),
    ],
)
def test_bad_key_settings_name_the_setting_and_never_the_key(setting: str, needle: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_keys(setting)
    assert info.value.field == "OTHERONE_ENCRYPTION_KEYS"
    assert needle in info.value.message
    assert GOOD not in info.value.message and b64(secret(8)) not in info.value.message


def test_keys_from_environment_and_key_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("OTHERONE_"):
            monkeypatch.delenv(name)
    assert codec_from_settings(Settings(_env_file=None)) is None  # no keys: no encryption
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"# rotated out 2025-01\nold:{b64(secret(1))}\n\nolder:{b64(secret(0))}\n")
    monkeypatch.setenv("OTHERONE_ENCRYPTION_KEYS", f"new:{b64(secret(2)).replace('/', '_')}")
    monkeypatch.setenv("OTHERONE_ENCRYPTION_KEY_FILE", str(key_file))
    codec = codec_from_settings(Settings(_env_file=None))
    assert codec is not None
    assert codec.key_ids == ["new", "old", "older"] and codec.active_key_id == "new"
    assert [k.key_id for k in load_key_file(key_file)] == ["old", "older"]

    monkeypatch.setenv("OTHERONE_ENCRYPTION_KEY_FILE", str(tmp_path / "missing.txt"))
    with pytest.raises(ConfigurationError, match=r"OTHERONE_ENCRYPTION_KEY_FILE .*missing\.txt"):
        codec_from_settings(Settings(_env_file=None))
    monkeypatch.setenv("OTHERONE_ENCRYPTION_KEY_FILE", str(key_file))
    monkeypatch.setenv("OTHERONE_ENCRYPTION_KEYS", f"old:{b64(secret(3))}")
    with pytest.raises(ConfigurationError, match="key id 'old' is given twice"):
        codec_from_settings(Settings(_env_file=None))


# --------------------------------------------------------------------------- real runs

MARKER = f"MARKER-{uuid.uuid4().hex}"


@tool
def remember(note: str) -> str:
    """Remember a note.

    Args:
        note: The note.
    """
    return f"kept {note}"


def team_config() -> Any:
    """A coordinator that runs a tool and calls a helper, all with the marker in the data."""
    coordinator = AgentDefinition(
        id="coordinator", description="coordinates", tools=["remember"], callable_agents=["helper"]
    )
    helper = AgentDefinition(id="helper", description="helps")
    return scripted_config(
        {
            "coordinator": [
                {
                    "tool_calls": [
                        {"name": "remember", "id": "t1", "arguments": {"note": f"{MARKER} note"}},
                        {
                            "name": "agent.call",
                            "id": "c1",
                            "arguments": {"agent": "helper", "task": f"check {MARKER}"},
                        },
                    ]
                },
                f"final answer {MARKER}",
            ],
            "helper": [f"helper answer {MARKER}"],
            "failing": [{"fail": {"message": f"provider said {MARKER}", "retryable": False}}],
        },
        agents=[coordinator, helper, AgentDefinition(id="failing", description="fails")],
        tools=[remember],
    )


def address_of(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


async def raw_history(plain: Client, run_id: str) -> list[HistoryEvent]:
    """The events as the server stores them, read by a client without the codec."""
    return list((await plain.get_workflow_handle(run_id).fetch_history()).events)


def stored_bytes(events: Sequence[HistoryEvent]) -> bytes:
    return b"".join(event.SerializeToString() for event in events)


async def run_team(client: Client, task_queue: str, tmp_path: Path) -> list[AgentRunResult]:
    async with agent_env(client, task_queue, team_config(), tmp_path) as env:
        team = await env.agents.run(
            build_request(entry_agent="coordinator", input=f"Please handle {MARKER} today")
        )
        failing = await env.agents.run(build_request(entry_agent="failing", input=MARKER))
    return [team, failing]


@pytest.fixture
def codec() -> EncryptionCodec:
    return EncryptionCodec([key("k2", 2), key("k1", 1)])


@pytest_asyncio.fixture
async def encrypted_client(temporal_env: WorkflowEnvironment, codec: EncryptionCodec) -> Client:
    return await connect(address_of(temporal_env), payload_codec=codec)


async def test_with_the_codec_the_history_holds_no_plaintext(
    client: Client, encrypted_client: Client, task_queue: str, tmp_path: Path
) -> None:
    team, failing = await run_team(encrypted_client, task_queue, tmp_path / "encrypted")
    # The codec's clients read everything back.
    assert team.outcome is RunOutcome.COMPLETED, team
    assert team.text == f"final answer {MARKER}"
    assert failing.outcome is RunOutcome.FAILED and failing.failure is not None
    assert MARKER in failing.failure.message
    run_ids = [team.run_id, f"{team.run_id}/helper.c1", failing.run_id]
    histories = [await raw_history(client, run_id) for run_id in run_ids]
    assert all(histories) and any(  # the child ran: its history is among those checked
        event.HasField("child_workflow_execution_completed_event_attributes")
        for event in histories[0]
    )
    for run_id, events in zip(run_ids, histories, strict=True):
        stored = stored_bytes(events)
        for needle in (MARKER, "Please handle"):
            assert needle.encode() not in stored, f"{needle} in the history of {run_id}"
        assert ENCODING in stored
    # Without the codec the payloads cannot even be read.
    with pytest.raises(Exception, match="binary/encrypted"):
        await client.get_workflow_handle(team.run_id).result()


async def test_without_the_codec_the_same_check_finds_the_plaintext(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Control: proves the byte search above would see the marker if it were stored."""
    team, failing = await run_team(client, task_queue, tmp_path)
    assert team.outcome is RunOutcome.COMPLETED, team
    for run_id in (team.run_id, f"{team.run_id}/helper.c1", failing.run_id):
        assert MARKER.encode() in stored_bytes(await raw_history(client, run_id)), run_id


# --------------------------------------------------------------------------- codec server


@pytest.fixture
def codec_server(codec: EncryptionCodec) -> Iterator[CodecServer]:
    with CodecServer(codec, port=0, cors_origins=[ORIGIN]) as server:
        yield server


def payloads_json(payloads: Sequence[Payload]) -> dict[str, Any]:
    return json_format.MessageToDict(Payloads(payloads=payloads))


def payloads_from(body: dict[str, Any]) -> list[Payload]:
    return list(json_format.ParseDict(body, Payloads()).payloads)


async def test_codec_server_decodes_a_payload_from_a_real_history(
    client: Client,
    encrypted_client: Client,
    codec_server: CodecServer,
    task_queue: str,
    tmp_path: Path,
) -> None:
    config = scripted_config({"agent": [f"answer {MARKER}"]})
    async with agent_env(encrypted_client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input=MARKER))
    started = (await raw_history(client, result.run_id))[0]
    stored = started.workflow_execution_started_event_attributes.input.payloads[0]
    assert stored.metadata["encoding"] == ENCODING
    async with httpx.AsyncClient(base_url=codec_server.url) as http:
        response = await http.post(
            "/decode",
            json=payloads_json([stored]),
            headers={"X-Namespace": "default", "Origin": ORIGIN},
        )
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == ORIGIN
    # The answer is proto JSON: base64 bytes that decode to the workflow's pydantic input.
    body = response.json()
    assert base64.b64decode(body["payloads"][0]["metadata"]["encoding"]) == b"json/plain"
    decoded = payloads_from(body)[0]
    assert json.loads(decoded.data)["request"]["input"] == MARKER


def test_codec_server_protocol(codec_server: CodecServer, codec: EncryptionCodec) -> None:
    original = [json_payload({"n": 1}), json_payload("two")]
    with httpx.Client(base_url=codec_server.url) as http:
        preflight = http.options(
            "/default/decode",
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == ORIGIN
        assert "x-namespace" in preflight.headers["access-control-allow-headers"]
        assert "POST" in preflight.headers["access-control-allow-methods"]
        stranger = http.options("/decode", headers={"Origin": "http://evil.example"})
        assert stranger.status_code == 403
        assert "access-control-allow-origin" not in stranger.headers

        encoded = http.post("/encode", json=payloads_json(original))
        assert encoded.status_code == 200, encoded.text
        sealed = payloads_from(encoded.json())
        assert [p.metadata["encoding"] for p in sealed] == [ENCODING, ENCODING]
        decoded = http.post("/default/decode", json=payloads_json(sealed))
        assert payloads_from(decoded.json()) == original
        # A page of another origin cannot use the server to decrypt, even without preflight.
        oracle = http.post(
            "/decode", json=payloads_json(sealed), headers={"Origin": "http://evil.example"}
        )
        assert oracle.status_code == 403 and "payloads" not in oracle.text

        errors = {
            "not json": http.post(
                "/decode", content=b"{oops", headers={"Content-Type": "application/json"}
            ),
            "wrong shape": http.post("/decode", json={"payloads": 3}),
            "form post": http.post(
                "/decode", content=b"a=b", headers={"Content-Type": "text/plain"}
            ),
            "unknown key": http.post(
                "/decode",
                json=payloads_json(
                    [
                        Payload(
                            metadata={"encoding": ENCODING, KEY_ID_METADATA: b"k9"}, data=b"x" * 40
                        )
                    ]
                ),
            ),
            "get": http.get("/decode"),
            "unknown path": http.post("/decrypt", json={"payloads": []}),
        }
    statuses = {name: response.status_code for name, response in errors.items()}
    assert statuses == {
        "not json": 400,
        "wrong shape": 400,
        "form post": 415,
        "unknown key": 400,
        "get": 405,
        "unknown path": 404,
    }
    assert "k9" in errors["unknown key"].json()["error"]


def test_codec_server_token(codec: EncryptionCodec) -> None:
    sealed = codec.encrypt([json_payload("secret")])
    with (
        CodecServer(codec, port=0, token="s3cret-token") as server,
        httpx.Client(base_url=server.url) as http,
    ):
        refused = http.post("/decode", json=payloads_json(sealed))
        wrong = http.post(
            "/decode", json=payloads_json(sealed), headers={"Authorization": "Bearer nope"}
        )
        allowed = http.post(
            "/decode",
            json=payloads_json(sealed),
            headers={"Authorization": "Bearer s3cret-token"},
        )
    assert (refused.status_code, wrong.status_code, allowed.status_code) == (401, 401, 200)
    assert payloads_from(allowed.json()) == [json_payload("secret")]


# --------------------------------------------------------------------------- the CLI command


def cli_env(keys: str | None) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTHERONE_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    if keys is not None:
        env["OTHERONE_ENCRYPTION_KEYS"] = keys
    return env


@pytest_asyncio.fixture
async def codec_server_process() -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``otherone codec-server --port 0`` as a subprocess, and the URL it printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "otherone.client.cli",
        "codec-server",
        "--port",
        "0",
        env=cli_env(f"k2:{b64(secret(2))},k1:{b64(secret(1))}"),
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        url = ""
        async with asyncio.timeout(60):
            while not (line := (await process.stdout.readline()).decode()).startswith("ready"):
                assert line, "codec-server exited before it was ready"
                if line.startswith("codec"):
                    url = line.split()[1]
        yield process, url
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_cli_codec_server_answers_decode(
    codec_server_process: tuple[asyncio.subprocess.Process, str], codec: EncryptionCodec
) -> None:
    process, url = codec_server_process
    sealed = codec.encrypt([json_payload({"prompt": MARKER})])
    async with httpx.AsyncClient(base_url=url) as http:
        response = await http.post("/decode", json=payloads_json(sealed))
    assert response.status_code == 200, response.text
    assert payloads_from(response.json()) == [json_payload({"prompt": MARKER})]
    process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(30):
        assert await process.wait() == 0


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        (None, "no encryption keys: set OTHERONE_ENCRYPTION_KEYS"),
        (f"k1:{b64(b'too short')}", "field 'OTHERONE_ENCRYPTION_KEYS': key 'k1' decodes to 9"),
    ],
)
def test_cli_codec_server_refuses_missing_or_bad_keys(
    keys: str | None,
    needle: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in list(os.environ):
        if name.startswith("OTHERONE_"):
            monkeypatch.delenv(name)
    if keys is not None:
        monkeypatch.setenv("OTHERONE_ENCRYPTION_KEYS", keys)
    assert run_cli(["codec-server", "--port", "0"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and needle in error, error
    assert len(error.splitlines()) == 1


async def cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "otherone.client.cli",
        *args,
        env=env,
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        stdout, stderr = await process.communicate()
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_cli_runs_with_the_keys_and_explains_their_absence(
    temporal_env: WorkflowEnvironment, encrypted_client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`otherone run/show` encrypt and decrypt through `_connect`; without keys: a clear error."""
    keys = f"k2:{b64(secret(2))},k1:{b64(secret(1))}"
    settings = {
        "OTHERONE_TEMPORAL_ADDRESS": address_of(temporal_env),
        "OTHERONE_TASK_QUEUE": task_queue,
        "OTHERONE_DATABASE_URL": f"sqlite:///{tmp_path / 'store.db'}",
    }
    with_keys = {**cli_env(keys), **settings}
    without_keys = {**cli_env(None), **settings}
    wrong_keys = {**cli_env(f"k2:{b64(secret(5))}"), **settings}
    config = scripted_config({"agent": [f"answer {MARKER}"]})
    async with agent_env(encrypted_client, task_queue, config, tmp_path):
        code, stdout, stderr = await cli("run", "agent", MARKER, "--json", env=with_keys)
        assert code == 0, stderr
        result = AgentRunResult.model_validate_json(stdout)
        assert result.text == f"answer {MARKER}"
        shown = await cli("show", result.run_id, "--json", env=with_keys)
        refused = await cli("show", result.run_id, env=without_keys)
        mismatched = await cli("show", result.run_id, env=wrong_keys)
    assert shown[0] == 0 and MARKER in shown[1], shown
    for code, _, stderr in (refused, mismatched):
        lines = stderr.strip().splitlines()
        assert code == 2 and len(lines) == 1, stderr
    assert "payloads are encrypted: set OTHERONE_ENCRYPTION_KEYS" in refused[2]
    assert "key 'k2'" in mismatched[2] and "failed authentication" in mismatched[2]


async def test_web_ui_shows_decrypted_payloads_through_the_codec_server(
    codec: EncryptionCodec, tmp_path: Path
) -> None:
    """The real Web UI (`--ui-codec-endpoint`) in headless Chromium: CORS preflight, /decode,
    and the run's input and result shown in plaintext although the history is encrypted."""
    import playwright.async_api as playwright_api

    chromium = chromium_path()
    ui_port = free_port()
    requests: list[str] = []
    origin = f"http://127.0.0.1:{ui_port}"
    with CodecServer(codec, port=0, cors_origins=[origin], log=requests.append) as codec_server:
        ui_codec = ["--ui-codec-endpoint", codec_server.url]
        async with DevServer(ui_port=ui_port, extra_args=ui_codec) as server:
            encrypted = await connect(server.address, payload_codec=codec)
            config = scripted_config({"agent": [f"answer {MARKER}"]})
            async with agent_env(encrypted, "web-ui-codec", config, tmp_path) as env:
                result = await env.agents.run(build_request(entry_agent="agent", input=MARKER))
            run = await encrypted.get_workflow_handle(result.run_id).describe()
            url = server.workflow_url(result.run_id, run.run_id)
            assert url is not None
            async with playwright_api.async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
                try:
                    page = await browser.new_page(viewport={"width": 1400, "height": 1000})
                    await page.goto(url)
                    shown = page.get_by_text(f"answer {MARKER}").first
                    await shown.wait_for(state="visible", timeout=60_000)
                    await page.screenshot(path=str(tmp_path / "web-ui-decoded.png"))
                finally:
                    await browser.close()
    assert any('"OPTIONS /decode' in line and " 204 " in line for line in requests), requests
    assert any('"POST /decode' in line and " 200 " in line for line in requests), requests


def test_the_codec_servers_default_origins_follow_the_web_ui_in_use() -> None:
    """An `otherone dev --ui-port 8300` leaves ``OTHERONE_UI_URL`` in its folder's dev.env: the
    codec server started there allows that UI (it allowed port 8233 only, whatever was used)."""
    from otherone.worker.codec_server import default_cors_origins
    from otherone.worker.settings import Settings

    settings = Settings(ui_url="http://127.0.0.1:8300")
    assert default_cors_origins(settings.ui_base_url()) == [
        "http://127.0.0.1:8300",
        "http://localhost:8300",
    ]
    assert default_cors_origins(Settings(ui_port=9000).ui_base_url())[0] == "http://127.0.0.1:9000"
    assert default_cors_origins("https://temporal.example.com/ui") == [
        "https://temporal.example.com"
    ]
