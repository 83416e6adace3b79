"""The real AG-UI client (`@ag-ui/client` from npm, `HttpAgent`, on Node) against
``POST /v1/ag-ui/{agent}``: a run whose tool waits for approval ends with the client holding
two pending interrupts; the client resumes them all (as it requires) and ends with the tool
results and the final answer in its messages; and a front-end tool the app declares, runs and
answers with its tool message, after which the run goes on. npm's package is pinned by
tests/js's lock file (`make js-deps`); without Node it is skipped locally, and fails in CI."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.definitions import AgentDefinition
from tests.api_env import api_env
from tests.harness import scripted_config
from tests.store_fixtures import running_in_ci
from tests.test_agui_client_tools import SCRIPT as CLIENT_TOOL_SCRIPT
from tests.test_agui_interrupts import _config

pytestmark = pytest.mark.timeout(120)
SCRIPT = Path(__file__).parent / "js" / "agui_interrupts.mjs"
CLIENT_TOOL_DRIVER = Path(__file__).parent / "js" / "agui_client_tools.mjs"


def _node() -> str:
    node = shutil.which("node")
    installed = (SCRIPT.parent / "node_modules" / "@ag-ui" / "client").is_dir()
    if node is None or not installed:
        reason = "Node or tests/js/node_modules is missing (make js-deps)"
        if running_in_ci():
            pytest.fail(f"the AG-UI client checks must run in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    return node


async def _drive(
    node: str, url: str, thread: str, *arguments: str, script: Path = SCRIPT
) -> dict[str, dict[str, Any]]:
    process = await asyncio.create_subprocess_exec(
        node,
        str(script),
        url,
        thread,
        *arguments,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode == 0, err.decode()
    reports = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    return {report["label"]: report for report in reports}


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_the_ag_ui_client_resumes_the_interrupts_of_an_approval(
    client: Client, task_queue: str, tmp_path: Path, decision: str
) -> None:
    node = _node()
    async with api_env(client, task_queue, _config(), tmp_path) as api:
        thread = f"js-{uuid.uuid4().hex[:8]}"
        runs = await _drive(node, f"{api.url}/v1/ag-ui/mailer", thread, decision)
    first, second = runs["first"], runs["second"]
    assert [p["reason"] for p in first["pending"]] == ["tool_approval", "tool_approval"]
    assert first["pending"][0]["message"] == "mailer wants to call send_note"
    calls = [m["toolCalls"] for m in first["messages"] if m["role"] == "assistant"]
    assert [name for names in calls for name in names] == ["send_note", "send_note"], first
    assert second["pending"] == []
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert sorted(m["toolCallId"] for m in results) == ["n1", "n2"]
    expected = "ok" if decision == "approve" else "denied: "
    assert all(m["content"].startswith(expected) for m in results), results
    assert second["messages"][-1] == {
        "role": "assistant",
        "content": "Both handled.",
        "toolCalls": [],
        "toolCallId": None,
    }


async def test_the_ag_ui_client_runs_a_front_end_tool_and_the_run_goes_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    node = _node()
    config = scripted_config(
        CLIENT_TOOL_SCRIPT, agents=[AgentDefinition(id="painter", description="Paints")]
    )
    async with api_env(client, task_queue, config, tmp_path) as api:
        thread = f"js-{uuid.uuid4().hex[:8]}"
        runs = await _drive(node, f"{api.url}/v1/ag-ui/painter", thread, script=CLIENT_TOOL_DRIVER)
    first, second = runs["first"], runs["second"]
    assert first["pending"] == ["t1"]
    [call] = [c for m in first["messages"] for c in m["toolCalls"]]
    assert call["name"] == "setTheme" and json.loads(call["arguments"]) == {"color": "green"}
    assert second["pending"] == []
    assert [m["content"] for m in second["messages"] if m["role"] == "tool"] == [
        "theme is now green"
    ]
    assert second["messages"][-1]["content"] == "Theme set to green."
