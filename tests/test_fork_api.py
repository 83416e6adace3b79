"""Forks over the HTTP API (``GET /v1/runs/{id}/turns``, ``POST /v1/runs/{id}/fork``),
tenant-scoped by token, and the page's "Fork from here" button in headless Chromium."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, expect
from temporalio.client import Client

from tests.api_env import ApiEnv, api_env
from tests.test_api import assert_problem
from tests.test_forks import clerk_config

pytestmark = pytest.mark.timeout(120)
WAIT_MS = 20_000


async def _run(api: ApiEnv, text: str, session: str, **headers: str) -> str:
    body = {"entry_agent": "clerk", "input": text, "session": {"session_id": session}}
    started = await api.http.post("/v1/runs", json=body, headers=headers)
    assert started.status_code == 201, started.text
    return await _completed(api, started.json()["run_id"], **headers)


async def _completed(api: ApiEnv, run_id: str, **headers: str) -> str:
    answer = await api.http.get(f"/v1/runs/{run_id}/result?wait=60", headers=headers)
    assert answer.status_code == 200 and answer.json()["outcome"] == "completed", answer.text
    return run_id


async def test_a_fork_over_the_api_is_scoped_to_the_token_partition(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    alice, bob = "alice-token-0123456789", "bob-token-0123456789ab"
    tokens = {alice: "tenant-a", bob: "tenant-b"}
    as_alice = {"Authorization": f"Bearer {alice}"}
    as_bob = {"Authorization": f"Bearer {bob}"}
    async with api_env(client, task_queue, clerk_config(), tmp_path, tokens=tokens) as api:
        session = f"s-{uuid.uuid4().hex[:8]}"
        await _run(api, "question 1", session, **as_alice)
        run_id = await _run(api, "question 2", session, **as_alice)

        turns = (await api.http.get(f"/v1/runs/{run_id}/turns", headers=as_alice)).json()
        assert [(t["number"], t["message"], t["tool_calls"]) for t in turns] == [
            (1, "question 1", 1),
            (2, "question 2", 1),
        ]
        # Bob's token sees no such run: not its turns, not a fork of it.
        assert_problem(
            await api.http.get(f"/v1/runs/{run_id}/turns", headers=as_bob), 404, "run_not_found"
        )
        refused = await api.http.post(
            f"/v1/runs/{run_id}/fork", json={"at_turn": 1}, headers=as_bob
        )
        assert_problem(refused, 404, "run_not_found")

        forked = await api.http.post(
            f"/v1/runs/{run_id}/fork",
            json={"at_turn": 2, "input": "question 2 again"},
            headers=as_alice,
        )
        assert forked.status_code == 201, forked.text
        fork = forked.json()
        assert fork["forked_from"] == run_id and fork["at_turn"] == 2
        assert fork["session_id"] != session
        await _completed(api, fork["run_id"], **as_alice)
        record = (await api.http.get(f"/v1/runs/{fork['run_id']}", headers=as_alice)).json()
        assert record["forked_from"] == {"run_id": run_id, "turn": 2}
        assert record["partition_key"] == "tenant-a" and record["session_id"] == fork["session_id"]
        assert_problem(
            await api.http.get(f"/v1/runs/{fork['run_id']}", headers=as_bob), 404, "run_not_found"
        )

        # Bad input: a problem naming the field, nothing started.
        for body, field in (
            ({"at_turn": 3}, "at_turn"),
            ({"at_turn": 0}, "at_turn"),
            ({"at_turn": 1, "input": ""}, "input"),
        ):
            answer = await api.http.post(f"/v1/runs/{run_id}/fork", json=body, headers=as_alice)
            assert_problem(answer, 422, "invalid_request", field)
        unknown = await api.http.post(
            f"/v1/runs/{run_id}/fork", json={"at_turn": 1, "turn": 1}, headers=as_alice
        )
        assert unknown.status_code == 422


async def test_the_page_forks_from_a_turn_and_follows_the_fork(
    browser: Browser, client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, clerk_config(), tmp_path) as api:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(api.url)
        await expect(page.locator("#agent option")).to_have_count(1, timeout=WAIT_MS)
        for text in ("question 1", "question 2"):
            await page.fill("#message", text)
            await page.click("#send")
            await expect(page.locator("#run-status")).to_have_text("run completed", timeout=WAIT_MS)
        turns = page.locator("#turns li.turn")
        await expect(turns).to_have_count(2, timeout=WAIT_MS)
        await expect(turns.nth(1).locator(".message")).to_have_text("question 2")
        original: Any = await page.evaluate("JSON.parse(sessionStorage.getItem('otherone-page'))")

        await turns.nth(1).locator("button.fork").click()
        await expect(page.locator(".msg.system")).to_contain_text("at turn 2", timeout=WAIT_MS)
        await expect(page.locator("#run-status")).to_have_text("run completed", timeout=WAIT_MS)
        forked: Any = await page.evaluate("JSON.parse(sessionStorage.getItem('otherone-page'))")
        assert forked["root"] != original["root"]
        assert forked["sessionId"] != original["sessionId"]
        record = (await api.http.get(f"/v1/runs/{forked['root']}")).json()
        assert record["forked_from"] == {"run_id": original["root"], "turn": 2}
        # The fork's own turns: the shared first one and turn 2 run again.
        await expect(turns).to_have_count(2, timeout=WAIT_MS)
        await expect(page.locator(".msg.user")).to_have_text(["question 2"])
        assert errors == []
