"""Load: 200 concurrent root runs, each with a tool call and a child, on one worker.

The wall time is printed (run with ``-s`` to see it) and reported in docs/benchmarks.md; the test
asserts correctness only, timing targets live in `bench/`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.definitions import AgentDefinition, RuntimeLimits
from otherone.runs import RunOutcome
from otherone.tools import ToolContext, tool
from tests.harness import agent_env, scripted_config

ROOTS = 200

#: Side effects by idempotency key, and every invocation (the test process hosts the worker).
EFFECTS: dict[str, str] = {}
INVOCATIONS: list[str] = []


@tool
def stamp(label: str, ctx: ToolContext) -> str:
    """Stamp a label: the side effect happens once per idempotency key, as a real tool does it
    (an activity can run again after a timeout under load; the key stays the same)."""
    INVOCATIONS.append(ctx.idempotency_key)
    EFFECTS.setdefault(ctx.idempotency_key, label)
    return f"stamped {label}"


@pytest.mark.timeout(900)
async def test_200_concurrent_roots_with_a_tool_and_a_child_each_complete(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {
            "lead": [
                {
                    "tool_calls": [
                        {"id": "s", "name": "stamp", "arguments": {"label": "x"}},
                        {
                            "id": "h",
                            "name": "agent.call",
                            "arguments": {"agent": "helper", "task": "help"},
                        },
                    ]
                },
                "lead done",
            ],
            "helper": ["helped"],
        },
        agents=[
            AgentDefinition.model_validate(
                {
                    "id": "lead",
                    "description": "leads",
                    "tools": ["stamp"],
                    "callable_agents": ["helper"],
                    "model_overrides": {"parallel_tool_calls": True},
                }
            ),
            AgentDefinition.model_validate({"id": "helper", "description": "helps"}),
        ],
        tools=[stamp],
        # The loop under load, not queueing at the fleet's permits: at the seed's defaults (4
        # model calls at a time for the whole fleet) 200 roots queue, and each hand-over of a
        # permit costs a workflow task, seconds on one saturated worker (see the issue notes);
        # tests/test_capacity.py covers the queue.
        limits=RuntimeLimits(max_concurrent_model_calls=64, max_concurrent_tool_calls=64),
    )
    EFFECTS.clear()
    INVOCATIONS.clear()
    async with agent_env(client, task_queue, config, tmp_path) as env:
        started = time.monotonic()
        handles = await asyncio.gather(
            *(
                env.agents.start(build_request(entry_agent="lead", input=f"job {n}"))
                for n in range(ROOTS)
            )
        )
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 800)
        wall = time.monotonic() - started
        children = await asyncio.gather(
            *(env.agents.get_run(f"{h.run_id}/helper.h") for h in handles[:20])
        )
    retried = len(INVOCATIONS) - len(set(INVOCATIONS))
    print(
        f"\n{ROOTS} roots (tool + child each): {wall:.1f} s wall, {retried} tool retries",
        file=sys.stderr,
    )
    assert [r.outcome for r in results] == [RunOutcome.COMPLETED] * ROOTS
    assert all(r.text == "lead done" for r in results)
    assert all(r.usage.agent_calls == 1 and r.usage.model_calls == 2 for r in results)
    # One tool call per run, under the key derived from run and call id, whatever the retries.
    assert sorted(EFFECTS) == sorted(f"{h.run_id}:s" for h in handles)
    assert set(INVOCATIONS) == set(EFFECTS)
    assert all(c.output is not None and c.output.value == "helped" for c in children)
