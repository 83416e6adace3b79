"""Three `otherone worker` processes share the queues; one is killed mid-way; nothing is lost.

Why: durability is the point of running agents on Temporal. A worker process can die at any
moment (OOM, node loss, ``kill -9``); the runs it was serving must finish on the other workers,
and side effects must not happen twice even though the interrupted tool calls run again.

Set-up: a real dev server (the session's), three real ``python -m otherone.client.cli worker``
processes with split model and tool queues (two serve every role, one only model and tools), a
shared SQLite store, and 50 root runs of ``lead``: a tool call with a side effect, then an
``agent.call`` to ``helper`` (a child run), then the answer. The tool records every attempt and
does its side effect once per idempotency key (an exclusive file create), and holds until the
test releases it — so when all 50 calls are running, the worker holding the most of them is
killed with SIGKILL. Then:

- all 50 runs complete with the scripted answer, the expected usage and their own tool result;
- there are exactly 50 side effects, one per run, keyed ``<run id>:<tool call id>``;
- every call the killed worker held ran again on a surviving worker (attempt > 1, same key);
- every transcript (root and child sessions) has each entry exactly once, in order.
"""

from __future__ import annotations

import asyncio
import json
import signal
import textwrap
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request
from otherone.runs import AgentRunResult, RunOutcome
from otherone.store import Store
from tests.harness import wait_until
from tests.processes import BackgroundProcess, address_of, cli_env, start_worker

pytestmark = pytest.mark.timeout(240)

RUNS = 50
PARTITION = "local"

TOOLS_MODULE = textwrap.dedent(
    '''
    """The side-effecting tool of tests/test_scale_out.py (imported by each worker process)."""

    import asyncio
    import hashlib
    import os
    from pathlib import Path

    from otherone.tools import ToolContext, tool

    DIR = Path(os.environ["SCALE_TEST_DIR"])


    @tool(timeout_seconds=120)
    async def record_effect(tag: str, ctx: ToolContext) -> dict[str, object]:
        """Do a side effect once per idempotency key, after the test releases it."""
        name = hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:32]
        attempt = DIR / "attempts" / f"{name}.{ctx.attempt}.{os.getpid()}"
        attempt.write_text(ctx.idempotency_key)
        while not (DIR / "release").exists():
            await asyncio.sleep(0.05)
        try:
            with (DIR / "effects" / name).open("x") as effect:  # at most once per key
                effect.write(ctx.idempotency_key)
        except FileExistsError:
            pass
        return {"run_id": ctx.run_id, "tag": tag}
    '''
)

CONFIG = textwrap.dedent(
    """
    [runtime]
    default_model = "scripted"
    tools = ["scale_tools:record_effect"]

    [policy]
    tools = "all"
    callable_agents = "all"

    # All 50 tool calls are held at once (then a worker is killed): above the fleet's permits.
    [limits]
    max_concurrent_model_calls = 64
    max_concurrent_tool_calls = 64

    [models.scripted]
    provider = "scripted"
    model = "scale"

    [[models.scripted.script.lead]]
    tool_calls = [{ name = "record_effect", id = "effect", arguments = { tag = "lead" } }]

    [[models.scripted.script.lead]]
    [[models.scripted.script.lead.tool_calls]]
    name = "agent.call"
    id = "ask"
    arguments = { agent = "helper", task = "confirm" }

    [[models.scripted.script.lead]]
    text = "lead done"

    [[models.scripted.script.helper]]
    text = "helper done"

    [agents.lead]
    description = "Records an effect, asks the helper, answers."
    system_prompt = "Record the effect, ask the helper, then answer."
    model = "scripted"
    tools = ["record_effect"]
    callable_agents = ["helper"]

    [agents.helper]
    description = "Confirms."
    system_prompt = "Confirm."
    model = "scripted"
    """
)


@dataclass
class Deployment:
    dir: Path
    env: dict[str, str]

    @property
    def attempts(self) -> list[tuple[str, int, int]]:
        """(idempotency key, attempt, pid) of every tool attempt so far."""
        found = []
        for path in (self.dir / "attempts").iterdir():
            _, attempt, pid = path.name.split(".")
            found.append((path.read_text(), int(attempt), int(pid)))
        return found

    @property
    def effects(self) -> list[str]:
        return [path.read_text() for path in (self.dir / "effects").iterdir()]


def _deployment(temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path) -> Deployment:
    for folder in ("attempts", "effects"):
        (tmp_path / folder).mkdir()
    (tmp_path / "scale_tools.py").write_text(TOOLS_MODULE)
    (tmp_path / "otherone.toml").write_text(CONFIG)
    env = cli_env(
        address_of(temporal_env),
        task_queue,
        tmp_path,
        config=tmp_path / "otherone.toml",
        SCALE_TEST_DIR=str(tmp_path),
        OTHERONE_MODEL_TASK_QUEUE=f"{task_queue}-model",
        OTHERONE_TOOL_TASK_QUEUE=f"{task_queue}-tools",
    )
    return Deployment(tmp_path, env)


@contextmanager
def _store(deployment: Deployment) -> Iterator[Store]:
    store = Store.open(deployment.env["OTHERONE_DATABASE_URL"])
    try:
        yield store
    finally:
        store.close()


async def test_fifty_runs_survive_a_killed_worker(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    deployment = _deployment(temporal_env, task_queue, tmp_path)
    workers: list[BackgroundProcess] = []
    try:
        for name, roles in (("worker-1", "all"), ("worker-2", "all"), ("worker-3", "model,tools")):
            workers.append(await start_worker(deployment.env, "--roles", roles, name=name))
        agents = AgentClient(client, task_queue=task_queue)
        handles = await asyncio.gather(
            *(
                agents.start(build_request(entry_agent="lead", input=f"run {index}"))
                for index in range(RUNS)
            )
        )
        run_ids = [handle.run_id for handle in handles]

        # Every run is inside its tool call, held: kill the worker holding the most of them.
        await wait_until(
            lambda: len(deployment.attempts) == RUNS, within=120, message="50 tool calls held"
        )
        held = Counter(pid for _, _, pid in deployment.attempts)
        victim = next(worker for worker in workers if worker.pid == held.most_common(1)[0][0])
        victim.process.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(victim.process.wait(), 30) == -signal.SIGKILL
        killed_keys = {key for key, _, pid in deployment.attempts if pid == victim.pid}
        (deployment.dir / "release").touch()

        results: list[AgentRunResult] = await asyncio.wait_for(
            asyncio.gather(*(handle.result() for handle in handles)), 150
        )
        survivors_alive = [w.process.returncode is None for w in workers if w is not victim]
    finally:
        await asyncio.gather(*(worker.stop(45) for worker in workers))

    assert all(survivors_alive)
    assert killed_keys, "the killed worker held no tool call"
    for result in results:
        assert result.outcome is RunOutcome.COMPLETED, result.failure
        assert result.text == "lead done"
        usage = result.usage
        assert (usage.model_calls, usage.tool_calls, usage.agent_calls) == (3, 2, 1)
    assert sorted(result.run_id for result in results) == sorted(run_ids)

    # Exactly one side effect per run, under the key the runtime promised (run id + call id).
    effects = deployment.effects
    assert sorted(effects) == sorted(f"{run_id}:effect" for run_id in run_ids)
    # The killed worker's calls ran again elsewhere, with the same key.
    attempts = deployment.attempts
    for key in killed_keys:
        again = [(attempt, pid) for k, attempt, pid in attempts if k == key and pid != victim.pid]
        assert again and all(attempt > 1 for attempt, _ in again), (key, attempts)

    with _store(deployment) as store:
        for result in results:
            _assert_transcripts(store, result)


def _assert_transcripts(store: Store, result: AgentRunResult) -> None:
    """Root and child sessions hold each entry once, in the loop's order."""
    root = store.load_entries(PARTITION, result.session_id)
    assert [entry.role for entry in root] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ], [(entry.entry_key, entry.role) for entry in root]
    assert len({entry.entry_key for entry in root}) == len(root)
    effect, answer = root[2], root[4]
    assert json.loads(effect.content) == {"run_id": result.run_id, "tag": "lead"}
    assert "helper done" in answer.content
    assert root[-1].content == "lead done"

    child = store.get_run_record(PARTITION, f"{result.run_id}/helper.ask")
    assert child is not None and child.session_id is not None
    assert child.output is not None and child.output.value == "helper done"
    entries = store.load_entries(PARTITION, child.session_id)
    assert [entry.role for entry in entries] == ["user", "assistant"]
