"""The page's Trace view (`/assets/trace.js`) in headless Chromium: a person runs the tree of
`tests.test_trace_api` from the page (a child, a retried tool, an approval decided on the
page); the waterfall shows its bars, live while it runs, and clicking the first model call
shows its request messages and response, clicking the tool its arguments and result."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect
from temporalio.client import Client

from otherone.api import ApiToken
from tests.api_env import api_env
from tests.test_trace_api import TASK, check_tree_bars, traced_tree_config

pytestmark = pytest.mark.timeout(180)
WAIT_MS = 30_000


async def test_the_page_draws_the_tree_s_waterfall_and_a_call_s_messages(
    browser: Browser, client: Client, task_queue: str, tmp_path: Path
) -> None:
    token = f"token-{uuid.uuid4().hex}"
    tokens = {token: ApiToken(f"page-{uuid.uuid4().hex[:8]}")}
    async with api_env(client, task_queue, traced_tree_config(), tmp_path, tokens=tokens) as api:
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(api.url)
        await page.fill("#token", token)
        await page.dispatch_event("#token", "change")
        await expect(page.locator("#agent option")).to_have_count(2, timeout=WAIT_MS)
        await page.select_option("#agent", "boss")
        await page.fill("#message", TASK)
        await page.click("#send")

        # live: while the e-mail waits for a person, its wait is an open bar
        rows = page.locator("#trace-bars .trace-row")
        waiting = page.locator("#trace-bars .trace-row.kind-approval.open")
        await expect(waiting).to_have_count(1, timeout=WAIT_MS)
        retried = re.compile(r"\bretried\b")
        await expect(rows.filter(has_text="flaky").first).to_have_class(retried, timeout=1)
        request = page.locator("#approvals li.approval")
        await request.locator("button.approve").click()
        await expect(page.locator("#run-status")).to_have_text("run completed", timeout=WAIT_MS)

        root = await page.evaluate("state.root")
        trace = (
            await api.http.get(
                f"/v1/runs/{root}/trace", headers={"Authorization": f"Bearer {token}"}
            )
        ).json()
        check_tree_bars(trace, root)
        # every bar of the finished tree is drawn, in its order, none left open
        ids = [bar["id"] for bar in trace["bars"]]
        await expect(page.locator("#trace-bars .trace-row.open")).to_have_count(0, timeout=WAIT_MS)
        await expect(rows).to_have_count(len(ids), timeout=WAIT_MS)
        assert [await row.get_attribute("data-bar-id") for row in await rows.all()] == ids
        await expect(page.locator(".trace-row.superseded")).to_have_count(1)
        await expect(page.locator(".trace-row.retried")).to_have_count(2)  # tool + model
        child = page.locator(f'.trace-row[data-bar-id="run:{root}/helper.call_1"]')
        await expect(child).to_contain_text("helper")
        await expect(child).to_contain_text("completed")
        child_indent = await child.locator(".trace-label").evaluate("e => e.style.paddingLeft")
        assert child_indent == "1.8rem"  # root > agent call > child run

        # a model call's detail: the request messages and the response
        await page.locator(".trace-row.kind-model").first.click()
        detail = page.locator("#trace-detail")
        await expect(detail.locator(".detail-msg.request")).to_have_text([f"user{TASK}"])
        await expect(detail.locator(".detail-msg.response")).to_contain_text("flaky")
        # a tool call's detail: its arguments and result
        await page.locator(".trace-row.kind-tool", has_text="flaky").last.click()
        await expect(detail.locator(".arguments")).to_contain_text('"city": "Paris"')
        await expect(detail.locator(".result")).to_contain_text("sunny in Paris")
        screenshot = tmp_path / "trace.png"
        await page.locator("#trace-view").screenshot(path=str(screenshot))
        assert not errors, errors
        print(f"trace screenshot: {screenshot}")
