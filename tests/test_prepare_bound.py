"""A prepare_run that keeps failing is bounded by the run's deadline (and the store's total
timeout): the run ends when it would have ended anyway, not after minutes of retries."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.run_types import RunLimitOverrides
from otherone.runs import RunOutcome
from otherone.store import Store
from tests.harness import agent_env, scripted_config


class RefusingSnapshots(Store):
    """A real store whose first write of every prepare (the snapshot) always meets an outage
    (ridden out inside the activity, then retried by Temporal)."""

    def __init__(self, url: str) -> None:
        super().__init__(Store.open(url).engine)
        self.attempts = 0

    def save_snapshot(self, *args: Any, **kwargs: Any) -> None:
        self.attempts += 1
        raise ConnectionRefusedError("the database is down")


async def test_a_prepare_that_keeps_failing_ends_at_the_runs_deadline(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    store = RefusingSnapshots(f"sqlite:///{tmp_path / 'store.db'}")
    config = scripted_config({"assistant": ["never reached"]})
    request = build_request(
        entry_agent="assistant",
        input="hello",
        limits=RunLimitOverrides(root_timeout=timedelta(seconds=4)),
    )
    try:
        async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
            # Without the bound, prepare is retried for the store's 10 minutes.
            result = await asyncio.wait_for(env.agents.run(request), 90)
    finally:
        store.close()
    assert result.outcome is RunOutcome.TIMED_OUT, result.failure
    assert store.attempts >= 2  # the outage was waited out, then the deadline ended it
