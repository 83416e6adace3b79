"""Fork from any turn (`otherone.client.forks`, issue 47) on the dev server and the store:
a fork shares the original's turns before the fork point by reference, runs that turn again,
and both sessions go on independently."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone import search_attributes as attrs
from otherone.client.agent_client import AgentClient
from otherone.client.forks import run_turns
from otherone.definitions import AgentDefinition, RuntimeLimits
from otherone.errors import InvalidRequestError, RunNotFoundError
from otherone.runs import AgentRunRequest, ForkOrigin, RunOutcome, RunRecord, RunStatus
from otherone.store import Store
from otherone.store.schema import run_records
from otherone.tools import tool
from tests.harness import AgentEnv, agent_env, scripted_config, wait_until
from tests.processes import address_of, cli_env, otherone
from tests.providers import RecordingProvider

pytestmark = pytest.mark.timeout(180)


@tool
def lookup(question: str) -> str:
    """Look a question up."""
    return f"notes on {question}"


def clerk_config(prompt: str = "You are the clerk.") -> object:
    """Each run of ``clerk``: a tool call (lookup), then its answer."""
    turns = [{"tool_calls": [{"name": "lookup", "arguments": {"question": "q"}}]}, "answered"]
    return scripted_config(
        {"clerk": turns},
        agents=[
            AgentDefinition.model_validate(
                {
                    "id": "clerk",
                    "description": "clerk",
                    "system_prompt": prompt,
                    "tools": ["lookup"],
                }
            )
        ],
        tools=[lookup],
        limits=RuntimeLimits(max_iterations_per_run=5),
    )


def _request(text: str, session_id: str, partition: str = "local") -> AgentRunRequest:
    return AgentRunRequest.model_validate(
        {
            "entry_agent": "clerk",
            "input": text,
            "session": {"session_id": session_id},
            "runtime_context": {"partition_key": partition},
        }
    )


async def _conversation(agents: AgentClient, session_id: str, turns: int) -> list[str]:
    """``turns`` runs in one session, each a turn (a question, a tool call, an answer)."""
    run_ids = []
    for number in range(1, turns + 1):
        result = await agents.run(_request(f"question {number}", session_id))
        assert result.outcome is RunOutcome.COMPLETED, result.failure
        run_ids.append(result.run_id)
    return run_ids


def _contents(store: Store, session_id: str) -> list[str]:
    return [entry.content for entry in store.load_entries("local", session_id)]


async def test_a_fork_at_turn_two_shares_turn_one_reruns_turn_two_and_goes_its_own_way(
    client: Client, task_queue: str, tmp_path: Path, store: Store
) -> None:
    provider = RecordingProvider()
    config = clerk_config()
    async with agent_env(
        client, task_queue, config, tmp_path, store=store, providers={"scripted": provider}
    ) as env:
        session = f"s-{uuid.uuid4().hex[:8]}"
        run_ids = await _conversation(env.agents, session, 5)
        original = run_ids[-1]
        before = store.load_entries("local", session)
        record = store.get_run_record("local", original)
        assert record is not None
        turns = await run_turns(store, record)
        assert [turn.message for turn in turns] == [f"question {n}" for n in range(1, 6)]
        assert all(turn.tool_calls == 1 for turn in turns)

        fork = await env.agents.fork(original, at_turn=2)
        result = await fork.result()
        assert result.outcome is RunOutcome.COMPLETED, result.failure
        assert result.session_id == fork.session_id != session
        assert result.forked_from == ForkOrigin(run_id=original, turn=2)

        # The fork's first model call saw exactly what the original's turn 2 first saw.
        first_of_turn_two = next(r for r in provider.requests if r.run_id == run_ids[1])
        first_of_fork = next(r for r in provider.requests if r.run_id == fork.run_id)
        assert first_of_fork.turn == 1
        assert first_of_fork.messages == first_of_turn_two.messages

        # Shared by reference: the fork's turn 1 is the original's very rows (same ids).
        forked = store.load_entries("local", fork.session_id)
        assert [e.id for e in forked[: len(turns[0].entries)]] == [e.id for e in turns[0].entries]
        assert store.session_links("local", fork.session_id) == {
            session: turns[1].first_entry_id - 1
        }

        # Lineage: the record (store and client), and the search attribute.
        stored = store.get_run_record("local", fork.run_id)
        assert stored is not None and stored.forked_from == ForkOrigin(run_id=original, turn=2)
        shown = await env.agents.get_run(fork.run_id)
        assert shown.forked_from == ForkOrigin(run_id=original, turn=2)
        query = f'{attrs.FORKED_FROM.name} = "{original}"'

        async def listed() -> bool:
            return [w.id async for w in client.list_workflows(query)] == [fork.run_id]

        await wait_until(listed, message="the fork listed by OtheroneForkedFrom")

        # The original is untouched, and both sessions go on independently.
        assert store.load_entries("local", session) == before
        more = await env.agents.run(_request("only in the fork", fork.session_id))
        assert more.outcome is RunOutcome.COMPLETED
        again = await env.agents.run(_request("only in the original", session))
        assert again.outcome is RunOutcome.COMPLETED
        in_fork, in_original = _contents(store, fork.session_id), _contents(store, session)
        assert "only in the fork" in in_fork and "only in the fork" not in in_original
        assert "only in the original" in in_original and "only in the original" not in in_fork
        assert "question 3" not in in_fork and in_fork.count("question 2") == 1
        # The fork's own turns: the shared one, its re-run, and the message sent to it.
        fork_record = store.get_run_record("local", more.run_id)
        assert fork_record is not None
        assert [t.message for t in await run_turns(store, fork_record)] == [
            "question 1",
            "question 2",
            "only in the fork",
        ]


async def test_a_fork_with_an_edited_message_and_a_fork_of_a_fork(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    async with agent_env(
        client, task_queue, clerk_config(), tmp_path, providers={"scripted": provider}
    ) as env:
        session = f"s-{uuid.uuid4().hex[:8]}"
        run_ids = await _conversation(env.agents, session, 3)
        fork = await env.agents.fork(run_ids[-1], at_turn=3, input="question 3, reworded")
        assert (await fork.result()).outcome is RunOutcome.COMPLETED
        first = next(r for r in provider.requests if r.run_id == fork.run_id)
        assert first.messages[-1] == {"role": "user", "content": "question 3, reworded"}
        contents = _contents(env.store, fork.session_id)
        assert "question 3" not in contents and "question 3, reworded" in contents

        # A fork of the fork at its turn 3 shares turns 1-2 (from the original's session, by
        # reference) and turn 3 is run again with the fork's own (edited) message.
        second = await env.agents.fork(fork.run_id, at_turn=3)
        assert (await second.result()).outcome is RunOutcome.COMPLETED
        first_again = next(r for r in provider.requests if r.run_id == second.run_id)
        assert first_again.messages == first.messages
        links = env.store.session_links("local", second.session_id)
        assert set(links) == {session, fork.session_id}


async def test_the_fork_runs_the_original_definition_unless_the_current_one_is_asked_for(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    provider = RecordingProvider()
    try:
        session = f"s-{uuid.uuid4().hex[:8]}"
        async with agent_env(
            client,
            task_queue,
            clerk_config("Prompt v1."),
            tmp_path,
            store=store,
            providers={"scripted": provider},
        ) as env:
            run_ids = await _conversation(env.agents, session, 2)
        async with agent_env(
            client,
            task_queue,
            clerk_config("Prompt v2."),
            tmp_path,
            store=store,
            providers={"scripted": provider},
        ) as env:
            kept = await env.agents.fork(run_ids[-1], at_turn=2)
            current = await env.agents.fork(run_ids[-1], at_turn=2, definition="current")
            for fork in (kept, current):
                assert (await fork.result()).outcome is RunOutcome.COMPLETED

            def system_prompt(run_id: str) -> str:
                first = next(r for r in provider.requests if r.run_id == run_id)
                return str(first.messages[0]["content"])

            assert "Prompt v1." in system_prompt(kept.run_id)
            assert "Prompt v2." in system_prompt(current.run_id)
            original = store.get_run_record("local", run_ids[-1])
            forked = store.get_run_record("local", kept.run_id)
            assert original is not None and forked is not None
            assert forked.snapshot_version == original.snapshot_version
            assert store.get_run_record("local", current.run_id).snapshot_version != (  # type: ignore[union-attr]
                original.snapshot_version
            )
    finally:
        store.close()


async def test_bad_forks_are_refused_naming_the_field(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with agent_env(client, task_queue, clerk_config(), tmp_path) as env:
        session = f"s-{uuid.uuid4().hex[:8]}"
        [run_id] = await _conversation(env.agents, session, 1)
        for turn in (0, -1, 2):
            with pytest.raises(InvalidRequestError) as refused:
                await env.agents.fork(run_id, at_turn=turn)
            assert refused.value.field == "at_turn"
        for text in ("", "  \n"):
            with pytest.raises(InvalidRequestError) as refused:
                await env.agents.fork(run_id, at_turn=1, input=text)
            assert refused.value.field == "input"
        with pytest.raises(InvalidRequestError) as refused:
            await env.agents.fork(run_id, at_turn=1, definition="newest")  # type: ignore[arg-type]
        assert refused.value.field == "definition"
        with pytest.raises(RunNotFoundError):
            await env.agents.fork("no-such-run", at_turn=1)
        # Another tenant's run is not found for a client scoped to its own partition.
        other = AgentClient(client, task_queue=task_queue, store=env.store, partition_key="other")
        with pytest.raises(RunNotFoundError):
            await other.fork(run_id, at_turn=1)
        # A child run is refused: fork its root.
        root = env.store.get_run_record("local", run_id)
        assert root is not None
        child = RunRecord(
            run_id=f"{run_id}/child",
            root_run_id=run_id,
            parent_run_id=run_id,
            agent_id="clerk",
            session_id=session,
            status=RunStatus.COMPLETED,
            depth=1,
        )
        env.store.upsert_run_record(child)
        with pytest.raises(InvalidRequestError) as refused:
            await env.agents.fork(child.run_id, at_turn=1)
        assert refused.value.field == "run_id"
        # Without a store nothing can be forked.
        bare = AgentClient(client, task_queue=task_queue)
        with pytest.raises(InvalidRequestError) as refused:
            await bare.fork(run_id, at_turn=1)
        assert refused.value.field == "store"
        # Nothing was started or changed by any of them.
        assert env.store.get_run_record("local", run_id) == root


@pytest_asyncio.fixture
async def cli(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> AsyncIterator[tuple[dict[str, str], AgentEnv]]:
    """CLI settings for the session server, and a clerk worker on the same store."""
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    try:
        async with agent_env(client, task_queue, clerk_config(), tmp_path, store=store) as agents:
            yield env, agents
    finally:
        store.close()


async def test_the_cli_lists_turns_forks_and_shows_the_lineage(
    cli: tuple[dict[str, str], AgentEnv],
) -> None:
    env, agents = cli
    session = f"s-{uuid.uuid4().hex[:8]}"
    run_ids = await _conversation(agents.agents, session, 2)
    shown = await otherone("show", run_ids[-1], env=env)
    assert shown.code == 0, shown.describe()
    assert "turns (otherone fork --at-turn N)" in shown.stdout
    assert "question 1" in shown.stdout and "question 2" in shown.stdout

    forked = await otherone("fork", run_ids[-1], "--at-turn", "2", "--input", "reworded", env=env)
    assert forked.code == 0, forked.describe()
    fork_id = forked.stdout.strip()
    assert "forked at turn 2" in forked.stderr
    result = await agents.agents.result(fork_id)
    assert result.outcome is RunOutcome.COMPLETED
    lineage = await otherone("show", fork_id, env=env)
    assert f"{run_ids[-1]} at turn 2" in lineage.stdout, lineage.describe()
    assert "reworded" in lineage.stdout  # its own turns: the shared one and the edited one
    as_json = await otherone("show", fork_id, "--json", env=env)
    assert json.loads(as_json.stdout)["forked_from"] == {"run_id": run_ids[-1], "turn": 2}

    missing = await otherone("fork", run_ids[-1], "--at-turn", "3", env=env)
    assert missing.code == 2, missing.describe()
    assert "at_turn" in missing.stderr and "no turn 3" in missing.stderr
    empty = await otherone("fork", run_ids[-1], "--at-turn", "1", "--input", " ", env=env)
    assert empty.code == 2 and "input" in empty.stderr, empty.describe()


async def test_a_running_run_is_forked_at_its_stored_turns(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    async with agent_env(
        client, task_queue, clerk_config(), tmp_path, providers={"scripted": provider}
    ) as env:
        session = f"s-{uuid.uuid4().hex[:8]}"
        await _conversation(env.agents, session, 1)
        gate = provider.gate("clerk", 1)  # every run's first model call waits from now on
        running = await env.agents.start(_request("question 2", session))

        async def holding() -> bool:
            return any(r.run_id == running.run_id for r in provider.requests)

        await wait_until(holding, message="the second run's first model call")
        assert (await running.record()).status is RunStatus.RUNNING
        fork = await env.agents.fork(running.run_id, at_turn=2)

        async def fork_holding() -> bool:
            return any(r.run_id == fork.run_id for r in provider.requests)

        await wait_until(fork_holding, message="the fork's first model call")
        gate.set()
        for handle in (running, fork):
            assert (await handle.result()).outcome is RunOutcome.COMPLETED
        calls = {r.run_id: r for r in provider.requests if r.turn == 1}
        assert calls[fork.run_id].messages == calls[running.run_id].messages


async def test_a_run_without_a_recorded_snapshot_forks_with_the_current_definition_only(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with agent_env(client, task_queue, clerk_config(), tmp_path) as env:
        session = f"s-{uuid.uuid4().hex[:8]}"
        [run_id] = await _conversation(env.agents, session, 1)
        # As a record stored before the snapshot version was kept (NULL in the column).
        with env.store.engine.begin() as conn:
            conn.execute(
                run_records.update()
                .where(run_records.c.run_id == run_id)
                .values(snapshot_version=None)
            )
        with pytest.raises(InvalidRequestError) as refused:
            await env.agents.fork(run_id, at_turn=1)
        assert refused.value.field == "definition"
        fork = await env.agents.fork(run_id, at_turn=1, definition="current")
        assert (await fork.result()).outcome is RunOutcome.COMPLETED
