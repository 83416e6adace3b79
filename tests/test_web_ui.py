"""The Temporal Web UI shows our run tree: a browser test with headless Chromium.

Why: the README promises that runs are inspected in the Web UI and that a run's agent calls are
its child workflows there (Relationships tab). This test checks it the way a person would: a
dev server *with* its UI (the session server of `tests.conftest` is headless), the example
team's two-level run (coordinator -> researcher + writer), then Debian's ``chromium`` driven by
Playwright (``executable_path``; Playwright never downloads a browser here) opens the namespace's
workflow list, finds the root, opens it and sees both child workflow ids. It saves a
screenshot (path printed) for whoever wants to look.

Chromium missing: skipped locally, a failure in CI (``.ci/run`` installs it).
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.async_api import Browser, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from otherone.client.agent_client import build_request
from otherone.examples import EXAMPLE_CONFIG
from otherone.runs import RunOutcome
from otherone.toml_config import load_config
from otherone.worker.app import connect
from otherone.worker.devserver import DevServer
from tests.harness import agent_env

pytestmark = pytest.mark.timeout(180)

#: Seconds to wait for one page element (the UI loads its data through its own API calls).
ELEMENT_TIMEOUT_MS = 15_000
#: Seconds to keep reloading a page while the server's visibility catches up with the runs.
VISIBILITY_SECONDS = 60.0


async def until_visible(page: Page, selector: str, *, what: str, url: str | None = None) -> None:
    """Wait until ``selector`` is visible on ``url`` (loaded first) or on the current page.

    The UI shows what the server's visibility store has indexed, which may lag a moment behind
    the runs, and does not always refresh by itself: each wait is bounded, then the page is
    loaded again, for at most `VISIBILITY_SECONDS`."""
    deadline = time.monotonic() + VISIBILITY_SECONDS
    while True:
        if url is not None:
            await page.goto(url)
        try:
            await page.locator(selector).first.wait_for(state="visible", timeout=ELEMENT_TIMEOUT_MS)
            return
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                raise AssertionError(f"the Web UI did not show {what} at {page.url}") from None
            url = page.url


async def test_web_ui_shows_the_run_tree(browser: Browser, tmp_path: Path) -> None:
    async with DevServer() as server:  # in memory, Web UI on a free port
        assert server.ui_url is not None
        client = await connect(server.address, server.namespace)
        config = load_config(EXAMPLE_CONFIG)
        async with agent_env(client, "web-ui", config, tmp_path) as env:
            request = build_request(entry_agent="coordinator", input="Plan a day in Paris.")
            result = await env.agents.run(request)
        assert result.outcome is RunOutcome.COMPLETED, result
        root = result.run_id
        children = [f"{root}/researcher.call_research", f"{root}/writer.call_write"]

        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        namespace = quote(server.namespace, safe="")
        # The namespace's workflow list: the root is a row linking to its own page (the
        # children's rows link to ids with an encoded "/", so this selector is the root's).
        root_link = f'a[href*="/workflows/{root}/"]'
        workflows = f"{server.ui_url}/namespaces/{namespace}/workflows"
        await until_visible(page, root_link, what="the root run", url=workflows)
        await page.locator(root_link).first.click()
        await page.wait_for_url(f"**/workflows/{root}/**", timeout=ELEMENT_TIMEOUT_MS)

        # Its Relationships tab: the tree of child workflows, one row per agent call.
        await (
            page.get_by_role("tab", name="Relationships")
            .or_(page.get_by_role("link", name="Relationships"))
            .first.click()
        )
        await page.wait_for_url("**/relationships", timeout=ELEMENT_TIMEOUT_MS)
        for child in children:
            await until_visible(page, f'text="{child}"', what=f"the child {child}")
        body = await page.inner_text("body")
        assert "Child Count" in body and all(child in body for child in children), body

        screenshot = tmp_path / "web-ui-relationships.png"
        await page.screenshot(path=str(screenshot), full_page=True)
        assert screenshot.stat().st_size > 10_000
        print(f"Web UI screenshot: {screenshot}")
