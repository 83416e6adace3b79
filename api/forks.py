"""The fork endpoints: a run's turns, and a new root run from one of them
(`otherone.client.forks`), in the caller's partition (another partition's run is not found,
as for every run endpoint)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from otherone.api.dependencies import Agents, RunId
from otherone.client.forks import run_turns, stored_root
from otherone.errors import InvalidRequestError

router = APIRouter()


class TurnSummary(BaseModel):
    number: int = Field(description="1 for the first turn (what `at_turn` names).")
    message: str = Field(description="The turn's user message.")
    entries: int = Field(description="Transcript entries of the turn, its message included.")
    tool_calls: int = Field(description="Tool calls the model made in the turn.")


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is a mistake, not ignored

    at_turn: Annotated[int, Field(description="The turn to run again (1 = the first).")]
    input: str | None = Field(
        None, description="The user message of that turn instead of its own (null: its own)."
    )
    definition: Literal["original", "current"] = Field(
        "original",
        description="The agent definition: the one the run ran (its configuration snapshot) "
        "or the workers' current one.",
    )


class ForkedRun(BaseModel):
    run_id: str
    session_id: str = Field(description="The fork's session (new): continue the fork in it.")
    forked_from: str
    at_turn: int
    events_url: str
    result_url: str


@router.get("/runs/{run_id:path}/turns", response_model=list[TurnSummary], tags=["runs"])
async def list_turns(run_id: RunId, agents: Agents) -> list[TurnSummary]:
    """The turns of a root run's transcript (what a fork's `at_turn` counts)."""
    if agents.store is None:
        raise InvalidRequestError("listing turns needs a store", field="store")
    record = await stored_root(agents, run_id)
    return [
        TurnSummary(
            number=turn.number,
            message=turn.message,
            entries=len(turn.entries),
            tool_calls=turn.tool_calls,
        )
        for turn in await run_turns(agents.store, record)
    ]


@router.post(
    "/runs/{run_id:path}/fork",
    status_code=201,
    response_model=ForkedRun,
    responses={422: {"description": "No such turn, an empty input, or a child run"}},
    tags=["runs"],
)
async def fork_run(run_id: RunId, body: ForkRequest, agents: Agents, request: Request) -> ForkedRun:
    """Fork a root run at a turn: a new root run in a new session that shares the run's turns
    before it (by reference) and runs that turn again. The original is not changed."""
    fork = await agents.fork(
        run_id, at_turn=body.at_turn, input=body.input, definition=body.definition
    )
    return ForkedRun(
        run_id=fork.run_id,
        session_id=fork.session_id,
        forked_from=run_id,
        at_turn=body.at_turn,
        events_url=str(request.url_for("run_events", run_id=fork.run_id)),
        result_url=str(request.url_for("run_result", run_id=fork.run_id)),
    )
