"""The page's schedules panel (`/assets/schedules.js`), driven in headless Chromium: a person
creates a cron schedule for the chosen agent, pauses it, fires it now (a run starts and ends),
resumes it and deletes it; a bad interval is refused on the page, naming the field. The page
holds a token bound to a partition of its own, so no other test's schedule is listed."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest
from playwright.async_api import Browser, Dialog, expect
from temporalio.client import Client

from otherone.api import ApiToken
from otherone.client.schedules import Schedules
from otherone.definitions import AgentDefinition
from otherone.errors import ScheduleNotFoundError
from tests.api_env import api_env
from tests.harness import scripted_config, wait_until

pytestmark = pytest.mark.timeout(120)
WAIT_MS = 20_000


async def test_the_page_creates_pauses_fires_resumes_and_deletes_a_schedule(
    browser: Browser, client: Client, task_queue: str, tmp_path: Path
) -> None:
    partition = f"page-{uuid.uuid4().hex[:10]}"
    token = f"token-{uuid.uuid4().hex}"
    config = scripted_config(
        {"reporter": [{"text": "All quiet."}]},
        agents=[AgentDefinition(id="reporter", description="Reports")],
    )
    schedules = Schedules(client, task_queue=task_queue, partition_key=partition)
    name = "page-daily"
    headers = {"Authorization": f"Bearer {token}"}
    async with api_env(
        client, task_queue, config, tmp_path, tokens={token: ApiToken(partition)}
    ) as api:
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))

        async def accept(dialog: Dialog) -> None:
            await dialog.accept()

        page.on("dialog", accept)
        try:
            await page.goto(api.url)
            await page.fill("#token", token)
            await page.dispatch_event("#token", "change")
            await expect(page.locator("#agent option")).to_have_count(1, timeout=WAIT_MS)
            await page.click("#schedules summary")
            items = page.locator("#schedule-list li")
            await expect(items).to_have_text(["no schedules"], timeout=WAIT_MS)

            # A bad interval is refused on the page, naming the field; nothing is created.
            await page.fill("#schedule-name", name)
            await page.select_option("#schedule-kind", "every")
            await page.fill("#schedule-timing", "soon")
            await page.fill("#schedule-message", "How are things?")
            await page.click("#schedule-create")
            await expect(page.locator("#error")).to_contain_text("every: not a duration")
            with pytest.raises(ScheduleNotFoundError):
                await schedules.get(name)

            await page.select_option("#schedule-kind", "cron")
            await page.fill("#schedule-timing", "0 9 * * 1-5")
            await page.click("#schedule-create")
            item = page.locator("#schedule-list li.schedule", has_text=name)
            await expect(item).to_contain_text("reporter", timeout=WAIT_MS)
            await expect(item).to_contain_text("cron 0 9 * * 1-5")
            await expect(item.locator(".active")).to_be_visible()
            await expect(page.locator("#error")).to_be_hidden()
            created = (await api.http.get(f"/v1/schedules/{name}", headers=headers)).json()
            assert (created["entry_agent"], created["cron"]) == ("reporter", ["0 9 * * 1-5"])

            await item.get_by_role("button", name="Pause").click()
            await expect(item.locator(".paused")).to_be_visible(timeout=WAIT_MS)
            assert (await schedules.get(name)).paused

            # Fired now while paused: a run of the agent starts and ends.
            await item.get_by_role("button", name="Run now").click()
            fired = await _fired_run(schedules, name)
            assert fired.startswith(f"{name}.{partition}-")
            record = (await api.http.get(f"/v1/runs/{fired}/result", headers=headers)).json()
            assert (record["outcome"], record["agent_id"]) == ("completed", "reporter"), record

            await item.get_by_role("button", name="Resume").click()
            await expect(item.locator(".active")).to_be_visible(timeout=WAIT_MS)
            assert not (await schedules.get(name)).paused

            await item.get_by_role("button", name="Delete").click()
            await expect(items).to_have_text(["no schedules"], timeout=WAIT_MS)
            with pytest.raises(ScheduleNotFoundError):
                await schedules.get(name)
            assert not errors, errors
        finally:
            with contextlib.suppress(ScheduleNotFoundError):  # deleted by the page already
                await schedules.delete(name)


async def _fired_run(schedules: Schedules, name: str) -> str:
    """The id of the schedule's first run, once Temporal lists it (bounded wait)."""
    found: list[str] = []

    async def listed() -> bool:
        view = await schedules.get(name)
        found[:] = [run.run_id for run in view.recent_runs]
        return bool(found)

    await wait_until(listed, within=20, interval=0.2, message=f"a run of {name}")
    return found[0]
