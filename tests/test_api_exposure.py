"""What the HTTP API shows, to whom, and where it may be shown (issue 51 item 7, issue 52).

- No answer can be framed by another site or content-sniffed: `/assets/index.html` (the page
  again) was served without the framing headers that `/` had.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from temporalio.client import Client

from otherone.config import RuntimeConfig
from tests.api_env import api_env
from tests.harness import scripted_config

FRAMING = {
    "x-frame-options": "DENY",
    "content-security-policy": "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
}


def config() -> RuntimeConfig:
    from otherone.definitions import AccessPolicy, AgentDefinition

    script = {
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
