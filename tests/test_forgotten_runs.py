"""Messages, cancellations and decisions for a run Temporal no longer keeps (namespace
retention; here its execution is deleted): the store's record says the run has ended, and
that is the answer (`RunNotActiveError`, HTTP 409 `run_not_active`), not an RPC error; a run
neither knows is not found (issue 46, "the record tells the truth")."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request
from otherone.errors import RunNotActiveError, RunNotFoundError
from otherone.runs import RunOutcome
from otherone.store import Store
from tests.api_env import api_env
from tests.harness import scripted_config
from tests.processes import address_of, cli_env, otherone
from tests.test_idempotency_retention import assert_not_in_temporal, forget


async def test_a_forgotten_runs_messages_cancel_and_decisions_say_it_ended(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    tmp_path: Path,
    store: Store,
) -> None:
    config = scripted_config({"agent": ["once"]})
    async with api_env(client, task_queue, config, tmp_path, store=store) as api:
        agents = api.env.agents
        done = await agents.run(build_request(entry_agent="agent", input="hello"))
        assert done.outcome is RunOutcome.COMPLETED
        run_id = done.run_id
        await forget(client, run_id)

        ended = f"run '{run_id}' has ended (completed)"
        for attempt in (
            lambda: agents.send_message(run_id, "more"),
            lambda: agents.cancel(run_id),
            lambda: agents.approve(run_id, "call_1"),
            lambda: agents.deny(run_id, "call_1", "no"),
        ):
            with pytest.raises(RunNotActiveError) as raised:
                await attempt()
            assert str(raised.value).startswith(ended), raised.value
            assert "Temporal no longer keeps it" in str(raised.value)
        # A scoped client of another partition does not see it at all.
        stranger = AgentClient(client, task_queue=task_queue, store=store, partition_key="t2")
        with pytest.raises(RunNotFoundError):
            await stranger.send_message(run_id, "more")

        for path, body in (
            (f"/v1/runs/{run_id}/messages", {"messages": ["more"]}),
            (f"/v1/runs/{run_id}/cancel", None),
            (f"/v1/runs/{run_id}/approvals/call_1", {"decision": "approve"}),
        ):
            answer = await api.http.post(path, json=body)
            assert answer.status_code == 409, (path, answer.text)
            assert answer.json()["code"] == "run_not_active", answer.text
            assert answer.json()["detail"].startswith(ended), answer.text

        # The CLI says the same (exit 3, one line), on the workers' store.
        url = store.engine.url.render_as_string(hide_password=False)
        env = cli_env(address_of(temporal_env), task_queue, tmp_path, OTHERONE_DATABASE_URL=url)
        for command in (
            ("send", run_id, "more"),
            ("cancel", run_id),
            ("approve", run_id, "call_1"),
        ):
            done = await otherone(*command, env=env, limit=60)
            assert done.code == 3, done.describe()
            assert done.stderr.strip() == f"error: {ended}; Temporal no longer keeps it " + (
                "(namespace retention): it takes no messages, cancellation or decisions"
            ), done.describe()

        # A run neither Temporal nor the store knows is not found.
        for unknown_attempt in (
            lambda: agents.send_message("never-started", "more"),
            lambda: agents.cancel("never-started"),
            lambda: agents.approve("never-started", "call_1"),
        ):
            with pytest.raises(RunNotFoundError):
                await unknown_attempt()
        unknown = await api.http.post("/v1/runs/never-started/cancel")
        assert unknown.status_code == 404 and unknown.json()["code"] == "run_not_found"
    await assert_not_in_temporal(client, run_id)
