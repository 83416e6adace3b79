"""The page at ``/`` of `otherone serve`, driven in headless Chromium (Debian's, via Playwright).

A person picks the team's coordinator, sends a message, sees the children (researcher and
writer) appear in the run tree with links to the Temporal Web UI, sees the answer stream in
(the bubble is still streaming while the first chunks are shown), then starts a slow run, sends
it a message (a signal, no new run) and cancels it from the page, then approves a tool call that
waits for a person. Chromium missing: skipped locally, a failure in CI.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, Route, expect
from temporalio.client import Client

from otherone.api.dependencies import ApiContext
from otherone.api.server import ApiServer
from otherone.definitions import AccessPolicy, AgentDefinition, ModelOverrides
from otherone.mcp_servers import McpServer
from otherone.store import Store
from otherone.tools import tool
from tests.api_env import api_env
from tests.harness import scripted_config

pytestmark = pytest.mark.timeout(120)
WAIT_MS = 20_000
ANSWER = ["Here is ", "your day ", "in Paris: ", "sunny, ", "and a walk ", "by the Seine."]
SCRIPT: dict[str, list[Any]] = {
    "coordinator": [
        {
            "text": "Asking the team.",
            "tool_calls": [
                {
                    "name": "agent.call",
                    "id": "call_research",
                    "arguments": {"agent": "researcher", "task": "Weather in Paris?"},
                },
                {
                    "name": "agent.call",
                    "id": "call_write",
                    "arguments": {"agent": "writer", "task": "A note for Paris."},
                },
            ],
        },
        {"chunks": ANSWER, "chunk_delay_seconds": 0.4},
    ],
    "researcher": [{"chunks": ["Sunny, ", "21 °C."], "chunk_delay_seconds": 0.2}],
    "writer": [{"chunks": ["Coffee, ", "then the Louvre."], "chunk_delay_seconds": 0.2}],
    "slow": [{"delay_seconds": 60, "text": "never"}],
    "mailer": [
        {
            "tool_calls": [
                {"id": "note", "name": "send_note", "arguments": {"to": "bo", "text": "hi"}}
            ]
        },
        {"text": "The note is sent.", "finish_reason": "length"},  # cut: the page says so
    ],
}


@tool(approval="always")
def send_note(to: str, text: str) -> str:
    """Send a note.

    Args:
        to: Who gets it.
        text: What it says.
    """
    return f"sent to {to}"


def team() -> Any:
    agents = [
        AgentDefinition(
            id="coordinator",
            description="Plans with a team",
            callable_agents=AccessPolicy.allow("researcher", "writer"),
            model_overrides=ModelOverrides(parallel_tool_calls=True),
        ),
        AgentDefinition(id="researcher", description="Finds facts"),
        AgentDefinition(id="writer", description="Writes notes"),
        AgentDefinition(id="slow", description="Takes its time"),
        AgentDefinition(
            id="mailer", description="Sends notes", tools=AccessPolicy.allow("send_note")
        ),
    ]
    return scripted_config(SCRIPT, agents=agents, tools=[send_note])


AGENT = AgentDefinition(id="solo", description="Answers alone")


async def send(page: Page, agent: str, text: str) -> None:
    await page.select_option("#agent", agent)
    await page.fill("#message", text)
    await page.click("#send")


async def test_page_runs_a_team_streams_the_answer_and_cancels(
    browser: Browser, client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, team(), tmp_path) as api:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: message.type == "error" and errors.append(message.text))
        await page.goto(api.url)
        await expect(page.locator("#agent option")).to_have_count(5, timeout=WAIT_MS)

        await send(page, "coordinator", "Plan a day in Paris.")
        await expect(page.locator(".msg.user")).to_have_text("Plan a day in Paris.")
        tree = page.locator("#tree tbody")
        for child in ("researcher", "writer"):
            row = tree.locator("tr", has_text=child)
            await expect(row).to_be_visible(timeout=WAIT_MS)
        # The answer streams in: a partial, still-streaming bubble before the whole text.
        streaming = page.locator(".msg.assistant.streaming")
        await expect(streaming).to_contain_text("Here is", timeout=WAIT_MS)
        assert "by the Seine." not in await streaming.inner_text()
        await expect(page.locator("#run-status")).to_have_text("run completed", timeout=WAIT_MS)
        await expect(page.locator(".msg.assistant").last).to_have_text("".join(ANSWER))
        assert await page.locator(".msg.assistant.streaming").count() == 0
        rows = tree.locator("tr")
        await expect(rows).to_have_count(3)
        await expect(tree.locator(".status")).to_have_text(["completed"] * 3, timeout=WAIT_MS)
        root_row = rows.first
        link = await root_row.locator("a.ui-link").get_attribute("href")
        run_id = await root_row.get_attribute("data-run-id")
        assert link is not None and run_id is not None
        assert link == f"http://localhost:8233/namespaces/default/workflows/{run_id}"
        await expect(page.locator("#run-link a")).to_have_attribute("href", link)
        screenshot = tmp_path / "otherone-page.png"
        await page.screenshot(path=str(screenshot), full_page=True)

        # A slow run, cancelled from the page.
        await send(page, "slow", "Take your time.")
        await expect(page.locator("#cancel")).to_be_enabled(timeout=WAIT_MS)
        await expect(tree.locator("tr .status").first).to_have_text("running", timeout=WAIT_MS)
        # While it runs, a message is a signal to it (not a new run).
        await page.fill("#message", "Any news?")
        await page.click("#send")
        await expect(page.locator(".msg.user")).to_have_count(3, timeout=WAIT_MS)
        await expect(page.locator(".msg.user").last).to_have_text("Any news?")
        assert await tree.locator("tr").count() == 1  # still the one slow run
        await expect(page.locator("#error")).to_be_hidden()
        # A reload keeps the conversation: the page follows the running run again.
        slow_id = await tree.locator("tr").first.get_attribute("data-run-id")
        await page.reload()
        await expect(page.locator("#run-status")).to_have_text(
            f"run {slow_id} running", timeout=WAIT_MS
        )
        await expect(page.locator("#agent")).to_have_value("slow")
        await expect(page.locator("#cancel")).to_be_enabled()
        await expect(tree.locator("tr .status").first).to_have_text("running", timeout=WAIT_MS)
        await page.click("#cancel")
        await expect(page.locator("#run-status")).to_have_text("run cancelled", timeout=WAIT_MS)
        await expect(tree.locator(".status").first).to_have_text("cancelled", timeout=WAIT_MS)

        # A tool that needs approval: the page lists the request; approving lets the run finish.
        await send(page, "mailer", "Send bo a note.")
        request = page.locator("#approvals li.approval")
        await expect(request).to_contain_text("send_note", timeout=WAIT_MS)
        await expect(tree.locator(".status").first).to_have_text(
            "waiting_for_approval", timeout=WAIT_MS
        )
        await request.locator("button.approve").click()
        await expect(page.locator("#run-status")).to_have_text("run completed", timeout=WAIT_MS)
        await expect(page.locator(".msg.assistant").last).to_have_text("The note is sent.")
        cut = page.locator(".msg.system", has_text="cut at the model's max_tokens")
        await expect(cut).to_have_count(1)
        await expect(page.locator("#approvals li.approval")).to_have_count(0)
        assert not errors, errors
        print(f"page screenshot: {screenshot}")


async def test_page_says_when_no_worker_takes_the_run(
    browser: Browser, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run with no worker shows no progress: after 15 quiet seconds the page asks Temporal
    who polls the queue and says the run waits for a worker (a user saw "running" forever).
    The server shows no Web UI (its context has no `ui_url`): the page links to none."""
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    context = ApiContext(temporal=client, store=store, task_queue=task_queue, agents=[AGENT])
    try:
        async with ApiServer(context, log_level="warning") as server:
            page = await browser.new_page()
            await page.goto(server.url)
            await expect(page.locator("#agent option")).to_have_count(1, timeout=WAIT_MS)
            await send(page, "solo", "Anyone there?")
            await expect(page.locator("#run-status")).to_contain_text("running", timeout=WAIT_MS)
            # No Web UI address handed out (`otherone serve`'s default): no link, not a dead one.
            await expect(page.locator("#tree tbody tr")).to_have_count(1, timeout=WAIT_MS)
            await expect(page.locator("#run-link a, a.ui-link")).to_have_count(0)
            warning = page.locator("#worker-warning")
            await expect(warning).to_contain_text(
                f'No worker is taking task queue "{task_queue}"', timeout=40_000
            )
            run_id = await page.evaluate(
                "() => JSON.parse(sessionStorage.getItem('otherone-page')).root"
            )
            await client.get_workflow_handle(run_id).terminate("the test ends")
    finally:
        store.close()


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def clerk() -> Any:
    """A clerk whose note waits for a person, then adds up four sums (activity to list)."""
    sums = [
        {"id": f"sum_{index}", "name": "add", "arguments": {"a": index, "b": 2}}
        for index in range(4)
    ]
    script = {
        "clerk": [
            {
                "tool_calls": [
                    {"id": "note", "name": "send_note", "arguments": {"to": "bo", "text": "hi"}}
                ]
            },
            {"tool_calls": sums},
            "Noted and added.",
        ]
    }
    agents = [
        AgentDefinition(
            id="clerk", description="Notes and sums", tools=AccessPolicy.allow("send_note", "add")
        )
    ]
    return scripted_config(script, agents=agents, tools=[send_note, add])


async def test_an_approved_call_is_counted_once_in_the_run_tree(
    browser: Browser, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The tree's numbers are the run's record: the record counts a call as the model makes it,
    so the page that also added the call's `tool_started` showed one tool too many until the
    next refresh. The refreshes are held here, so the page shows only what events did."""
    async with api_env(client, task_queue, clerk(), tmp_path) as api:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        await page.goto(api.url)
        await send(page, "clerk", "Note it.")
        request = page.locator("#approvals li.approval")
        await expect(request).to_contain_text("send_note", timeout=WAIT_MS)
        tools = page.locator("#tree tbody tr").first.locator("td").nth(3)
        await expect(tools).to_have_text("1", timeout=WAIT_MS)  # the record counts the call

        release = asyncio.Event()

        async def held(route: Route) -> None:
            await release.wait()
            await route.continue_()

        await page.route("**/tree", held)
        await request.locator("button.approve").click()
        started = page.locator("#activity li", has_text="send_note({")
        await expect(started).to_have_count(1, timeout=WAIT_MS)
        await expect(tools).to_have_text("1")
        release.set()
        await page.unroute("**/tree")
        await expect(page.locator("#run-status")).to_have_text("run completed", timeout=WAIT_MS)
        await expect(tools).to_have_text("5", timeout=WAIT_MS)


#: Whether every number of the activity list fits where it is drawn: inside the items, or in
#: the list's padding (outside, "10." and up were clipped to ".0" by the scrolling list).
MARKERS_FIT = """() => {
  const list = document.querySelector("#activity");
  const style = getComputedStyle(list);
  if (style.listStylePosition === "inside") return true;
  const context = document.createElement("canvas").getContext("2d");
  context.font = `${style.fontSize} ${style.fontFamily}`;
  return context.measureText(`${list.children.length}. `).width <= parseFloat(style.paddingLeft);
}"""


async def test_the_activity_shows_results_in_order_and_numbers_past_nine(
    browser: Browser, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Each tool's result (its start, one line) is listed; a person's decision comes before
    the run's `approval_decided`, even when the run's event arrives before the answer to the
    decision (held here until it has); the list's numbers 10 and up are whole."""
    async with api_env(client, task_queue, clerk(), tmp_path) as api:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        await page.goto(api.url)
        await send(page, "clerk", "Note it.")
        request = page.locator("#approvals li.approval")
        await expect(request).to_contain_text("send_note", timeout=WAIT_MS)
        activity = page.locator("#activity li")

        async def answered_after_the_event(route: Route) -> None:
            answer = await route.fetch()
            decided = activity.filter(has_text="decided: send_note")
            await expect(decided).to_have_count(1, timeout=WAIT_MS)
            await route.fulfill(response=answer)

        await page.route("**/approvals/note", answered_after_the_event)
        await request.locator("button.approve").click()
        await expect(page.locator("#run-status")).to_have_text("run completed", timeout=WAIT_MS)
        texts = await activity.all_inner_texts()
        assert texts.index("approve: send_note") < texts.index("decided: send_note"), texts
        assert "clerk: send_note → sent to bo" in texts, texts
        assert [f"clerk: add → {index + 2}" in texts for index in range(4)] == [True] * 4
        assert len(texts) >= 10, texts
        assert await page.evaluate(MARKERS_FIT)


async def test_the_page_says_when_a_granted_mcp_server_offers_no_tools(
    browser: Browser, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run whose agent was granted the tools of a server that could not start (its command
    does not exist) says so in the conversation, not only in the worker's log."""
    config = scripted_config(
        {"clock": ["I cannot tell the time."]},
        agents=[AgentDefinition(id="clock", description="Tells the time", tools=["mcp.time.*"])],
    )
    config.add_mcp_server(McpServer(name="time", command=str(tmp_path / "uvx")))
    async with api_env(client, task_queue, config, tmp_path) as api:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        await page.goto(api.url)
        await send(page, "clock", "What time is it in Tokyo?")
        await expect(page.locator("#run-status")).to_have_text("run completed", timeout=WAIT_MS)
        said = page.locator(".msg.system", has_text="MCP server 'time' offered no tools")
        await expect(said).to_contain_text("its command was not found")
