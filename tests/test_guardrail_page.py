"""The page of `otherone serve` shows what tripped and why (issue 45), driven in headless
Chromium like tests/test_api_page.py (skipped locally without Chromium, a failure in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, expect
from temporalio.client import Client

from otherone.definitions import AgentDefinition
from tests.api_env import api_env
from tests.guardrail_fixtures import ALL_GUARDRAILS
from tests.harness import scripted_config
from tests.test_api_page import WAIT_MS, send

pytestmark = pytest.mark.timeout(120)


async def test_the_page_says_which_guardrail_tripped_and_why(
    browser: Browser, client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = AgentDefinition.model_validate(
        {"id": "clerk", "description": "A clerk", "guardrails": {"input": ["no_secrets"]}}
    )
    config = scripted_config({"clerk": ["never said"]}, agents=[agent])
    for check in ALL_GUARDRAILS:
        config.add_guardrail(check)
    async with api_env(client, task_queue, config, tmp_path) as api:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        await page.goto(api.url)
        await send(page, "clerk", "my password is hunter2")
        await expect(page.locator("#run-status")).to_have_text("run failed", timeout=WAIT_MS)
        # The guardrail's line, then the run's failure quoting it: the first is the event's.
        said = page.locator(".msg.system", has_text="input guardrail 'no_secrets' tripped").first
        await expect(said).to_contain_text("the message carries a password")
