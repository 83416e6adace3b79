"""The trace view's endpoints: a tree's waterfall (`otherone.client.trace_view`) from its stored
events, and the detail of one of its model or tool calls from the store. Tenant-scoped as every
run endpoint: another partition's run is not found (404)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from otherone.api.dependencies import Agents, RunId
from otherone.client.agent_client import AgentClient
from otherone.client.store_answers import answered
from otherone.client.trace_details import (
    ModelCallDetail,
    ToolCallDetail,
    model_call_detail,
    tool_call_detail,
    tree_trace,
)
from otherone.client.trace_view import Trace
from otherone.errors import InvalidRequestError, RunNotFoundError
from otherone.runs import RunRecord
from otherone.store import Store

router = APIRouter()


@router.get("/runs/{run_id:path}/trace", response_model=Trace, tags=["runs"])
async def run_trace(run_id: RunId, agents: Agents) -> Trace:
    """The waterfall of the run's whole tree: a bar per run, model call attempt, tool call
    attempt, agent call, approval wait and sleep, with times, tokens, cost and status (open
    bars have no end), built from the stored events (no tracing backend needed)."""
    store = _store(agents)
    await agents.check_visible(run_id)
    record = await answered(store.find_run_record, run_id, agents.partition_key)
    partition: str | None = agents.partition_key
    if record is not None:
        root, partition = record.root_run_id, record.partition_key
    else:  # started, not yet prepared by a worker: Temporal knows its root
        description = await agents.describe_run(run_id)
        root = description.root_id or run_id
    return await answered(tree_trace, store, root, partition)


@router.get("/runs/{run_id:path}/trace/model/{turn}", response_model=ModelCallDetail, tags=["runs"])
async def model_call(
    run_id: RunId,
    turn: Annotated[int, Path(ge=1, le=1_000_000, description="The model call's turn.")],
    agents: Agents,
    attempt: Annotated[
        int | None, Query(ge=1, le=10_000, description="The attempt (a bar's `attempt`).")
    ] = None,
) -> ModelCallDetail:
    """A model call's request (the conversation before it) and response, from the store."""
    store, record = await _stored_run(agents, run_id)
    return await answered(model_call_detail, store, record, turn, attempt)


@router.get(
    "/runs/{run_id:path}/trace/tool/{tool_call_id}", response_model=ToolCallDetail, tags=["runs"]
)
async def tool_call(
    run_id: RunId,
    tool_call_id: Annotated[str, Path(min_length=1, max_length=256)],
    agents: Agents,
) -> ToolCallDetail:
    """A tool call's arguments and result, from the store."""
    store, record = await _stored_run(agents, run_id)
    return await answered(tool_call_detail, store, record, tool_call_id)


async def _stored_run(agents: AgentClient, run_id: str) -> tuple[Store, RunRecord]:
    store = _store(agents)
    await agents.check_visible(run_id)
    record = await answered(store.find_run_record, run_id, agents.partition_key)
    if record is None:
        raise RunNotFoundError(run_id)
    return store, record


def _store(agents: AgentClient) -> Store:
    if agents.store is None:
        raise InvalidRequestError("the trace needs a store", field="store")
    return agents.store
