"""The table of what counts as a credential in configuration (`otherone.credentials`).

Each list is the reference for one rule: what must be refused and what must still load.
Loading through TOML and Python, and the messages, are in ``tests/test_config_credentials.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from otherone.credentials import (
    agent_credential_paths,
    credential_paths,
    is_credential_header,
    is_credential_key,
    is_credential_name,
    is_credential_value,
    looks_like_credential,
    nested_credential_paths,
    profile_credential_paths,
    snapshot_credential_paths,
    url_credential_parts,
)

#: One value of each well-known key shape (made up; the right length and alphabet).
KEY_SHAPES = {
    "openai": "sk-proj-abcdEFGH1234ijklMNOP5678",
    "anthropic": "sk-ant-api03-abcdEFGH1234ijkl",
    "stripe": "sk_live_abcdEFGH1234ijkl",
    "github classic": "ghp_0123456789abcdefghij0123",
    "github fine-grained": "github_pat_11ABCDEFG0123456789_abcdefghij",
    "gitlab": "glpat-abcdefgh12345678",
    "slack": "xoxb-1234567890-abcdefghij",
    "aws": "AKIAABCDEFGHIJKLMNOP",
    "google": "AIzaSyA1234567890abcdefghijklmnopqrs",
    "hugging face": "hf_abcdefghij0123456789KLMN",
    "jwt": "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.sig",
    "pem": "-----BEGIN RSA PRIVATE KEY-----",
}
#: Opaque keys: no known prefix, 24+ letters and digits mixing both.
OPAQUE = {
    "hex": "3f2a9c0e1b7d4a6f8e5c2b1a0d9e8f7c",
    "base64": "QWxhZGRpbjpvcGVuIHNlc2FtZQ0123",
    "mixed run": "abc123def456ghi789jkl012mno",
}


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("value", [*KEY_SHAPES.values(), *OPAQUE.values()], ids=str)
def test_credential_values(value: str) -> None:
    """Refused where a header value, a URL parameter or the *name* of a secret belongs."""
    assert is_credential_value(value)


@pytest.mark.parametrize("value", KEY_SHAPES.values(), ids=KEY_SHAPES.keys())
def test_key_shapes_are_credentials_even_in_free_text(value: str) -> None:
    """Body options and metadata refuse only these (and bearer tokens): free text is looser."""
    assert looks_like_credential(f"use {value} here")


@pytest.mark.parametrize("value", ["Bearer abc.def", "basic dXNlcjpwYXNz", "Token abcdefgh"])
def test_auth_scheme_values_are_credentials(value: str) -> None:
    assert is_credential_value(value)


@pytest.mark.parametrize(
    "value",
    [
        # Names of variables: what api_key_env, env and headers_env must hold.
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "MY_SERVICE_KEY_2",
        "AZURE_OPENAI_API_KEY_2024_PROD",
        "GITHUB_PERSONAL_ACCESS_TOKEN",
        "X",
        # Header values that are not keys.
        "fine-grained-tool-streaming-2025-05-14",
        "123e4567-e89b-12d3-a456-426614174000",
        "2023-06-01",
        "org-AbCdEf1234567890GhIjKlMn",  # an OpenAI organization id, sent in a header
        "proj_AbCdEf1234567890GhIjKlMn",  # an OpenAI project id
        "My agents",
        "https://example.org/my-app",
    ],
)
def test_not_credential_values(value: str) -> None:
    assert not is_credential_value(value)


@pytest.mark.parametrize(
    "text", ["Token count", "Basic answer", "bearer of news", OPAQUE["hex"], "user-42"]
)
def test_free_text_that_is_not_a_credential(text: str) -> None:
    """Stop sequences, prose, a hashed user id: fine in body options and metadata."""
    assert not looks_like_credential(text)


# --------------------------------------------------------------------------- header names


CREDENTIAL_HEADER_NAMES = [
    "Authorization",
    "proxy-authorization",
    "Cookie",
    "X-Api-Key",
    "api_key",
    "apiKey",
    "X-Goog-Api-Key",
    "X-Auth-Token",
    "Ocp-Apim-Subscription-Key",
    "X-Client-Secret",
    "X-Passphrase",
    "X-Pwd",
    "X-Pass",
    "X-Session",
    "X-Session-Id",
    "X-Sid",
    "X-CSRF-Token",
    "X-Jwt",
    "X-Bearer",
    "X-Signature",
    "X-Private-Key",
    "X-Cred",
    "accessToken",
]
ORDINARY_HEADER_NAMES = [
    "X-Title",
    "HTTP-Referer",
    "anthropic-version",
    "anthropic-beta",
    "OpenAI-Organization",
    "OpenAI-Project",
    "OpenAI-Beta",
    "x-stainless-retry-count",
    "x-stainless-package-version",
    "X-Request-Id",
    "User-Agent",
    "Accept-Language",
]


@pytest.mark.parametrize("name", CREDENTIAL_HEADER_NAMES)
def test_credential_header_names_are_refused_however_short_the_value(name: str) -> None:
    assert is_credential_name(name)
    assert is_credential_header(name, "x")


@pytest.mark.parametrize("name", ORDINARY_HEADER_NAMES)
def test_ordinary_header_names(name: str) -> None:
    assert not is_credential_name(name)
    assert not is_credential_header(name, "My agents")


# --------------------------------------------------------------------------- option keys

CREDENTIAL_KEYS = [
    "api_key",
    "apiKey",
    "x-api-key",
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "pass",
    "auth",
    "authorization",
    "access_token",
    "refresh_token",
    "id_token",
    "session_token",
    "authorization_token",
    "github_token",
    "client_secret",
    "private_key",
    "secret_access_key",
    "openai_api_key",
    "credentials",
    "aws_credentials",
    "db_password",
    "cookie",
    "jwt",
]
ORDINARY_KEYS = [
    "max_tokens",
    "max_completion_tokens",
    "budget_tokens",
    "top_k",
    "top_p",
    "stop",
    "reasoning_effort",
    "response_format",
    "prompt_cache_key",
    "idempotency_key",
    "session_id",
    "eos_token",
    "pad_token",
    "first_token",
    "user",
    "seed",
    "provider",
    "thinking",
    "owner",
    "team",
]


@pytest.mark.parametrize("key", CREDENTIAL_KEYS)
def test_credential_keys(key: str) -> None:
    assert is_credential_key(key)
    assert credential_paths({key: "short"}) == [key]
    assert nested_credential_paths({"outer": {"inner": [{key: "short"}]}}) == [
        f"outer.inner.0.{key}"
    ]


@pytest.mark.parametrize("key", ORDINARY_KEYS)
def test_ordinary_keys(key: str) -> None:
    assert not is_credential_key(key)
    assert credential_paths({key: "short"}) == []
    assert nested_credential_paths({"outer": {key: "short"}}) == []


@pytest.mark.parametrize(
    "value",
    [{"type": "string", "minLength": 8}, True, None],
    ids=["a table (a JSON schema property)", "a flag", "null"],
)
def test_a_credential_key_may_hold_a_table_a_flag_or_nothing(value: Any) -> None:
    """A structured output's schema may well have a ``password`` property."""
    schema = {"type": "object", "properties": {"password": value, "token": value}}
    other = {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    assert credential_paths(other) == []


@pytest.mark.parametrize("value", ["", "x", 1234, ["a"]], ids=repr)
def test_a_credential_key_holding_anything_else_is_refused(value: Any) -> None:
    assert credential_paths({"auth": {"user": "me", "password": value}}) == ["auth.password"]


def test_ordinary_options_load() -> None:
    other = {
        "reasoning_effort": "high",
        "provider": {"order": ["a"]},
        "prompt_cache_key": "user-42",
        "max_tokens": 5,
        "stop": ["Token count", "Basic answer", "bearer of news"],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "user": OPAQUE["hex"],
        "extra_headers": {"X-Title": "My agents", "HTTP-Referer": "https://example.org"},
    }
    assert credential_paths(other) == []


def test_strings_anywhere_are_checked_by_value() -> None:
    other = {"nested": {"list": ["Bearer abcdefgh"]}, "x": {"y": KEY_SHAPES["github classic"]}}
    assert credential_paths(other) == ["nested.list.0", "x.y"]


def test_a_key_that_is_itself_a_credential_is_refused_and_not_shown() -> None:
    key = KEY_SHAPES["openai"]
    paths = credential_paths({key: True, "extra_headers": {key: "x"}})
    assert len(paths) == 2 and all(key not in path for path in paths)


# --------------------------------------------------------------------------- URLs

CREDENTIAL_URLS = {
    "user and password": ("https://proxy:pw@gateway.example/v1", "user information"),
    "user only": ("http://sk-abc@gateway.example/v1", "user information"),
    "empty password": ("http://user:@gateway.example/v1", "user information"),
    "?key=": ("https://gateway.example/v1?key=abc", "query parameter key"),
    "?api_key=": ("https://gateway.example/v1?api_key=abc", "query parameter api_key"),
    "?apikey=": ("https://gateway.example/v1?apikey=abc", "query parameter apikey"),
    "?token=": ("https://gateway.example/v1?token=abc", "query parameter token"),
    "?access_token=": ("https://g.example/v1?api-version=1&access_token=a", "access_token"),
    "?secret=": ("https://gateway.example/v1?secret=abc", "query parameter secret"),
    "?password=": ("https://gateway.example/v1?password=abc", "query parameter password"),
    "?auth=": ("https://gateway.example/v1?auth=abc", "query parameter auth"),
    "?sig=": ("https://acct.blob.example/c?sv=2024&sig=abc", "query parameter sig"),
    "?signature=": ("https://gateway.example/v1?X-Amz-Signature=abc", "X-Amz-Signature"),
    "?code=": ("https://fn.example/api/chat?code=abc", "query parameter code"),
    "a keyed value": ("https://gateway.example/v1?x=" + OPAQUE["hex"], "query parameter x"),
    "a key as the query": (f"https://gateway.example/v1?{KEY_SHAPES['openai']}", "whose name"),
    "a key in the path": (f"https://gateway.example/v1/{KEY_SHAPES['openai']}/", "path segment"),
    "a ;param": ("https://gateway.example/v1;jsessionid=abc/chat", "path parameter"),
    "a key in the fragment": ("https://gateway.example/v1#access_token=abc", "fragment"),
}
ORDINARY_URLS = [
    "https://x.openai.azure.com/openai/deployments/d?api-version=2024-10-21",
    "http://127.0.0.1:11434/v1",
    "http://[::1]:8080/v1",
    "https://api.openai.com/v1",
    "https://openrouter.ai/api/v1",
    "https://mcp.example.com/mcp",
    # An account id in a path is an opaque run, but not a key (Cloudflare's AI Gateway).
    f"https://gateway.ai.cloudflare.com/v1/{OPAQUE['hex']}/my-gateway/openai",
]


@pytest.mark.parametrize(("url", "said"), CREDENTIAL_URLS.values(), ids=CREDENTIAL_URLS.keys())
def test_credential_urls(url: str, said: str) -> None:
    found = url_credential_parts(url)
    assert found and said in ", ".join(found)
    assert "abc" not in ", ".join(found) and KEY_SHAPES["openai"] not in ", ".join(found)


@pytest.mark.parametrize("url", ORDINARY_URLS)
def test_ordinary_urls(url: str) -> None:
    assert url_credential_parts(url) == []


# --------------------------------------------------------------------------- definitions


def test_profiles_agents_and_snapshots_are_checked_field_by_field() -> None:
    profile = {
        "other": {"metadata": {"password": "p"}},
        "base_url": "https://u@h/v1",
        "api_key_env": KEY_SHAPES["github classic"],
    }
    assert profile_credential_paths(profile) == [
        "other.metadata.password",
        "base_url",
        "api_key_env",
    ]
    agent = {
        "model_overrides": {"other": {"token": "t"}},
        "metadata": {"owner": "me", "deploy": {"api_key": "k"}},
    }
    assert agent_credential_paths(agent) == [
        "model_overrides.other.token",
        "metadata.deploy.api_key",
    ]
    body = {"models": {"gpt": profile}, "agents": {"a": agent}}
    assert snapshot_credential_paths(body) == [
        ("models.gpt", "other.metadata.password"),
        ("models.gpt", "base_url"),
        ("models.gpt", "api_key_env"),
        ("agents.a", "model_overrides.other.token"),
        ("agents.a", "metadata.deploy.api_key"),
    ]
    clean = {"models": {"gpt": {"other": {"max_tokens": 5}}}, "agents": {"a": {"metadata": {}}}}
    assert snapshot_credential_paths(clean) == []
