"""Images and files in user messages (issue 44): refused at entry when bad, stored once by
reference (never in Temporal's history), and sent to each provider in its own wire shape."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.history.v1 import History
from temporalio.client import Client

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.errors import FailureCode, InvalidRequestError
from otherone.part_storage import InvalidPartError, store_request_parts
from otherone.parts import FilePart, ImagePart, PartRef, TextPart
from otherone.runs import (
    AgentCallRequest,
    AgentRunRequest,
    InputMessage,
    RunOutcome,
    RuntimeContext,
    SessionTarget,
)
from otherone.store import Store
from tests.fixtures.providers.wire_server import (
    Reply,
    Seen,
    WireServer,
    anthropic_stream,
    openai_stream,
)
from tests.harness import agent_env, scripted_config, wait_until
from tests.providers import RecordingProvider

#: The smallest PNG and PDF headers: what media types are detected from.
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))
PDF = b"%PDF-1.4\n1 0 obj << >> endobj\n%%EOF\n"
KEY_ENV = "OTHERONE_TEST_MULTIMODAL_KEY"


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _b64(content: bytes) -> str:
    return base64.b64encode(content).decode()


def _request(*parts: Any, partition: str = "default", agent: str = "looker") -> AgentRunRequest:
    message = InputMessage(role="user", content=(TextPart(text="what is this?"), *parts))
    return AgentRunRequest(
        entry_agent=agent,
        input=(message,),
        runtime_context=RuntimeContext(partition_key=partition),
    )


def _artifact_count(database: Path) -> int:
    with sqlite3.connect(database) as connection:
        return int(connection.execute("select count(*) from otherone_artifacts").fetchone()[0])


# -- entry: checks and storage -----------------------------------------------------------------


def test_parts_are_stored_once_by_content_and_carried_as_references(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    image = tmp_path / "photo.png"
    image.write_bytes(PNG)
    request = _request(
        ImagePart.from_path(image),
        ImagePart.from_bytes(PNG),  # the same bytes again: the same artifact
        ImagePart.from_url(f"data:image/png;base64,{_b64(PNG)}"),
        FilePart.from_bytes(PDF).model_copy(update={"filename": "report.pdf"}),
        ImagePart.from_url("https://example.com/cat.png"),
    )
    stored = store_request_parts(store, request)
    parts = stored.input[0].content  # type: ignore[union-attr]
    assert isinstance(parts, tuple)
    refs = [part.stored for part in parts[1:5]]  # type: ignore[union-attr]
    png = PartRef(sha256=_sha(PNG), media_type="image/png", size_bytes=len(PNG))
    pdf = PartRef(sha256=_sha(PDF), media_type="application/pdf", size_bytes=len(PDF))
    assert refs == [png, png, png, pdf]
    assert parts[4].filename == "report.pdf"  # type: ignore[union-attr]
    assert parts[5] == ImagePart(url="https://example.com/cat.png")  # passed on as given
    assert _b64(PNG) not in stored.model_dump_json() and '"path"' not in stored.model_dump_json(
        exclude_none=True
    )
    assert _artifact_count(tmp_path / "store.db") == 2
    artifact = store.get_artifact("default", _sha(PNG))
    assert artifact is not None and artifact.content == PNG
    assert store.get_artifact("other", _sha(PNG)) is None  # scoped by partition
    # Equal requests store nothing new and keep one fingerprint (idempotent starts).
    assert store_request_parts(store, request).fingerprint() == stored.fingerprint()
    assert _artifact_count(tmp_path / "store.db") == 2


def test_entry_storage_on_each_backend_is_once_per_partition(store: Store) -> None:
    """SQLite and PostgreSQL alike: one artifact per content and partition, and a refused
    request (its second part is bad) stores nothing of its first."""
    image = PNG + bytes(5 * 1024 * 1024)
    digest = _sha(image)
    refused = _request(ImagePart.from_bytes(image), ImagePart.from_bytes(b"not an image"))
    with pytest.raises(InvalidPartError):
        store_request_parts(store, refused)
    assert store.get_artifact("default", digest) is None
    for _ in range(2):
        store_request_parts(store, _request(ImagePart.from_bytes(image)))
    store_request_parts(store, _request(ImagePart.from_bytes(image), partition="tenant-b"))
    mine, theirs = store.get_artifact("default", digest), store.get_artifact("tenant-b", digest)
    assert mine is not None and mine.content == image and mine.media_type == "image/png"
    assert theirs is not None and theirs.partition_key == "tenant-b"


@pytest.mark.parametrize(
    ("part", "field", "words"),
    [
        (ImagePart.from_bytes(b""), "input.0.content.1.data", "must not be empty"),
        (ImagePart(data="not base64!"), "input.0.content.1.data", "must be base64"),
        (ImagePart.from_bytes(b"plain text"), "input.0.content.1.data", "unsupported media"),
        (ImagePart.from_bytes(PDF), "input.0.content.1.data", "the bytes are application/pdf"),
        (FilePart.from_bytes(PNG), "input.0.content.1.data", "the bytes are image/png"),
        (ImagePart.from_bytes(PNG, "image/jpeg"), "input.0.content.1.data", "'image/jpeg' was"),
        (ImagePart.from_path("/nonexistent/photo.png"), "input.0.content.1.path", "cannot read"),
        (ImagePart.from_url("data:image/png,rawtext"), "input.0.content.1.url", "must be base64"),
    ],
)
def test_bad_parts_are_refused_naming_the_part(
    tmp_path: Path, part: ImagePart | FilePart, field: str, words: str
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    good = ImagePart.from_bytes(PNG)
    with pytest.raises(InvalidPartError, match=words) as raised:
        store_request_parts(store, _request(part, good))
    assert raised.value.field == field
    assert _artifact_count(tmp_path / "store.db") == 0  # nothing half-written


def test_zero_bytes_too_big_nul_and_non_http_urls_are_refused(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(InvalidPartError, match="must not be empty") as raised:
        store_request_parts(store, _request(ImagePart.from_path(empty)))
    assert raised.value.field == "input.0.content.1.path"
    big = tmp_path / "big.png"
    with big.open("wb") as file:  # 50 MB, mostly a hole: only the header is written
        file.write(PNG)
        file.truncate(50 * 1024 * 1024)
    with pytest.raises(InvalidPartError, match="too big") as raised:
        store_request_parts(store, _request(ImagePart.from_path(big)))
    assert raised.value.field == "input.0.content.1.path"
    with pytest.raises(InvalidPartError, match="too big"):
        store_request_parts(store, _request(ImagePart.from_bytes(PNG)), max_bytes=10)
    nul = {"type": "file", "data": _b64(PDF), "filename": "re\x00port.pdf"}
    body = {"entry_agent": "looker", "input": [{"role": "user", "content": [nul]}]}
    with pytest.raises(InvalidRequestError, match="must not contain a NUL") as typed:
        build_request(**body)  # what the CLI and HTTP API use: the field, no traceback
    assert typed.value.field == "input.0.content.0.file.filename"
    with pytest.raises(ValidationError, match="must be an http"):
        _request(ImagePart.from_url("ftp://example.com/cat.png"))
    with pytest.raises(ValidationError, match="only user messages"):
        InputMessage(role="assistant", content=(ImagePart.from_url("https://x.test/a.png"),))
    with pytest.raises(InvalidPartError, match="needs a store"):
        store_request_parts(None, _request(ImagePart.from_bytes(PNG)))
    assert _artifact_count(tmp_path / "store.db") == 0


# -- runs on each provider: the exact JSON the provider receives --------------------------------


def _config(provider: str, base_url: str, modalities: list[str] | None = None) -> RuntimeConfig:
    profile = ModelProfile.model_validate(
        {
            "id": "wire",
            "provider": provider,
            "model": "vision-model",
            "base_url": base_url if provider == "anthropic" else f"{base_url}/v1",
            "api_key_env": KEY_ENV,
            "max_tokens": 64,
            "input_modalities": modalities,
        }
    )
    agent = AgentDefinition(id="looker", description="Looks.", system_prompt="You look.")
    return RuntimeConfig(agents=[agent], models=[profile])


def _answer(provider: str) -> Any:
    def answer(seen: Seen) -> Reply:
        stream = anthropic_stream if provider == "anthropic" else openai_stream
        return Reply(body=stream(["A cat."], []))

    return answer


def _user_content(provider: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    users = [message for message in body["messages"] if message["role"] == "user"]
    return users[-1]["content"]  # type: ignore[no-any-return]


EXPECTED = {
    "openai": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(PNG)}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {
            "type": "file",
            "file": {
                "filename": "report.pdf",
                "file_data": f"data:application/pdf;base64,{_b64(PDF)}",
            },
        },
    ],
    "anthropic": [
        {"type": "text", "text": "what is this?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": _b64(PNG)},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": _b64(PDF)},
        },
    ],
}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_images_and_files_reach_each_provider_in_its_wire_shape(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-multimodal")
    image = tmp_path / "photo.png"
    image.write_bytes(PNG)
    request = _request(
        ImagePart.from_path(image),
        ImagePart.from_url("https://example.com/cat.png"),
        FilePart.from_bytes(PDF).model_copy(update={"filename": "report.pdf"}),
    )
    async with (
        WireServer(_answer(provider)) as server,
        agent_env(client, task_queue, _config(provider, server.url), tmp_path) as env,
    ):
        result = await env.agents.run(request)
        history = await client.get_workflow_handle(result.run_id).fetch_history()
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "A cat."
    content = _user_content(provider, server.requests[0].body)
    if provider == "anthropic":  # the prompt cache marks the last block; the rest is exact
        content[-1].pop("cache_control", None)
    assert content == EXPECTED[provider]
    assert _b64(PNG) not in history.to_json()  # the bytes never entered the history


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_text_only_profile_refuses_an_image_before_any_provider_call(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-multimodal")
    config = _config(provider, "http://127.0.0.1:9", modalities=["text"])
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(_request(ImagePart.from_bytes(PNG)))
        # A client that knows the workers' configuration refuses it before anything starts.
        knowing = AgentClient(client, task_queue=task_queue, store=env.store, config=config)
        with pytest.raises(InvalidRequestError, match="does not take image input") as refused:
            await knowing.start(_request(ImagePart.from_bytes(PNG + b"another")))
        assert refused.value.field == "input"
        assert env.store.get_artifact("default", _sha(PNG + b"another")) is None
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None
    assert result.failure.code is FailureCode.INVALID_REQUEST
    assert "does not take image input" in result.failure.message


async def test_another_partition_cannot_use_an_image_by_its_reference(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"looker": ["seen"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        mine = await env.agents.run(_request(ImagePart.from_bytes(PNG), partition="tenant-a"))
        assert mine.outcome is RunOutcome.COMPLETED, mine.failure
        ref = PartRef(sha256=_sha(PNG), media_type="image/png", size_bytes=len(PNG))
        theirs = await env.agents.run(_request(ImagePart(stored=ref), partition="tenant-b"))
    assert theirs.outcome is RunOutcome.FAILED
    assert theirs.failure is not None and theirs.failure.code is FailureCode.INVALID_REQUEST
    assert "not stored in this run's partition" in theirs.failure.message
    assert env.store.get_artifact("tenant-b", _sha(PNG)) is None


# -- history size --------------------------------------------------------------------------------


async def _history_bytes(client: Client, run_id: str) -> int:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return History(events=history.events).ByteSize()


async def test_a_5_mb_image_leaves_the_history_within_a_few_hundred_bytes_of_text(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    image = PNG + bytes(5 * 1024 * 1024)
    config = scripted_config({"looker": ["seen", "seen"]})
    async with agent_env(client, task_queue, config, tmp_path) as env:
        text = await env.agents.run(
            build_request(entry_agent="looker", input="what is this?", idempotency_key="k-text-0")
        )
        request = _request(ImagePart.from_bytes(image)).model_copy(
            update={"idempotency_key": "k-image-0"}
        )
        with_image = await env.agents.run(request)
    assert text.outcome is with_image.outcome is RunOutcome.COMPLETED
    text_size = await _history_bytes(client, text.run_id)
    image_size = await _history_bytes(client, with_image.run_id)
    assert 0 < image_size - text_size < 600, (text_size, image_size)
    stored = env.store.get_artifact("default", _sha(image))
    assert stored is not None and stored.size_bytes == len(image)


# -- a message with an image sent to a running run -----------------------------------------------


async def test_a_message_with_an_image_sent_to_a_running_run_reaches_the_next_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("looker", 1)
    config = scripted_config({"looker": ["first answer", "a cat"]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(
            build_request(
                entry_agent="looker",
                input="hello",
                runtime_context={"partition_key": "tenant-s"},
            )
        )
        await asyncio.wait_for(provider.started.wait(), 10)
        with pytest.raises(InvalidPartError, match="unsupported media") as refused:
            await handle.send_message([(TextPart(text="and this?"), ImagePart.from_bytes(b"x"))])
        assert refused.value.field == "messages.0.1.data"
        await handle.send_message([[TextPart(text="and this?"), ImagePart.from_bytes(PNG)]])
        await wait_until(lambda: _queued(handle), message="the message queued")
        gate.set()
        result = await handle.result()
        history = await client.get_workflow_handle(result.run_id).fetch_history()
        entries = env.store.load_entries("tenant-s", result.session_id)
    assert result.text == "a cat"
    assert provider.calls()[1].messages[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "and this?"},
            {"type": "image", "media_type": "image/png", "data": _b64(PNG)},
        ],
    }
    assert entries[2].content == "and this?" and entries[2].meta is not None
    assert env.store.get_artifact("tenant-s", _sha(PNG)) is not None
    assert _b64(PNG) not in history.to_json()


async def _queued(handle: Any) -> bool:
    record = await handle.record()
    return record is not None


# -- compaction ------------------------------------------------------------------------------------


async def test_images_count_toward_the_window_and_a_summary_names_those_it_drops(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config({"looker": ["first", "second", "third"]})
    session = {"session_id": "pictures", "context_window": 5000}
    async with agent_env(client, task_queue, config, tmp_path) as env:
        for index in range(3):  # 1,600 tokens an image: the third run passes 80% of 5,000
            image = PNG + bytes([index])
            request = _request(ImagePart.from_bytes(image), partition="local")
            target = SessionTarget.model_validate(session)
            result = await env.agents.run(request.model_copy(update={"session": target}))
            assert result.outcome is RunOutcome.COMPLETED, result.failure
        entries = env.store.load_entries("local", "pictures")
        compaction = env.store.latest_compaction("local", "pictures")
    assert entries[0].tokens is not None and entries[0].tokens >= 1600
    assert compaction is not None
    first = _sha(PNG + bytes([0]))
    assert "Attachments of the summarised messages (no longer shown): " in compaction.summary
    assert f"[image image/png {len(PNG) + 1} bytes sha256:{first[:12]}]" in compaction.summary


# -- an agent call's images ------------------------------------------------------------------------


async def test_a_trusted_agent_call_passes_an_image_to_its_child_in_the_same_tenant(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    gate = provider.gate("caller", 1)
    agents = [
        AgentDefinition(id="caller", description="calls", callable_agents=["looker"]),
        AgentDefinition(id="looker", description="looks"),
    ]
    config = scripted_config({"caller": ["done"], "looker": ["a cat", "a dog"]}, agents=agents)
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(
            build_request(
                entry_agent="caller", input="go", runtime_context={"partition_key": "tenant-c"}
            )
        )
        await asyncio.wait_for(provider.started.wait(), 10)
        request = AgentCallRequest(target="looker", task="look", parts=(ImagePart.from_bytes(PNG),))
        called = await env.agents.call_agent(handle.run_id, "c1", request)
        # Another tenant's image, by reference: not found in this run's partition.
        other = PartRef(sha256=_sha(PDF), media_type="application/pdf", size_bytes=len(PDF))
        env.store.put_artifact(
            "tenant-d", artifact_id=other.sha256, run_id="x", name="x", media_type="x", content=PDF
        )
        foreign = AgentCallRequest(target="looker", task="look", parts=(FilePart(stored=other),))
        refused = await env.agents.call_agent(handle.run_id, "c2", foreign)
        gate.set()
        await handle.result()
    assert called.outcome is RunOutcome.COMPLETED, called.failure
    [child_call] = provider.calls("looker")  # the foreign reference never reached a model
    last = child_call.messages[-1]
    assert last["content"][0]["type"] == "text" and "look" in last["content"][0]["text"]
    assert last["content"][1] == {"type": "image", "media_type": "image/png", "data": _b64(PNG)}
    assert refused.outcome is RunOutcome.FAILED and refused.failure is not None
    assert "not stored in this run's partition" in refused.failure.message
