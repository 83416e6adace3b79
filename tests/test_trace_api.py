"""The trace view of a real tree (issue 48): a boss whose tool fails once and is retried, whose
e-mail waits for an approval, and who calls a helper whose first model attempt fails (its text
superseded); then ``GET /v1/runs/{id}/trace``, the calls' details from the store, another
tenant's 404, and ``otherone trace`` (``--json``; ``--follow`` from the start until the tree
ends) (real dev server, worker, SQLite store)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.api import ApiToken
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.tools import ToolContext, tool
from tests.api_env import api_env
from tests.harness import scripted_config, wait_until
from tests.processes import Completed, address_of, cli_env, otherone

pytestmark = pytest.mark.timeout(180)
#: Attempts of `flaky` by idempotency key: the first of each call fails.
FLAKY_ATTEMPTS: dict[str, int] = {}
TASK = "Check the weather, mail ann, then ask the helper."


@tool(max_attempts=2)
def flaky(city: str, ctx: ToolContext) -> str:
    """Look the weather up (its first attempt fails: a connection reset)."""
    FLAKY_ATTEMPTS[ctx.idempotency_key] = ctx.attempt
    if ctx.attempt == 1:
        raise RuntimeError("connection reset")
    return f"sunny in {city}"


@tool(approval="always")
def send_email(to: str) -> str:
    """Send an e-mail (a person approves it first)."""
    return f"sent to {to}"


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def traced_tree_config() -> RuntimeConfig:
    return scripted_config(
        {
            "boss": [
                {"tool_calls": [call("flaky", "w1", city="Paris")], "input_tokens": 11},
                {"tool_calls": [call("send_email", "e1", to="ann")]},
                {"tool_calls": [call("agent.call", "call_1", agent="helper", task="help")]},
                "All done.",
            ],
            "helper": [{"text": "helped", "fail": {"attempts": 1}}],
        },
        agents=[
            AgentDefinition(
                id="boss",
                description="The boss",
                callable_agents=["helper"],
                tools=["flaky", "send_email"],
            ),
            AgentDefinition(id="helper", description="Helps"),
        ],
        tools=[flaky, send_email],
    )


def by_kind(bars: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [bar for bar in bars if bar["kind"] == kind]


def check_tree_bars(trace: dict[str, Any], root: str) -> None:
    """The bars of the finished tree `traced_tree_config` makes (shared with the page test)."""
    bars = trace["bars"]
    child = f"{root}/helper.call_1"
    assert trace["finished"] and trace["root_run_id"] == root
    assert (bars[0]["depth"], bars[0]["id"]) == (0, f"run:{root}")
    assert all(bar["end"] is not None for bar in bars), [b for b in bars if not b["end"]]
    runs = {bar["run_id"]: bar for bar in by_kind(bars, "run")}
    assert set(runs) == {root, child}
    assert runs[root]["status"] == runs[child]["status"] == "completed"

    flaky_bars = [bar for bar in by_kind(bars, "tool") if bar["name"] == "flaky"]
    assert [(b["attempt"], b["status"], b["retried"]) for b in flaky_bars] == [
        (1, "failed", True),
        (2, "completed", False),
    ]
    assert "connection reset" in flaky_bars[0]["error"]

    [wait] = by_kind(bars, "approval")
    assert wait["status"] == "approved" and wait["duration_seconds"] > 0
    [mail] = [bar for bar in by_kind(bars, "tool") if bar["name"] == "send_email"]
    assert mail["start"] >= wait["end"]  # it ran once approved

    [agent_call] = by_kind(bars, "agent_call")
    assert (agent_call["target"], agent_call["child_run_id"]) == ("helper", child)
    assert runs[child]["parent_id"] == agent_call["id"]
    assert runs[child]["depth"] == agent_call["depth"] + 1

    helper_calls = [bar for bar in by_kind(bars, "model") if bar["run_id"] == child]
    assert [(b["attempt"], b["status"], b["superseded"]) for b in helper_calls] == [
        (1, "failed", True),
        (2, "completed", False),
    ]
    boss_calls = [bar for bar in by_kind(bars, "model") if bar["run_id"] == root]
    assert len(boss_calls) == 4 and all(bar["profile"] == "scripted" for bar in boss_calls)
    assert boss_calls[0]["input_tokens"] == 11
    assert runs[root]["input_tokens"] >= 11


async def run_the_tree(
    http: httpx.AsyncClient, headers: dict[str, str], follow: Callable[[str], object]
) -> str:
    """Start the boss over HTTP, ``follow`` it, approve its e-mail once its wait shows as an
    open bar, wait for the end; the root run id."""
    body = {"entry_agent": "boss", "input": TASK}
    started = await http.post("/v1/runs", json=body, headers=headers)
    assert started.status_code == 201, started.text
    root = str(started.json()["run_id"])
    follow(root)

    async def waiting() -> bool:
        answer = await http.get(f"/v1/runs/{root}/approvals", headers=headers)
        return bool(answer.status_code == 200 and answer.json())

    await wait_until(waiting, within=60, message="the e-mail's approval request")

    async def open_wait() -> bool:  # live: the approval wait is a bar with no end yet
        trace = (await http.get(f"/v1/runs/{root}/trace", headers=headers)).json()
        return any(bar["kind"] == "approval" and bar["end"] is None for bar in trace["bars"])

    await wait_until(open_wait, within=30, message="an open approval bar")
    decided = await http.post(
        f"/v1/runs/{root}/approvals/e1", json={"decision": "approve"}, headers=headers
    )
    assert decided.status_code == 200, decided.text
    result = await http.get(f"/v1/runs/{root}/result?wait=120", headers=headers)
    assert result.json()["outcome"] == "completed", result.text
    return root


async def test_a_tree_s_trace_over_http_and_the_cli(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    mine, other = f"trace-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    tokens = {"mine": ApiToken(mine), "other": ApiToken(other)}
    headers, theirs = {"Authorization": "Bearer mine"}, {"Authorization": "Bearer other"}
    async with api_env(client, task_queue, traced_tree_config(), tmp_path, tokens=tokens) as api:
        env = cli_env(address_of(temporal_env), task_queue, tmp_path, OTHERONE_PARTITION=mine)
        following: list[asyncio.Task[Completed]] = []

        def follow(run_id: str) -> None:  # from its start: ends with the tree
            command = otherone("trace", run_id, "--follow", "--json", env=env, limit=120)
            following.append(asyncio.ensure_future(command))

        root = await run_the_tree(api.http, headers, follow)
        followed = await following[0]
        assert followed.code == 0, followed.describe()
        check_tree_bars(json.loads(followed.stdout), root)
        answer = await api.http.get(f"/v1/runs/{root}/trace", headers=headers)
        assert answer.status_code == 200, answer.text
        trace = answer.json()
        check_tree_bars(trace, root)
        child = f"{root}/helper.call_1"
        # any run of the tree names the tree
        of_child = await api.http.get(f"/v1/runs/{child}/trace", headers=headers)
        assert [bar["id"] for bar in of_child.json()["bars"]] == [b["id"] for b in trace["bars"]]

        # a model call's request and response, from the store
        first = next(bar for bar in trace["bars"] if bar["kind"] == "model")
        detail = (await api.http.get(first["detail"], headers=headers)).json()
        assert [m["content"] for m in detail["request"]] == [TASK]
        assert detail["response"]["tool_calls"][0]["function"]["name"] == "flaky"
        # the helper's failed attempt: no stored answer of its own
        failed = next(bar for bar in trace["bars"] if bar["superseded"])
        detail = (await api.http.get(failed["detail"], headers=headers)).json()
        assert detail["response"] is None and detail["streamed_text"] is not None
        retried = next(
            bar for bar in trace["bars"] if bar["kind"] == "model" and bar["attempt"] == 2
        )
        detail = (await api.http.get(retried["detail"], headers=headers)).json()
        assert detail["response"]["content"] == "helped"
        assert [m["role"] for m in detail["request"]] == ["user"]

        # a tool call's arguments and result
        tool = next(bar for bar in trace["bars"] if bar["name"] == "flaky")
        detail = (await api.http.get(tool["detail"], headers=headers)).json()
        assert json.loads(detail["arguments"]) == {"city": "Paris"}
        assert json.loads(detail["result"]) == "sunny in Paris"
        missing = await api.http.get(f"/v1/runs/{root}/trace/tool/nope", headers=headers)
        assert missing.status_code == 422 and missing.json()["field"] == "tool_call_id"
        missing = await api.http.get(f"/v1/runs/{root}/trace/model/99", headers=headers)
        assert missing.status_code == 422 and missing.json()["field"] == "turn", missing.text
        missing = await api.http.get(f"/v1/runs/{root}/trace/model/0", headers=headers)
        assert missing.status_code == 422 and "turn" in missing.text, missing.text

        # another tenant's run is not found, its calls neither
        for path in (f"/v1/runs/{root}/trace", first["detail"], tool["detail"]):
            refused = await api.http.get(path, headers=theirs)
            assert refused.status_code == 404, (path, refused.text)

        shown = await otherone("trace", root, "--json", env=env)
        assert shown.code == 0, shown.stderr
        check_tree_bars(json.loads(shown.stdout), root)
        drawn = await otherone("trace", root, env={**env, "COLUMNS": "120"})
        assert drawn.code == 0, drawn.stderr
        for name in ("boss", "flaky #1", "retried", "superseded", "approval: send_email"):
            assert name in drawn.stdout, (name, drawn.stdout)
        elsewhere = await otherone("trace", root, env={**env, "OTHERONE_PARTITION": other})
        assert elsewhere.code == 3, elsewhere.stderr  # not found in another partition
