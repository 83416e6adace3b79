"""A sleeping run survives the Temporal server restarting (issue 47): its timer is the
server's, kept in the server's database, so a week's sleep is still there to be woken by a
message after the restart, and a short one ends by its timer after it. A real dev server on a
database file of its own, stopped and started again on the same file and port."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from otherone.client.agent_client import AgentClient, build_request
from otherone.definitions import RuntimeLimits
from otherone.runs import RunOutcome
from otherone.store import Store
from otherone.worker.app import build_worker, connect
from otherone.worker.devserver import DevServer, free_port
from tests.harness import scripted_config
from tests.providers import RecordingProvider
from tests.test_sleep import events, sleep_call, sleeper, sleeping, tool_results

pytestmark = pytest.mark.timeout(180)
LONG = RuntimeLimits(run_timeout=timedelta(days=30), root_timeout=timedelta(days=30))


async def test_sleeping_runs_survive_a_temporal_server_restart(
    tmp_path: Path, task_queue: str
) -> None:
    db_file, port = tmp_path / "temporal.db", free_port()
    server = DevServer(db_file=db_file, port=port, headless=True)
    await server.start()
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    provider = RecordingProvider()
    script = {
        "sleeper": [{"tool_calls": [sleep_call("nap", duration="P7D")]}, "awake"],
        "napper": [{"tool_calls": [sleep_call("nap", duration="PT3S")]}, "rested"],
    }
    config = scripted_config(
        script, agents=[sleeper(), sleeper(id="napper", description="naps")], limits=LONG
    )
    try:
        client = await connect(server.address)
        agents = AgentClient(client, task_queue=task_queue, store=store)
        async with build_worker(
            client, config, store, task_queue=task_queue, providers={"scripted": provider}
        ):
            week = await agents.start(build_request(entry_agent="sleeper", input="go"))
            short = await agents.start(build_request(entry_agent="napper", input="go"))
            await sleeping(agents, week.run_id)
            await sleeping(agents, short.run_id)
            await server.stop()
            server = DevServer(db_file=db_file, port=port, headless=True)
            await server.start()  # same file, same port: the runs and their timers are there
            rested = await asyncio.wait_for(short.result(), 120)
            await sleeping(agents, week.run_id)  # still asleep after the restart
            await week.send_message("wake up")
            awake = await asyncio.wait_for(week.result(), 120)
        [short_end] = events(store, short.run_id, "sleep_ended")
        [week_end] = events(store, week.run_id, "sleep_ended")
    finally:
        store.close()
        await server.stop()
    assert (rested.outcome, rested.text) == (RunOutcome.COMPLETED, "rested")
    assert (awake.outcome, awake.text) == (RunOutcome.COMPLETED, "awake")
    assert (short_end["reason"], week_end["reason"]) == ("timer", "message")
    assert tool_results(provider)["nap"]["reason"] == "message"  # the last call: the week's
