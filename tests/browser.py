"""Debian's chromium for the browser tests (driven by Playwright, never `playwright install`)."""

from __future__ import annotations

import shutil

import pytest

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
