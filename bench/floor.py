"""The floor: the same workflows and activities as our runs, on the bare Temporal SDK.

No agent logic, no store, trivial activities; the default data converter. Each workflow schedules
exactly the activities (and child workflows) one of our runs does, in the same order:

- w1/w2 (`FloorRun`): prepare, ``turns`` x (model, tool), model, finish (prepare and finish
  as local activities, as ours runs them).
- w3 (`FloorTree`): prepare, model, per child (in parallel) a check activity then a child
  workflow, model, finish; a leaf is prepare, model, finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from uuid import uuid4

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

with workflow.unsafe.imports_passed_through():
    from bench.common import (
        MAX_CONCURRENT_ACTIVITIES,
        Result,
        Sizes,
        Workload,
        concurrent_result,
        fanout_result,
        last_run_activities,
        main,
        not_applicable,
        per_turn_result,
        sequential_runs_ms,
    )
    from otherone.worker.app import payload_visiting

TIMEOUT = timedelta(seconds=60)


@activity.defn(name="floor.step")
async def step(name: str) -> str:
    return name


async def _step(name: str) -> str:
    result: str = await workflow.execute_activity(step, name, start_to_close_timeout=TIMEOUT)
    return result


async def _local_step(name: str) -> str:
    """prepare and finish: local activities, as ours runs them (patch local-prepare-finish)."""
    result: str = await workflow.execute_local_activity(step, name, start_to_close_timeout=TIMEOUT)
    return result


@dataclass
class RunInput:
    turns: int


@workflow.defn(name="FloorRun")
class FloorRun:
    @workflow.run
    async def run(self, input: RunInput) -> str:
        await _local_step("prepare")
        for turn in range(input.turns):
            await _step(f"model {turn}")
            await _step(f"tool {turn}")
        await _step("model final")
        return await _local_step("finish")


@dataclass
class TreeInput:
    fanout: Sequence[int]  # children per level below this run, e.g. (8, 2) for a root


@workflow.defn(name="FloorTree")
class FloorTree:
    @workflow.run
    async def run(self, input: TreeInput) -> str:
        await _local_step("prepare")
        await _step("model")
        if input.fanout:
            below = TreeInput(fanout=tuple(input.fanout[1:]))
            await asyncio.gather(*(self._call(index, below) for index in range(input.fanout[0])))
            await _step("model final")
        return await _local_step("finish")

    async def _call(self, index: int, below: TreeInput) -> str:
        await _step(f"check call {index}")
        child_id = f"{workflow.info().workflow_id}/c{index}"
        result: str = await workflow.execute_child_workflow(FloorTree.run, below, id=child_id)
        return result


def _worker(client: Client, task_queue: str, *, sandboxed: bool = True) -> Worker:
    """The floor's worker; ``sandboxed=False`` runs its workflows as our workers do by default
    (`OTHERONE_WORKFLOW_SANDBOX=off`), so the floor pays no sandbox that ours skips, nor payload
    walks ours skips (`payload_visiting`)."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[FloorRun, FloorTree],
        activities=[step],
        max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
        workflow_runner=SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner(),
        # Ours walks a task's payloads without a task per payload: so does the floor.
        **payload_visiting(client.data_converter),
    )


async def _run(client: Client, task_queue: str, turns: int, workflow_id: str = "") -> str:
    return await client.execute_workflow(
        FloorRun.run, RunInput(turns), id=workflow_id or f"floor-{uuid4()}", task_queue=task_queue
    )


async def w1_turns(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async with _worker(client, task_queue):
        times = await sequential_runs_ms(
            lambda _: _run(client, task_queue, sizes.turns), sizes.w1_runs
        )
        await _run(client, task_queue, sizes.turns, workflow_id := f"floor-{uuid4()}")
    return per_turn_result(times, sizes.turns, await last_run_activities(client, workflow_id))


async def w2_concurrent(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async with _worker(client, task_queue):
        await _run(client, task_queue, sizes.turns)
        return await concurrent_result(
            lambda _: _run(client, task_queue, sizes.turns), sizes.w2_runs
        )


async def w3_fanout(client: Client, task_queue: str, sizes: Sizes) -> Result:
    tree = TreeInput(fanout=(sizes.children, sizes.grandchildren))

    async def one(_: int) -> str:
        return await client.execute_workflow(
            FloorTree.run, tree, id=f"floor-tree-{uuid4()}", task_queue=task_queue
        )

    async with _worker(client, task_queue):
        times = await sequential_runs_ms(one, sizes.w3_repeats)
    return {
        **fanout_result(times, 1 + sizes.children * (1 + sizes.grandchildren)),
        "child_workflows": True,
    }


async def w4_long(client: Client, task_queue: str, sizes: Sizes) -> Result:
    return not_applicable("the floor is defined for workloads 1-3")


async def w5_first_token(client: Client, task_queue: str, sizes: Sizes) -> Result:
    return not_applicable("the floor is defined for workloads 1-3")


WORKLOADS: dict[str, Workload] = {
    "w1_turns": w1_turns,
    "w2_concurrent": w2_concurrent,
    "w3_fanout": w3_fanout,
    "w4_long": w4_long,
    "w5_first_token": w5_first_token,
}


async def _connect(address: str) -> Client:
    return await Client.connect(address)


if __name__ == "__main__":
    main("floor", WORKLOADS, _connect)
