"""What the HTTP API shows, to whom, and where it may be shown (issue 51 item 7, issue 52).

- No answer can be framed by another site or content-sniffed: `/assets/index.html` (the page
  again) was served without the framing headers that `/` had.
- The Temporal Web UI has no login and shows every partition: its address reaches API clients
  only when the operator opts in (OTHERONE_SERVE_SHOW_UI_URL; `otherone dev --serve` opts in
  by default, `otherone serve` does not).
- `GET /v1/info` is the one operation that needs no token, says so in the OpenAPI document,
  and tells a caller without one nothing about tenants or the server's configuration.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from otherone.api import openapi_schema
from otherone.api.server import shown_ui_url, ui_note
from otherone.client.cli.options import settings_from
from otherone.client.cli.parser import build_parser
from otherone.config import RuntimeConfig
from otherone.worker.settings import Settings
from tests.api_env import api_env
from tests.harness import scripted_config

UI = "http://temporal-ui.internal:8080"
FRAMING = {
    "x-frame-options": "DENY",
    "content-security-policy": "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
}


def config() -> RuntimeConfig:
    from otherone.definitions import AccessPolicy, AgentDefinition

    script: dict[str, list[Any]] = {
        "helper": [
            {"tool_calls": [{"name": "agent.call", "arguments": {"agent": "echo", "task": "go"}}]},
            {"text": "done"},
        ],
        "echo": [{"text": "echo"}],
    }
    agents = [
        AgentDefinition(
            id="helper", description="calls echo", callable_agents=AccessPolicy.allow("echo")
        ),
        AgentDefinition(id="echo", description="echoes"),
    ]
    return scripted_config(script, agents=agents)


def assert_not_framable(response: httpx.Response) -> None:
    for name, value in FRAMING.items():
        assert response.headers.get(name) == value, (response.url, name, response.headers)


# --------------------------------------------------------------------------- framing


async def test_every_answer_forbids_framing_and_sniffing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The page (at `/` and as a static file), its script and style, JSON answers, problem
    answers and the guard's refusals all carry the headers."""
    async with api_env(client, task_queue, config(), tmp_path) as api:
        for path in (
            "/",
            "/assets/index.html",
            "/assets/app.js",
            "/assets/app.css",
            "/v1/info",
            "/healthz",
            "/openapi.json",
        ):
            answer = await api.http.get(path)
            assert answer.status_code == 200, (path, answer.text)
            assert_not_framable(answer)
        assert "text/html" in (await api.http.get("/assets/index.html")).headers["content-type"]
        missing = await api.http.get("/assets/nothing.js")
        assert missing.status_code == 404
        assert_not_framable(missing)
        unknown_run = await api.http.get("/v1/runs/no-such-run")
        assert unknown_run.status_code == 404
        assert_not_framable(unknown_run)
        rebound = await api.http.get("/", headers={"Host": "attacker.example"})
        assert rebound.status_code == 421  # refused by the guard, before any route
        assert_not_framable(rebound)


# --------------------------------------------------------------------------- the Web UI address


@pytest.mark.parametrize("shown", [False, True], ids=["hidden", "shown"])
async def test_the_web_ui_address_reaches_clients_only_when_shown(
    client: Client, task_queue: str, tmp_path: Path, shown: bool
) -> None:
    async with api_env(client, task_queue, config(), tmp_path, ui_url=UI if shown else None) as api:
        started = await api.http.post(
            "/v1/runs",
            json={"entry_agent": "helper", "input": "hi", "session": {"session_id": "s"}},
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        result = await api.http.get(f"/v1/runs/{run_id}/result?wait=60")
        assert result.json()["outcome"] == "completed", result.text
        info = (await api.http.get("/v1/info")).json()
        whoami = (await api.http.get("/v1/whoami")).json()
        rest = [
            result,
            await api.http.get(f"/v1/runs/{run_id}"),
            await api.http.get(f"/v1/runs/{run_id}/tree"),
            await api.http.get("/v1/sessions?partition=default"),
            await api.http.get("/v1/approvals"),
            await api.http.get(f"/v1/runs/{run_id}/events"),  # the ended tree: the whole stream
            await api.http.get(f"/v1/runs/{run_id}/events?format=ag-ui"),
        ]
    for answer in rest:  # these never name the Web UI, shown or not
        assert answer.status_code == 200, answer.text
        assert "temporal-ui" not in answer.text, answer.url
    if not shown:
        assert started.json()["ui_url"] is None
        for answer in (info, whoami):
            assert answer["ui_url"] is None and answer["namespace"] is None, answer
        assert "temporal-ui" not in started.text + str(info) + str(whoami)
        return
    assert started.json()["ui_url"] == f"{UI}/namespaces/default/workflows/{run_id}"
    for answer in (info, whoami):
        assert (answer["ui_url"], answer["namespace"]) == (UI, "default"), answer


def test_showing_the_web_ui_is_opt_in_for_serve_and_opt_out_for_dev() -> None:
    """`otherone serve` passes default=False, `otherone dev --serve` default=True; the setting
    (or its flag) wins over either."""
    unset = Settings(_env_file=None)
    assert unset.serve_show_ui_url is None
    assert shown_ui_url(unset, UI, default=False) is None
    assert shown_ui_url(unset, UI, default=True) == UI
    on, off = Settings(serve_show_ui_url=True), Settings(serve_show_ui_url=False)
    assert shown_ui_url(on, UI, default=False) == UI
    assert shown_ui_url(off, UI, default=True) is None
    assert shown_ui_url(on, None, default=True) is None  # a headless dev server: nothing to show


@pytest.mark.parametrize(
    ("given", "expected"),
    [([], None), (["--show-ui-url"], True), (["--no-show-ui-url"], False)],
)
@pytest.mark.parametrize("command", [["serve"], ["dev", "--serve"]])
def test_the_show_ui_url_flag(
    command: list[str], given: list[str], expected: bool | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTHERONE_SERVE_SHOW_UI_URL", raising=False)
    args: argparse.Namespace = build_parser().parse_args([*command, *given])
    assert settings_from(args).serve_show_ui_url is expected


def test_the_show_ui_url_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for text, expected in (("true", True), ("1", True), ("false", False), ("", None)):
        monkeypatch.setenv("OTHERONE_SERVE_SHOW_UI_URL", text)
        assert Settings(_env_file=None).serve_show_ui_url is expected


def test_an_operator_showing_the_web_ui_to_tenants_is_told_what_that_means() -> None:
    tokens = {"a" * 16: "tenant"}
    note = ui_note(UI, tokens)
    assert note is not None and "every partition" in note and UI in note
    assert ui_note(None, tokens) is None  # not shown
    assert ui_note(UI, {}) is None  # no tenants: the operator's own view


# --------------------------------------------------------------------------- /v1/info


def _operations() -> list[tuple[str, str, Any]]:
    return [
        (method.upper(), path, operation)
        for path, methods in openapi_schema()["paths"].items()
        for method, operation in methods.items()
    ]


def test_the_openapi_document_says_which_operation_needs_no_token() -> None:
    for method, path, operation in _operations():
        expected: list[dict[str, list[str]]] = [{"HTTPBearer": []}]
        if path == "/v1/info":
            expected = []
        assert operation.get("security") == expected, (method, path)


async def test_only_info_answers_without_a_token_and_it_names_nothing_of_the_tenants(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """As README says: every request needs a token but `GET /v1/info` (and the page, its files,
    /healthz and /openapi.json, which hold nothing of the server's)."""
    tokens = {"tenant-token-0123456789": "tenant-a"}
    async with api_env(client, task_queue, config(), tmp_path, tokens=tokens, ui_url=None) as api:
        for method, path, _ in _operations():
            url = (
                path.replace("{run_id}", "r-1")
                .replace("{call_id}", "c")
                .replace("{agent_id}", "helper")
            )
            body: dict[str, Any] | None = {} if method == "POST" else None
            answer = await api.http.request(method, url, json=body)
            if path == "/v1/info":
                assert answer.status_code == 200, answer.text
                info = answer.json()
            else:
                assert answer.status_code == 401, (method, path, answer.text)
        for open_path in ("/", "/assets/app.js", "/healthz", "/openapi.json"):
            assert (await api.http.get(open_path)).status_code == 200, open_path
    assert info["auth_required"] is True and info["version"]
    named = {key for key, value in info.items() if value is not None}
    assert named == {"auth_required", "version"}, info
    assert "tenant-a" not in str(info)
