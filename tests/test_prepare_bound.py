"""A prepare_run that keeps failing is bounded by the run's deadline (and the store's total
timeout): the run ends when it would have ended anyway, not after minutes of retries."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from otherone.activities.agent_activities import AgentActivities
from otherone.activities.shared import ActivityContext
from otherone.client.agent_client import build_request
from otherone.contracts import PREPARE_DEADLINE_PASSED, PrepareRunInput, RunRef
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


async def test_a_prepare_attempt_after_the_deadline_ends_the_run_timed_out_at_once(
    store: Store,
) -> None:
    """However the retries of a local prepare are scheduled (a workflow task run again under
    load was seen to retry one for 90 s past its 4 s bound), an attempt that starts after the
    run's deadline stores nothing and gives up for good."""
    activities = AgentActivities(ActivityContext(scripted_config({"agent": ["hi"]}), store))
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, is_local=True, attempt=7)
    late = PrepareRunInput(
        ref=RunRef(
            run_id="late-1",
            root_run_id="late-1",
            agent_id="agent",
            partition_key="p",
            session_id="s-late",
            snapshot_version="",
        ),
        internal_session=True,
        request=build_request(entry_agent="agent", input="hello"),
        give_up_at=datetime.now(UTC) - timedelta(seconds=1),
    )
    with pytest.raises(ApplicationError) as refused:
        await environment.run(activities.prepare_run, late)
    assert refused.value.type == PREPARE_DEADLINE_PASSED
    assert refused.value.non_retryable
    assert store.read_events("late-1") == []
    assert store.get_run_record("p", "late-1") is None

    on_time = late.model_copy(update={"give_up_at": datetime.now(UTC) + timedelta(minutes=1)})
    plan = await environment.run(activities.prepare_run, on_time)  # the control: it prepares
    assert plan.agent_id == "agent"
