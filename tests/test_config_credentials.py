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
from otherone.mcp_servers import McpServer
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
        ("https://proxy:{key}@gateway.example/v1", "user information"),
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


# --------------------------------------------------------------------------- issue 51
# Secrets written where the *name* of a secret belongs, in a URL, in nested options or in an
# agent's metadata: refused at load (TOML and Python), naming the field, never the value.


def assert_not_echoed(text: str, secret: str) -> None:
    """Neither the secret nor any 16-character piece of it appears in ``text``."""
    assert secret not in text
    pieces = {secret[start : start + 16] for start in range(max(len(secret) - 15, 1))}
    assert not [piece for piece in pieces if piece in text], text


#: Secrets of each known shape (random each run), as someone would paste them.
SECRET_SHAPES = {
    "github classic": lambda: f"ghp_{secrets.token_hex(18)}",
    "github fine-grained": lambda: f"github_pat_11{secrets.token_hex(20)}",
    "openai": lambda: f"sk-proj-{secrets.token_hex(20)}",
    "aws": lambda: "AKIA" + secrets.token_hex(8).upper(),
    "jwt": lambda: f"eyJ{secrets.token_hex(10)}.eyJ{secrets.token_hex(10)}.{secrets.token_hex(8)}",
    "opaque": lambda: secrets.token_hex(20),
}
SHAPES = pytest.mark.parametrize("shape", SECRET_SHAPES, ids=str)
#: Variable names that must still load everywhere a name is expected.
ORDINARY_NAMES = ["OPENAI_API_KEY", "GITHUB_TOKEN", "MY_SERVICE_KEY_2", "_PRIVATE", "X"]

MCP_GITHUB = """\
[mcp.github]
command = "github-mcp-server"
env = {{ GITHUB_PERSONAL_ACCESS_TOKEN = "{value}" }}
"""
MCP_SEARCH = """\
[mcp.search]
url = "{url}"
headers_env = {{ Authorization = "{value}" }}
"""
MODEL = """\
[models.gpt]
provider = "openai"
model = "m"
api_key_env = "{value}"
base_url = "{url}"
"""


def refused(tmp_path: Path, body: str) -> ConfigurationError:
    path = tmp_path / "otherone.toml"
    path.write_text(body)
    with pytest.raises(ConfigurationError) as caught:
        load_config(path)
    return caught.value


def loaded(tmp_path: Path, body: str) -> RuntimeConfig:
    path = tmp_path / "otherone.toml"
    path.write_text(body)
    return load_config(path)


@SHAPES
def test_a_key_as_api_key_env_is_refused_in_toml(tmp_path: Path, shape: str) -> None:
    key = SECRET_SHAPES[shape]()
    error = refused(tmp_path, MODEL.format(value=key, url="https://api.openai.com/v1"))
    assert (error.table, error.field) == ("models.gpt", "api_key_env")
    assert "looks like a credential" in str(error) and "export OPENAI_API_KEY=" in str(error)
    assert_not_echoed(str(error), key)


@SHAPES
def test_a_key_as_an_mcp_env_value_is_refused_in_toml(tmp_path: Path, shape: str) -> None:
    key = SECRET_SHAPES[shape]()
    error = refused(tmp_path, MCP_GITHUB.format(value=key))
    assert (error.table, error.field) == ("mcp.github", "env.GITHUB_PERSONAL_ACCESS_TOKEN")
    message = str(error)
    assert "looks like a credential" in message
    # The ${VAR} form to write instead.
    assert 'write "${GITHUB_PERSONAL_ACCESS_TOKEN}"' in message
    assert "set GITHUB_PERSONAL_ACCESS_TOKEN on the worker" in message
    assert_not_echoed(message, key)


@SHAPES
def test_a_key_as_an_mcp_header_value_is_refused_in_toml(tmp_path: Path, shape: str) -> None:
    key = SECRET_SHAPES[shape]()
    error = refused(tmp_path, MCP_SEARCH.format(url="https://mcp.example.com/mcp", value=key))
    assert (error.table, error.field) == ("mcp.search", "headers_env.Authorization")
    assert "looks like a credential" in str(error) and "headers_env = {" in str(error)
    assert_not_echoed(str(error), key)


def test_a_key_as_an_mcp_env_name_is_refused_without_naming_it(tmp_path: Path) -> None:
    """The key side of env: pydantic would name the field by the key, that is by the secret."""
    key = SECRET_SHAPES["github classic"]()
    body = f'[mcp.github]\ncommand = "x"\nenv = {{ "{key}" = "GITHUB_TOKEN" }}\n'
    error = refused(tmp_path, body)
    assert error.table == "mcp.github" and "a name in env looks like a credential" in str(error)
    assert_not_echoed(str(error), key)


@SHAPES
def test_keys_in_secret_name_fields_are_refused_in_python(shape: str) -> None:
    key = SECRET_SHAPES[shape]()
    with pytest.raises(ValidationError) as caught:
        ModelProfile(id="gpt", provider="openai", model="m", api_key_env=key)
    assert "api_key_env" in str(caught.value) and "looks like a credential" in str(caught.value)
    assert_not_echoed(str(caught.value), key)
    for field, target in (("env", "GITHUB_PERSONAL_ACCESS_TOKEN"), ("headers_env", "X-Token")):
        table = {"command": "x"} if field == "env" else {"url": "https://mcp.example.com/mcp"}
        with pytest.raises(ValidationError) as caught:
            McpServer.model_validate({"name": "s", **table, field: {target: key}})
        assert f"{field}.{target}" in str(caught.value)
        assert "looks like a credential" in str(caught.value)
        assert_not_echoed(str(caught.value), key)
        assert_not_echoed(repr(caught.value), key)


@SHAPES
def test_a_key_in_a_reference_or_an_mcp_literal_is_refused_without_echo(shape: str) -> None:
    """``${<key>}`` (a key pasted where the variable's name belongs), a literal header and
    an argument holding one: refused, naming the place, never the key."""
    key = SECRET_SHAPES[shape]()
    for table, field in (
        ({"command": "x", "env": {"NOTE": f"prefix ${{{key}}}"}}, "env.NOTE"),
        ({"url": "https://mcp.example.com/mcp", "headers": {"X-Note": key}}, "headers.X-Note"),
        ({"command": "x", "args": ["--x", f"sk-{key}"]}, "args.1"),
    ):
        with pytest.raises(ValidationError) as caught:
            McpServer.model_validate({"name": "s", **table})
        assert field in str(caught.value) and "credential" in str(caught.value)
        assert_not_echoed(str(caught.value), key)
        assert_not_echoed(repr(caught.value), key)


def test_pydantic_never_echoes_a_secret_in_a_name_field() -> None:
    """A secret of no known shape fails the name pattern: pydantic's message must not show
    it either (``input_value=...``), in Python as in TOML."""
    secret = "correct horse battery staple 2024!"
    with pytest.raises(ValidationError) as caught:
        McpServer(name="s", command="x", env={"PASSWORD": secret})
    assert "env.PASSWORD" in str(caught.value)
    assert_not_echoed(str(caught.value), secret)
    with pytest.raises(ValidationError) as caught:
        ModelProfile(id="gpt", provider="openai", model="m", api_key_env=secret)
    assert_not_echoed(str(caught.value), secret)


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_variable_names_load(tmp_path: Path, name: str) -> None:
    body = MODEL.format(value=name, url="https://api.openai.com/v1")
    body += MCP_GITHUB.format(value=name)
    body += MCP_SEARCH.format(url="https://mcp.example.com/mcp", value=name)
    body = body.replace(f'TOKEN = "{name}"', f'TOKEN = "${{{name}}}"')  # env's ${VAR} form
    config = loaded(tmp_path, body)
    assert config.models["gpt"].api_key_env == name
    assert config.mcp_servers["github"].env == {"GITHUB_PERSONAL_ACCESS_TOKEN": f"${{{name}}}"}
    assert config.mcp_servers["search"].headers_env == {"Authorization": name}


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_a_bare_name_in_env_is_refused_with_its_reference_form(tmp_path: Path, name: str) -> None:
    """The form env had before ${VAR} references (the value named the variable) is not
    passed as text: the message says what to write."""
    error = refused(tmp_path, MCP_GITHUB.format(value=name))
    assert (error.table, error.field) == ("mcp.github", "env.GITHUB_PERSONAL_ACCESS_TOKEN")
    assert f'write "${{{name}}}" to read the worker variable {name}' in str(error)


#: URLs with a key in them, {key} standing for it, and where the message says it is.
SECRET_URLS = {
    "user and password": ("https://proxy:{key}@gateway.example/v1", "user information"),
    "user name only": ("http://{key}@gateway.example/v1", "user information"),
    "empty password": ("http://{key}:@gateway.example/v1", "user information"),
    "?token=": ("https://gateway.example/v1?token={key}", "query parameter token"),
    "?api_key=": ("https://gateway.example/v1?api_key={key}", "query parameter api_key"),
    "?sig=": ("https://gateway.example/v1?sv=1&sig={key}", "query parameter sig"),
    "?code=": ("https://gateway.example/v1?code={key}", "query parameter code"),
    "a keyed value": ("https://gateway.example/v1?x={key}", "query parameter x"),
    "a path segment": ("https://gateway.example/v1/{key}/chat", "a path segment"),
    "a ;param": ("https://gateway.example/v1;token={key}", "a path parameter"),
    "the fragment": ("https://gateway.example/v1#access_token={key}", "fragment parameter"),
}
URL_CASES = pytest.mark.parametrize(
    ("url", "said"), SECRET_URLS.values(), ids=list(SECRET_URLS.keys())
)
ORDINARY_URLS = [
    "https://x.openai.azure.com/openai/deployments/d?api-version=2024-10-21",
    "http://127.0.0.1:11434/v1",
    "http://[::1]:8080/v1",
    "https://gateway.example:8443/v1",
]


@URL_CASES
def test_a_key_in_a_model_base_url_is_refused(tmp_path: Path, url: str, said: str) -> None:
    key = secret_value()
    body = MODEL.format(value="OPENAI_API_KEY", url=url.format(key=key))
    error = refused(tmp_path, body)
    assert (error.table, error.field) == ("models.gpt", "base_url")
    assert said in str(error) and "api_key_env" in str(error)
    assert_not_echoed(str(error), key)
    with pytest.raises(ValidationError) as caught:
        ModelProfile(id="gpt", provider="openai", model="m", base_url=url.format(key=key))
    assert "base_url" in str(caught.value) and said in str(caught.value)
    assert_not_echoed(str(caught.value), key)


@URL_CASES
def test_a_key_in_an_mcp_url_is_refused(tmp_path: Path, url: str, said: str) -> None:
    key = secret_value()
    error = refused(tmp_path, MCP_SEARCH.format(url=url.format(key=key), value="SEARCH_AUTH"))
    assert (error.table, error.field) == ("mcp.search", "url")
    assert said in str(error) and 'headers = { Authorization = "Bearer ${' in str(error)
    assert_not_echoed(str(error), key)
    with pytest.raises(ValidationError) as caught:
        McpServer(name="search", url=url.format(key=key))
    assert "url" in str(caught.value) and "headers = {" in str(caught.value)
    assert_not_echoed(str(caught.value), key)


@pytest.mark.parametrize("url", ORDINARY_URLS)
def test_ordinary_urls_load(tmp_path: Path, url: str) -> None:
    config = loaded(
        tmp_path, MODEL.format(value="K", url=url) + MCP_SEARCH.format(url=url, value="A")
    )
    assert config.models["gpt"].base_url == url and config.mcp_servers["search"].url == url


AGENT = """\
[models.m]
provider = "scripted"
model = "m"

[agents.assistant]
description = "Answers"
{line}
"""


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('metadata = {{ api_key = "{key}" }}', "metadata.api_key"),
        ('metadata = {{ deploy = {{ password = "pw" }} }}', "metadata.deploy.password"),
        ('metadata = {{ notes = ["{key}"] }}', "metadata.notes.0"),
        ('model_overrides = {{ other = {{ token = "t" }} }}', "model_overrides.other.token"),
        (
            'model_overrides = {{ other = {{ metadata = {{ password = "pw" }} }} }}',
            "model_overrides.other.metadata.password",
        ),
    ],
    ids=["metadata key", "nested metadata key", "metadata value", "token option", "nested"],
)
def test_credentials_in_agent_metadata_and_nested_options_are_refused(
    tmp_path: Path, line: str, field: str
) -> None:
    key = secret_value()
    error = refused(tmp_path, AGENT.format(line=line.format(key=key)))
    assert (error.table, error.field) == ("agents.assistant", field)
    assert "must not carry credentials" in str(error)
    assert_not_echoed(str(error), key)


@pytest.mark.parametrize(
    "other",
    [
        '{ token = "t0ps3cret" }',
        '{ secret = "s" }',
        '{ passphrase = "p" }',
        '{ metadata = { password = "p" } }',
        '{ provider = { auth = { refresh_token = "r" } } }',
    ],
)
def test_credentials_in_a_profiles_other_are_refused_at_any_depth(
    tmp_path: Path, other: str
) -> None:
    body = f'[models.gpt]\nprovider = "openai"\nmodel = "m"\nother = {other}\n'
    error = refused(tmp_path, body)
    assert error.table == "models.gpt" and error.field is not None
    assert error.field.startswith("other.") and "api_key_env" in str(error)


def test_ordinary_options_and_metadata_still_load(tmp_path: Path) -> None:
    body = """\
[models.gpt]
provider = "anthropic"
model = "m"

[models.gpt.other]
max_tokens = 5
max_completion_tokens = 5
top_k = 4
stop = ["Token count"]
reasoning_effort = "high"
thinking = { type = "enabled", budget_tokens = 2048 }
prompt_cache_key = "user-42"
response_format = { type = "json_schema", json_schema = { schema = { properties = { password = { type = "string" } } } } }
extra_headers = { "X-Title" = "My agents", "anthropic-beta" = "fine-grained-tool-streaming-2025-05-14" }

[agents.assistant]
description = "Answers"
metadata = { owner = "team-a", session_id = "s1", tags = ["x"], max_tokens = 10 }
"""  # noqa: E501
    config = loaded(tmp_path, body)
    assert config.models["gpt"].other["top_k"] == 4
    assert config.agents["assistant"].metadata["owner"] == "team-a"


def test_python_definitions_refuse_metadata_and_nested_credentials() -> None:
    key = secret_value()
    with pytest.raises(ValidationError) as caught:
        AgentDefinition(id="a", description="d", metadata={"api_key": key})
    assert "metadata" in str(caught.value) and "api_key" in str(caught.value)
    assert_not_echoed(str(caught.value), key)
    with pytest.raises(ValidationError) as caught:
        ModelProfile(id="gpt", provider="openai", model="m", other={"metadata": {"password": key}})
    assert "metadata.password" in str(caught.value)
    assert_not_echoed(str(caught.value), key)


def test_runtime_config_and_snapshot_writer_check_metadata_urls_and_names(
    tmp_path: Path,
) -> None:
    """Definitions built without validation: `RuntimeConfig` refuses them, and the store's
    snapshot writer (the last line) refuses a snapshot holding one."""
    key = secret_value()
    agent = AgentDefinition(id="a", description="d").model_copy(
        update={"metadata": {"deploy": {"api_key": key}}}
    )
    scripted = ModelProfile(id="m", provider="scripted", model="m")
    with pytest.raises(ConfigurationError) as caught:
        RuntimeConfig(models=[scripted], agents=[agent])
    assert (caught.value.table, caught.value.field) == ("agents.a", "metadata.deploy.api_key")
    assert_not_echoed(str(caught.value), key)
    for update, field in (
        ({"base_url": f"https://{key}@h/v1"}, "base_url"),
        ({"api_key_env": key}, "api_key_env"),
    ):
        profile = ModelProfile(id="gpt", provider="openai", model="m").model_copy(update=update)
        with pytest.raises(ConfigurationError) as caught:
            RuntimeConfig(models=[profile])
        assert (caught.value.table, caught.value.field) == ("models.gpt", field)
        assert_not_echoed(str(caught.value), key)
    for update, field in (
        ({"command": "x", "env": {"TOKEN": key}}, "env.TOKEN"),
        ({"command": "x", "env": {"NOTE": f"${{{key}}}"}}, "env.NOTE"),
        ({"command": "x", "args": ("--flag", f"{key}")}, "args.1"),
        ({"url": "https://h/mcp", "headers": {"X-A": f"Bearer {key}"}}, "headers.X-A"),
    ):
        server = McpServer.model_construct(name="gh", **update)
        with pytest.raises(ConfigurationError) as caught:
            RuntimeConfig(mcp_servers=[server])
        assert (caught.value.table, caught.value.field) == ("mcp.gh", field)
        assert_not_echoed(str(caught.value), key)

    snapshot = RuntimeSnapshot(
        default_model="m",
        agents={"a": agent},
        models={"m": scripted},
        tools={},
        policy=RuntimeConfig().policy,
        limits=RuntimeConfig().limits,
    ).with_version()
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        with pytest.raises(ConfigurationError) as caught:
            store.save_snapshot(snapshot)
        assert (caught.value.table, caught.value.field) == ("agents.a", "metadata.deploy.api_key")
        assert_not_echoed(str(caught.value), key)
    finally:
        store.close()
    assert key.encode() not in stored_bytes(tmp_path)


def test_an_unresolved_mcp_name_is_named_by_its_field_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The name a field holds is not repeated: it could be a secret pasted in its place."""
    from otherone.activities.mcp_transports import McpUnavailable, server_transport

    name = "UNSET_VARIABLE_FOR_THIS_TEST_ONLY"
    monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTHERONE_SECRETS_FILE", raising=False)
    server = McpServer(name="s", url="https://mcp.example.com/mcp", headers_env={"X-A": name})
    with pytest.raises(McpUnavailable) as caught:
        server_transport(server, lambda status: None)
    assert "headers_env.X-A names a variable that is neither" in str(caught.value)
    assert name not in str(caught.value)


def test_a_missing_api_key_names_its_variable_unless_that_is_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator needs the variable's name; a key pasted in its place (refused at load,
    here built around that) is named by its field instead."""
    from otherone.activities.providers.base import ProviderError
    from otherone.activities.providers.secrets import resolve_api_key

    monkeypatch.delenv("OTHERONE_SECRETS_FILE", raising=False)
    monkeypatch.delenv("UNSET_KEY_FOR_THIS_TEST_ONLY", raising=False)
    plain = ModelProfile(
        id="gpt", provider="openai", model="m", api_key_env="UNSET_KEY_FOR_THIS_TEST_ONLY"
    )
    with pytest.raises(ProviderError, match="environment variable UNSET_KEY_FOR_THIS_TEST_ONLY"):
        resolve_api_key(plain)
    key = f"ghp_{secrets.token_hex(18)}"
    pasted = plain.model_copy(update={"api_key_env": key})
    with pytest.raises(ProviderError) as caught:
        resolve_api_key(pasted)
    assert "named by api_key_env is not set" in str(caught.value)
    assert_not_echoed(str(caught.value), key)
