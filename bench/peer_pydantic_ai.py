"""Peer: Pydantic AI's Temporal durable execution (`TemporalDurability`), offline `FunctionModel`.

Runs in `bench/.venv-peers`. Models are stateless functions of the message history (the prompt
says how many turns or children), so concurrent runs share them safely:

- w1/w2/w4: one agent; each turn calls the `tick` tool (a sync tool, so an activity), then answers.
- w3: `root` calls `call_middle` 8 times in one response; `call_middle` is a tool that runs as a
  Temporal child workflow (``metadata={'temporal': {'child_workflow': {}}}``) and runs the
  `middle` agent there, which does the same with `leaf`: child-workflow delegation.
- w5: `event_stream_topic` publishes the model stream to a Workflow Stream that the client reads
  with `stream_agent_events` (the integration's documented defaults: 100 ms batches and polls).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from uuid import uuid4

from pydantic_ai import Agent, UsageLimits
from pydantic_ai.durable_exec.temporal import (
    AgentEventStream,
    PydanticAIPlugin,
    PydanticAIWorkflow,
    TemporalDurability,
    stream_agent_events,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from bench.common import (
        MAX_CONCURRENT_ACTIVITIES,
        ChunkClock,
        Result,
        Sizes,
        Workload,
        concurrent_result,
        fanout_result,
        history_events,
        last_run_activities,
        long_run_result,
        main,
        per_turn_result,
        scheduled_counts,
        sequential_runs_ms,
        with_memory,
    )

CLOCK = ChunkClock()


def _prompt(messages: list[ModelMessage]) -> list[str]:
    for message in messages:
        for part in getattr(message, "parts", ()):
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content.split()
    return []


def _returns(messages: list[ModelMessage]) -> int:
    return sum(
        isinstance(part, ToolReturnPart)
        for message in messages
        for part in getattr(message, "parts", ())
    )


# --------------------------------------------------------------------------- w1, w2, w4


def count_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Prompt ``count N``: N turns with one `tick` call each, then a final answer."""
    turns, done = int(_prompt(messages)[1]), _returns(messages)
    if done < turns:
        return ModelResponse(
            parts=[
                TextPart(f"step {done}"),
                ToolCallPart("tick", {"n": done}, tool_call_id=f"t{done}"),
            ]
        )
    return ModelResponse(parts=[TextPart("done")])


counter = Agent(FunctionModel(count_model), name="counter", capabilities=[TemporalDurability()])


@counter.tool_plain
async def tick(n: int) -> dict[str, int]:
    """Count one step (``async``, as every contender's tool)."""
    return {"n": n}


@workflow.defn
class CounterWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (counter,)

    @workflow.run
    async def run(self, prompt: str) -> str:
        # The default request limit (50) would end the 300-turn run: lift it, as we lift ours.
        result = await counter.run(prompt, usage_limits=UsageLimits(request_limit=None))
        return result.output


# --------------------------------------------------------------------------- w3


def fan_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Prompt ``fanout A B ...``: call the next level A times at once, then answer."""
    levels = _prompt(messages)[1:]
    if not levels or _returns(messages):
        return ModelResponse(parts=[TextPart("done")])
    tool = info.function_tools[0].name
    task = " ".join(["fanout", *levels[1:]])
    calls = [
        ToolCallPart(tool, {"task": task}, tool_call_id=f"c{i}") for i in range(int(levels[0]))
    ]
    return ModelResponse(parts=calls)


CHILD_WORKFLOW = {"temporal": {"child_workflow": {}}}
leaf = Agent(FunctionModel(fan_model), name="leaf", capabilities=[TemporalDurability()])
middle_tools = FunctionToolset[None](id="middle_calls")
middle = Agent(
    FunctionModel(fan_model),
    name="middle",
    toolsets=[middle_tools],
    capabilities=[TemporalDurability()],
)
root_tools = FunctionToolset[None](id="root_calls")
root = Agent(
    FunctionModel(fan_model),
    name="root",
    toolsets=[root_tools],
    capabilities=[TemporalDurability()],
)


@middle_tools.tool_plain(metadata=CHILD_WORKFLOW)
async def call_leaf(task: str) -> str:
    """Delegate a task to the leaf agent."""
    return (await leaf.run(task)).output


@root_tools.tool_plain(metadata=CHILD_WORKFLOW)
async def call_middle(task: str) -> str:
    """Delegate a task to the middle agent."""
    return (await middle.run(task)).output


@workflow.defn
class FanoutWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (root, middle, leaf)

    @workflow.run
    async def run(self, prompt: str) -> str:
        return (await root.run(prompt)).output


# --------------------------------------------------------------------------- w5


async def stream_model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    """Prompt ``stream KEY CHUNKS DELAY``: stream numbered chunks, stamping each as it leaves."""
    _, key, chunks, delay = _prompt(messages)
    for index in range(int(chunks)):
        CLOCK.on_sent(key, index)
        yield ChunkClock.chunk(index)
        await asyncio.sleep(float(delay))


streamer = Agent(
    FunctionModel(stream_function=stream_model),
    name="streamer",
    capabilities=[TemporalDurability(event_stream_topic="events")],
)


@workflow.defn
class StreamWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (streamer,)

    @workflow.init
    def __init__(self, prompt: str) -> None:
        self.events = AgentEventStream()

    @workflow.run
    async def run(self, prompt: str) -> str:
        async with self.events:
            result = await streamer.run(prompt)
        return result.output


# --------------------------------------------------------------------------- workloads


def _worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[CounterWorkflow, FanoutWorkflow, StreamWorkflow],
        max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
    )


async def _count(client: Client, task_queue: str, turns: int, workflow_id: str = "") -> str:
    return await client.execute_workflow(
        CounterWorkflow.run,
        f"count {turns}",
        id=workflow_id or f"pai-{uuid4()}",
        task_queue=task_queue,
    )


async def w1_turns(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async with _worker(client, task_queue):
        times = await sequential_runs_ms(
            lambda _: _count(client, task_queue, sizes.turns), sizes.w1_runs
        )
        await _count(client, task_queue, sizes.turns, workflow_id := f"pai-{uuid4()}")
    return per_turn_result(times, sizes.turns, await last_run_activities(client, workflow_id))


async def w2_concurrent(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async with _worker(client, task_queue):
        await _count(client, task_queue, sizes.turns)
        return await concurrent_result(
            lambda _: _count(client, task_queue, sizes.turns), sizes.w2_runs
        )


async def w3_fanout(client: Client, task_queue: str, sizes: Sizes) -> Result:
    prompt = f"fanout {sizes.children} {sizes.grandchildren}"

    async def one(_: int, workflow_id: str = "") -> str:
        return await client.execute_workflow(
            FanoutWorkflow.run,
            prompt,
            id=workflow_id or f"pai-tree-{uuid4()}",
            task_queue=task_queue,
        )

    async with _worker(client, task_queue):
        times = await sequential_runs_ms(one, sizes.w3_repeats)
        await one(0, workflow_id := f"pai-tree-{uuid4()}")
        root_history = scheduled_counts(
            await history_events(client.get_workflow_handle(workflow_id))
        )
    runs = 1 + sizes.children * (1 + sizes.grandchildren)
    return {**fanout_result(times, runs), "child_workflows": True, "root_history": root_history}


async def w4_long(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async def body() -> Result:
        async with _worker(client, task_queue):
            workflow_id = f"pai-long-{uuid4()}"
            run = client.execute_workflow(
                CounterWorkflow.run,
                f"count {sizes.long_turns}",
                id=workflow_id,
                task_queue=task_queue,
            )
            return await long_run_result(
                client, run, workflow_id, lambda name: "__model_request" in name, sizes.long_turns
            )

    return await with_memory(body())


async def w5_first_token(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async with _worker(client, task_queue):
        for index in range(sizes.w5_runs + 1):
            key = f"k{index}"
            prompt = f"stream {key} {sizes.w5_chunks} {sizes.w5_chunk_delay}"
            handle = await client.start_workflow(
                StreamWorkflow.run, prompt, id=f"pai-stream-{uuid4()}", task_queue=task_queue
            )
            async for event in stream_agent_events(client, handle, "events"):
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    CLOCK.on_received(key, event.part.content)
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    CLOCK.on_received(key, event.delta.content_delta)
            await handle.result()
    del CLOCK.sent["k0"]  # warm-up
    return CLOCK.result()


WORKLOADS: dict[str, Workload] = {
    "w1_turns": w1_turns,
    "w2_concurrent": w2_concurrent,
    "w3_fanout": w3_fanout,
    "w4_long": w4_long,
    "w5_first_token": w5_first_token,
}


async def _connect(address: str) -> Client:
    return await Client.connect(address, plugins=[PydanticAIPlugin()])


if __name__ == "__main__":
    main("pydantic_ai", WORKLOADS, _connect)
