"""Debian's chromium for the browser tests (driven by Playwright, never `playwright install`)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Browser, async_playwright

from tests.store_fixtures import running_in_ci


def chromium_path() -> str:
    """The browser's path; skipped without it, except in CI, where the test must run."""
    found = shutil.which("chromium")
    if found is None:
        reason = "Debian's chromium is not installed (apt-get install -y chromium)"
        if running_in_ci():
            pytest.fail(f"the browser tests must run in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    return found


@asynccontextmanager
async def launched_chromium() -> AsyncIterator[Browser]:
    """Headless chromium for one test (the `browser` fixture of conftest.py)."""
    path = chromium_path()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=path, headless=True)
        try:
            yield launched
        finally:
            await launched.close()
