"""Peer: the Temporal OpenAI Agents integration (`OpenAIAgentsPlugin`) with a fake `Model`.

Runs in `bench/.venv-peers`. The model is a stateless function of the agent's instructions and
the run's input items, so concurrent runs share it safely:

- w1/w2/w4: one agent; each turn calls `tick` (a Temporal activity, `activity_as_tool`), then
  answers.
- w3: the integration has no agent-as-child-workflow; its multi-agent idiom is agents as tools
  (`Agent.as_tool`), which runs the 24 nested agent runs inside the root's workflow. Reported,
  marked as such: same model and tool calls, one workflow instead of 25.
- w5: `Runner.run_streamed` with `ModelActivityParameters.streaming_topic`: the model activity
  publishes the raw stream events to a Workflow Stream the client subscribes to (the
  integration's documented defaults: 100 ms batches and polls).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import uuid4

from agents import (
    Agent,
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Runner,
    Tool,
    TResponseInputItem,
    Usage,
)
from agents.items import TResponseStreamEvent
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
)
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamClient
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.openai_agents.workflow import activity_as_tool
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
TIMEOUT = timedelta(seconds=60)
TOPIC = "events"


# --------------------------------------------------------------------------- the fake model


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg",
        content=[ResponseOutputText(text=text, annotations=[], type="output_text", logprobs=[])],
        role="assistant",
        status="completed",
        type="message",
    )


def _call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        arguments=json.dumps(arguments),
        call_id=call_id,
        name=name,
        type="function_call",
        id=call_id,
    )


def _items(input: str | list[TResponseInputItem]) -> list[dict[str, Any]]:
    return [] if isinstance(input, str) else [dict(item) for item in input]  # type: ignore[arg-type]


def _outputs(input: str | list[TResponseInputItem]) -> int:
    return sum(item.get("type") == "function_call_output" for item in _items(input))


def _user_text(input: str | list[TResponseInputItem]) -> str:
    if isinstance(input, str):
        return input
    for item in _items(input):
        if item.get("role") == "user" and isinstance(item.get("content"), str):
            return str(item["content"])
    return ""


class BenchModel(Model):
    """Instructions ``count N``: N `tick` turns, then an answer. ``fan N``: N parallel calls of
    the agent's one tool, then an answer. ``stream``: numbered chunks (see `stream_response`)."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        **kwargs: Any,
    ) -> ModelResponse:
        kind, count = (system_instructions or "answer 0").split()
        done = _outputs(input)
        output: list[Any]
        if kind == "count" and done < int(count):
            output = [_message(f"step {done}"), _call("tick", {"n": done}, f"t{done}")]
        elif kind == "fan" and not done and int(count):
            output = [_call(tools[0].name, {"input": "work"}, f"c{i}") for i in range(int(count))]
        else:
            output = [_message("done")]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """User input ``KEY CHUNKS DELAY``: numbered chunks, stamped as they leave."""
        key, chunks, delay = _user_text(input).split()
        text = ""
        for index in range(int(chunks)):
            CLOCK.on_sent(key, index)
            chunk = ChunkClock.chunk(index)
            text += chunk
            yield ResponseTextDeltaEvent(
                content_index=0,
                delta=chunk,
                item_id="msg",
                output_index=0,
                sequence_number=index,
                type="response.output_text.delta",
                logprobs=[],
            )
            await asyncio.sleep(float(delay))
        response = Response(
            id="resp",
            created_at=0,
            model="fake",
            object="response",
            output=[_message(text)],
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
            status="completed",
        )
        yield ResponseCompletedEvent(
            response=response, sequence_number=int(chunks), type="response.completed"
        )


class BenchModelProvider(ModelProvider):
    def get_model(self, model_name: str | None) -> Model:
        return BenchModel()


# --------------------------------------------------------------------------- workflows


@activity.defn
async def tick(n: int) -> dict[str, int]:
    """Count one step."""
    return {"n": n}


@workflow.defn
class CounterWorkflow:
    @workflow.run
    async def run(self, turns: int) -> str:
        agent = Agent[None](
            name="counter",
            instructions=f"count {turns}",
            tools=[activity_as_tool(tick, start_to_close_timeout=TIMEOUT)],
        )
        result = await Runner.run(agent, input="go", max_turns=turns + 5)
        return str(result.final_output)


@workflow.defn
class FanoutWorkflow:
    @workflow.run
    async def run(self, fanout: list[int]) -> str:
        agent = Agent[None](name="leaf", instructions="fan 0")
        for level, count in enumerate(reversed(fanout)):
            tool = agent.as_tool(tool_name=f"call_{agent.name}", tool_description="Delegate work.")
            agent = Agent[None](name=f"level{level}", instructions=f"fan {count}", tools=[tool])
        result = await Runner.run(agent, input="go")
        return str(result.final_output)


@workflow.defn
class StreamWorkflow:
    @workflow.init
    def __init__(self, prompt: str) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent[None](name="streamer", instructions="stream 0")
        result = Runner.run_streamed(agent, input=prompt)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)


# --------------------------------------------------------------------------- workloads


def _worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[CounterWorkflow, FanoutWorkflow, StreamWorkflow],
        activities=[tick],
        max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
    )


async def _count(client: Client, task_queue: str, turns: int, workflow_id: str = "") -> str:
    return await client.execute_workflow(
        CounterWorkflow.run, turns, id=workflow_id or f"oai-{uuid4()}", task_queue=task_queue
    )


async def w1_turns(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async with _worker(client, task_queue):
        times = await sequential_runs_ms(
            lambda _: _count(client, task_queue, sizes.turns), sizes.w1_runs
        )
        await _count(client, task_queue, sizes.turns, workflow_id := f"oai-{uuid4()}")
    return per_turn_result(times, sizes.turns, await last_run_activities(client, workflow_id))


async def w2_concurrent(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async with _worker(client, task_queue):
        await _count(client, task_queue, sizes.turns)
        return await concurrent_result(
            lambda _: _count(client, task_queue, sizes.turns), sizes.w2_runs
        )


async def w3_fanout(client: Client, task_queue: str, sizes: Sizes) -> Result:
    fanout = [sizes.children, sizes.grandchildren]

    async def one(_: int, workflow_id: str = "") -> str:
        return await client.execute_workflow(
            FanoutWorkflow.run,
            fanout,
            id=workflow_id or f"oai-tree-{uuid4()}",
            task_queue=task_queue,
        )

    async with _worker(client, task_queue):
        times = await sequential_runs_ms(one, sizes.w3_repeats)
        await one(0, workflow_id := f"oai-tree-{uuid4()}")
        root_history = scheduled_counts(
            await history_events(client.get_workflow_handle(workflow_id))
        )
    runs = 1 + sizes.children * (1 + sizes.grandchildren)
    return {**fanout_result(times, runs), "child_workflows": False, "root_history": root_history}


async def w4_long(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async def body() -> Result:
        async with _worker(client, task_queue):
            workflow_id = f"oai-long-{uuid4()}"
            run = _count(client, task_queue, sizes.long_turns, workflow_id)
            return await long_run_result(
                client,
                run,
                workflow_id,
                lambda name: "invoke_model_activity" in name,
                sizes.long_turns,
            )

    return await with_memory(body())


async def w5_first_token(client: Client, task_queue: str, sizes: Sizes) -> Result:
    async with _worker(client, task_queue):
        for index in range(sizes.w5_runs + 1):
            key = f"k{index}"
            workflow_id = f"oai-stream-{uuid4()}"
            prompt = f"{key} {sizes.w5_chunks} {sizes.w5_chunk_delay}"
            handle = await client.start_workflow(
                StreamWorkflow.run, prompt, id=workflow_id, task_queue=task_queue
            )
            stream = WorkflowStreamClient.create(client, workflow_id)
            async for item in stream.subscribe(
                [TOPIC], from_offset=0, result_type=TResponseStreamEvent
            ):  # type: ignore[call-overload]
                if item.data.type == "response.output_text.delta":
                    CLOCK.on_received(key, item.data.delta)
                elif item.data.type == "response.completed":
                    break
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
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=TIMEOUT, streaming_topic=TOPIC),
        model_provider=BenchModelProvider(),
    )
    return await Client.connect(address, plugins=[plugin])


if __name__ == "__main__":
    main("openai_agents", WORKLOADS, _connect)
