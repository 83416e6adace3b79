"""A credential written into a model profile's ``other`` is refused before anything keeps it.

Why: ``other`` is declaration, and declarations are stored (the runtime snapshot, kept forever in
``otherone_snapshots``). Keys must only be referenced (``api_key_env``). So a credential-looking
header (``Authorization``, ``x-api-key``, a ``Bearer`` value, ...) or option is refused when the
configuration loads — in TOML naming file, table and field, in Python by validation — and the
store's snapshot writer refuses one that got past validation anyway. The rules themselves are in
`otherone.credentials`.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from otherone.config import RuntimeConfig, RuntimeSnapshot
from otherone.credentials import credential_paths, is_credential_header
from otherone.definitions import AgentDefinition, ModelOverrides, ModelProfile
from otherone.errors import ConfigurationError
from otherone.store import Store
from otherone.toml_config import load_config

REPO_ROOT = Path(__file__).resolve().parent.parent

CONFIG = """\
[runtime]
default_model = "gpt"

[models.gpt]
provider = "openai"
model = "gpt-4.1-mini"
api_key_env = "OPENAI_API_KEY"
other = {{ extra_headers = {{ "X-Title" = "My agents", {header} = "{value}" }} }}

[agents.assistant]
description = "Answers"
system_prompt = "Be brief."
"""


def secret_value() -> str:
    return f"sk-proj-{secrets.token_hex(20)}"


def write_config(tmp_path: Path, header: str, value: str) -> Path:
    path = tmp_path / "otherone.toml"
    path.write_text(CONFIG.format(header=header, value=value))
    return path


def stored_bytes(directory: Path) -> bytes:
    """Everything SQLite wrote under ``directory`` (database, WAL and journal files)."""
    return b"".join(file.read_bytes() for file in sorted(directory.rglob("*")) if file.is_file())


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("Authorization", "Bearer {key}"),
        ('"x-api-key"', "{key}"),
        ('"X-Auth-Token"', "{key}"),
        ('"X-Custom"', "Bearer {key}"),  # a credential by its value, whatever the name
        ('"X-Custom"', "{key}"),
    ],
)
def test_a_credential_header_is_refused_at_load_naming_file_table_and_field(
    tmp_path: Path, header: str, value: str
) -> None:
    key = secret_value()
    path = write_config(tmp_path, header, value.format(key=key))
    with pytest.raises(ConfigurationError) as caught:
        load_config(path)
    error = caught.value
    name = header.strip('"')
    assert (error.file, error.table, error.field) == (
        str(path),
        "models.gpt",
        f"other.extra_headers.{name}",
    )
    assert str(error).startswith(
        f"file {path}, table [models.gpt], field 'other.extra_headers.{name}': "
    )
    assert "api_key_env" in str(error)
    assert key not in str(error) and key[8:24] not in str(error)


async def test_the_refused_config_leaves_nothing_of_the_key_in_the_store(tmp_path: Path) -> None:
    """`otherone worker` on the refused file: one line naming the field, exit 2, and the SQLite
    store it was given holds nothing of the key (nor does a store written by Python)."""
    key = secret_value()
    path = write_config(tmp_path, "Authorization", f"Bearer {key}")
    data = tmp_path / "data"
    data.mkdir()
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTHERONE_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        OTHERONE_CONFIG=str(path),
        OTHERONE_DATABASE_URL=f"sqlite:///{data / 'store.db'}",
        OTHERONE_DATA_DIR=str(data),
        OTHERONE_TEMPORAL_ADDRESS="127.0.0.1:1",  # never reached: the config is refused first
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "otherone.client.cli",
        "worker",
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    output = (stdout + stderr).decode()
    assert process.returncode == 2, output
    assert "table [models.gpt], field 'other.extra_headers.Authorization'" in output
    assert key not in output
    assert key.encode() not in stored_bytes(data)

    # A store opened and used the way a worker does, with the config refused before it.
    store = Store.open(f"sqlite:///{data / 'store.db'}")
    try:
        with pytest.raises(ConfigurationError):
            load_config(path)
        assert _snapshot_rows(data / "store.db") == []
    finally:
        store.close()
    assert key.encode() not in stored_bytes(data)


def test_python_config_refuses_credentials_in_profiles_and_agent_overrides() -> None:
    key = secret_value()
    with pytest.raises(ValidationError) as caught:
        ModelProfile.model_validate(
            {
                "id": "gpt",
                "provider": "openai",
                "model": "m",
                "other": {"extra_headers": {"x-api-key": key}},
            }
        )
    assert "other" in str(caught.value) and "extra_headers.x-api-key" in str(caught.value)
    assert key not in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        AgentDefinition.model_validate(
            {
                "id": "a",
                "description": "d",
                "model_overrides": {"other": {"extra_headers": {"Authorization": key}}},
            }
        )
    assert "model_overrides.other" in str(caught.value)
    assert "extra_headers.Authorization" in str(caught.value) and key not in str(caught.value)
    with pytest.raises(ValidationError, match="api_key") as caught:
        ModelProfile.model_validate(
            {"id": "gpt", "provider": "openai", "model": "m", "other": {"api_key": key}}
        )
    assert key not in str(caught.value)


def test_runtime_config_refuses_definitions_built_without_validation() -> None:
    key = secret_value()
    profile = ModelProfile(id="gpt", provider="openai", model="m").model_copy(
        update={"other": {"extra_headers": {"Authorization": f"Bearer {key}"}}}
    )
    with pytest.raises(ConfigurationError) as caught:
        RuntimeConfig(models=[profile])
    assert (caught.value.table, caught.value.field) == (
        "models.gpt",
        "other.extra_headers.Authorization",
    )
    agent = AgentDefinition(id="a", description="d").model_copy(
        update={"model_overrides": ModelOverrides.model_construct(other={"token": key})}
    )
    with pytest.raises(ConfigurationError) as caught:
        RuntimeConfig(models=[ModelProfile(id="m", provider="scripted", model="m")], agents=[agent])
    assert (caught.value.table, caught.value.field) == ("agents.a", "model_overrides.other.token")
    assert key not in str(caught.value)


def test_the_snapshot_writer_never_stores_a_credential(tmp_path: Path) -> None:
    """Defence in depth: a snapshot built around every validation is still not written."""
    key = secret_value()
    profile = ModelProfile.model_construct(
        id="gpt",
        provider="openai",
        model="m",
        other={"extra_headers": {"X-Custom": key}},
        script={},
    )
    snapshot = RuntimeSnapshot(
        default_model="gpt",
        agents={"a": AgentDefinition(id="a", description="d")},
        models={"gpt": profile},
        tools={},
        policy=RuntimeConfig().policy,
        limits=RuntimeConfig().limits,
    ).with_version()
    database = tmp_path / "store.db"
    store = Store.open(f"sqlite:///{database}")
    try:
        with pytest.raises(ConfigurationError) as caught:
            store.save_snapshot(snapshot)
        assert (caught.value.table, caught.value.field) == (
            "models.gpt",
            "other.extra_headers.X-Custom",
        )
        assert key not in str(caught.value)
        assert store.load_snapshot(snapshot.version) is None
    finally:
        store.close()
    assert _snapshot_rows(database) == []
    assert key.encode() not in stored_bytes(tmp_path)


def _snapshot_rows(database: Path) -> list[Any]:
    with sqlite3.connect(database) as connection:
        return connection.execute("SELECT version, body FROM otherone_snapshots").fetchall()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Authorization", "anything"),
        ("proxy-authorization", "anything"),
        ("Cookie", "a=b"),
        ("X-Api-Key", "anything"),
        ("api_key", "anything"),
        ("X-Goog-Api-Key", "anything"),
        ("X-Auth-Token", "anything"),
        ("Ocp-Apim-Subscription-Key", "anything"),
        ("X-Client-Secret", "anything"),
        ("X-Custom", "Bearer abc.def"),
        ("X-Custom", "basic dXNlcjpwYXNz"),
        ("X-Custom", "sk-ant-api03-abcdefgh"),
        ("X-Custom", "ghp_0123456789abcdefghij0123"),
        ("X-Custom", "AKIAABCDEFGHIJKLMNOP"),
        ("X-Custom", "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.sig"),
        ("X-Custom", "3f2a9c0e1b7d4a6f8e5c2b1a0d9e8f7c"),  # 32 hex digits
        ("X-Custom", "QWxhZGRpbjpvcGVuIHNlc2FtZQ0123"),  # base64
    ],
)
def test_credential_headers(name: str, value: str) -> None:
    assert is_credential_header(name, value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HTTP-Referer", "https://example.org/my-app"),
        ("X-Title", "My agents"),
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "fine-grained-tool-streaming-2025-05-14"),
        ("OpenAI-Organization", "org-abc123def456"),
        ("X-Request-Id", "123e4567-e89b-12d3-a456-426614174000"),
    ],
)
def test_ordinary_headers_are_not_credentials(name: str, value: str) -> None:
    assert not is_credential_header(name, value)


def test_body_options_are_checked_by_key_name_and_value_shape() -> None:
    assert credential_paths({"reasoning_effort": "high", "provider": {"order": ["a"]}}) == []
    assert credential_paths({"prompt_cache_key": "user-42", "max_tokens": 5}) == []
    assert credential_paths({"stop": ["Token count", "Basic answer", "bearer of news"]}) == []
    assert credential_paths({"api_key": "x", "nested": {"list": ["Bearer abcdefgh"]}}) == [
        "api_key",
        "nested.list.0",
    ]


@pytest.mark.parametrize(
    ("base_url", "said"),
    [
        ("https://proxy:{key}@gateway.example/v1", "must not carry a password"),
        ("https://gateway.example/v1?key={key}", "query parameter key"),
        ("https://gateway.example/v1?api-version=1&access_token={key}", "access_token"),
    ],
)
def test_a_key_in_base_url_is_refused_at_load(tmp_path: Path, base_url: str, said: str) -> None:
    """A key written into base_url (user info, ``?key=``) reached the stored snapshot and every
    connection error's message; refused like one in `extra_headers`. A plain query
    (``?api-version=``, Azure's) is fine."""
    key = secret_value()
    path = tmp_path / "otherone.toml"
    path.write_text(
        f'[models.gpt]\nprovider = "openai"\nmodel = "m"\nbase_url = "{base_url.format(key=key)}"\n'
    )
    with pytest.raises(ConfigurationError) as caught:
        load_config(path)
    assert (caught.value.table, caught.value.field) == ("models.gpt", "base_url")
    assert said in str(caught.value) and "api_key_env" in str(caught.value)
    assert key not in str(caught.value)
    fine = "https://r.example/openai/deployments/d?api-version=2024-10-21"
    assert ModelProfile(id="p", provider="openai", model="m", base_url=fine).base_url == fine
