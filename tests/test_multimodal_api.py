"""The HTTP API takes images and files as JSON parts (base64 ``data`` or an ``url``), stores
them before the run starts, and never reads a ``path`` on the server (issue 44)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.api_env import api_env
from tests.harness import scripted_config
from tests.test_api import _agent_input, _post_ag_ui, assert_problem, result
from tests.test_multimodal import PDF, PNG


def _body(*parts: dict[str, Any]) -> dict[str, Any]:
    content = [{"type": "text", "text": "what is this?"}, *parts]
    return {"entry_agent": "looker", "input": [{"role": "user", "content": content}]}


async def test_json_parts_start_a_run_and_bad_ones_are_refused_naming_the_part(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    secret = tmp_path / "server-side.png"
    secret.write_bytes(PNG)
    data = base64.b64encode(PNG).decode()
    config = scripted_config({"looker": ["a cat"]})
    async with api_env(client, task_queue, config, tmp_path) as api:
        started = await api.http.post(
            "/v1/runs",
            json=_body(
                {"type": "image", "data": data},
                {"type": "image", "url": "https://example.com/cat.png"},
            ),
        )
        assert started.status_code == 201, started.text
        answer = await result(api, started.json()["run_id"])
        path = await api.http.post("/v1/runs", json=_body({"type": "image", "path": str(secret)}))
        bad = await api.http.post("/v1/runs", json=_body({"type": "image", "data": "aGVsbG8="}))
        ftp = await api.http.post("/v1/runs", json=_body({"type": "image", "url": "ftp://x/y"}))
        sent = await api.http.post(
            "/v1/runs/whatever/messages",
            json={"messages": [[{"type": "file", "path": "/etc/passwd"}]]},
        )
        stored = api.env.store.get_artifact("local", hashlib.sha256(PNG).hexdigest())
    assert answer["outcome"] == "completed" and answer["output"]["value"] == "a cat"
    assert stored is not None and stored.content == PNG
    assert_problem(path, 422, "invalid_request", "input.0.content.1.path")
    assert_problem(bad, 422, "invalid_request", "input.0.content.1.data")
    assert "unsupported media type" in bad.json()["detail"]
    assert_problem(ftp, 422, "invalid_request")
    assert_problem(sent, 422, "invalid_request", "messages.0.0.path")


async def test_ag_ui_image_and_document_parts_become_stored_parts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    data = base64.b64encode(PNG).decode()
    image = {"type": "image", "source": {"type": "data", "value": data, "mime_type": "image/png"}}
    by_url = {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}
    text = {"type": "text", "text": "what is this?"}
    audio = {"type": "audio", "source": {"type": "data", "value": data, "mime_type": "audio/wav"}}
    config = scripted_config({"looker": ["a cat"]})
    async with api_env(client, task_queue, config, tmp_path) as api:
        message = {"id": "m1", "role": "user", "content": [text, image, by_url]}
        status, events = await _post_ag_ui(api, "looker", _agent_input("t-1", "r1", [message]))
        entries = api.env.store.load_entries("local", "t-1")
        refused = {"id": "m1", "role": "user", "content": [text, audio]}
        bad, [problem] = await _post_ag_ui(api, "looker", _agent_input("t-2", "r1", [refused]))
    assert status == 200 and events[-1].type.value == "RUN_FINISHED", events
    assert entries[0].content == "what is this?"
    assert entries[0].meta is not None
    stored = [part.get("stored", part.get("url")) for part in entries[0].meta["parts"][1:]]
    digest = hashlib.sha256(PNG).hexdigest()
    assert stored == [
        {"sha256": digest, "media_type": "image/png", "size_bytes": len(PNG)},
        "https://example.com/a.png",
    ]
    assert (bad, problem["field"]) == (422, "messages.0.content.1"), problem


async def test_a_multipart_form_starts_a_run_with_uploaded_files(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"looker": ["a cat"]})
    async with api_env(client, task_queue, config, tmp_path) as api:
        started = await api.http.post(
            "/v1/runs/upload",
            data={"agent": "looker", "text": "what is this?", "session_id": "uploads"},
            files=[
                ("image", ("photo.png", PNG, "image/png")),
                ("file", ("report.pdf", PDF, "application/pdf")),
            ],
        )
        assert started.status_code == 201, started.text
        answer = await result(api, started.json()["run_id"])
        entries = api.env.store.load_entries("local", "uploads")
        bad = await api.http.post(
            "/v1/runs/upload",
            data={"agent": "looker", "text": "and this?"},
            files=[("image", ("notes.png", b"plain text", "image/png"))],
        )
    assert answer["outcome"] == "completed"
    assert entries[0].meta is not None
    [_, image, document] = entries[0].meta["parts"]
    assert image["stored"]["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert document["filename"] == "report.pdf"
    assert document["stored"]["media_type"] == "application/pdf"
    assert_problem(bad, 422, "invalid_request", "input.0.content.1.data")
