"""Replay scenario of a fork (issue 47): a root started by `AgentClient.fork`, whose input
carries its lineage (``forked_from``) and the original's configuration snapshot, in a session
that shares the original's first turn."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from otherone.runs import AgentRunRequest, ForkOrigin, RunOutcome
from tests.harness import agent_env
from tests.test_forks import clerk_config


async def forked_run(client: Client, task_queue: str, tmp: Path) -> str:
    """Two turns (each a tool call and an answer), then a fork at turn 2 with an edited
    message: the fork's history (its first model call sees turn 1 and the new message)."""
    async with agent_env(client, task_queue, clerk_config(), tmp) as env:
        for text in ("question 1", "question 2"):
            request = AgentRunRequest.model_validate(
                {"entry_agent": "clerk", "input": text, "session": {"session_id": "forked"}}
            )
            original = await env.agents.run(request)
        fork = await env.agents.fork(original.run_id, at_turn=2, input="question 2, edited")
        result = await fork.result()
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.forked_from == ForkOrigin(run_id=original.run_id, turn=2)
    return fork.run_id
