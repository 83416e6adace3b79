"""The approvals endpoints: open requests (a partition's, a run tree's) and the decisions on
them, made as the caller's token identity (`otherone.api.dependencies`)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from otherone.api.dependencies import Agents, RunId
from otherone.api.problems import ApiError
from otherone.contracts import ApprovalRequest

router = APIRouter()


@router.get("/approvals", response_model=list[ApprovalRequest], tags=["approvals"])
async def list_approvals(agents: Agents) -> list[ApprovalRequest]:
    """Every open approval request and question of the caller's partition, oldest first."""
    return await agents.pending_approvals()


@router.get(
    "/runs/{run_id:path}/approvals", response_model=list[ApprovalRequest], tags=["approvals"]
)
async def run_approvals(run_id: RunId, agents: Agents) -> list[ApprovalRequest]:
    """The open approval requests and questions of the run's tree (decide each with its own
    run id: a child's request belongs to the child)."""
    description = await agents.describe_run(run_id)
    return await agents.pending_approvals(description.root_id or run_id)


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is a mistake, not ignored

    decision: Literal["approve", "deny", "answer"]
    arguments: dict[str, JsonValue] | None = Field(
        None, description="approve: arguments instead of the model's (checked by the tool schema)"
    )
    reason: str | None = Field(None, description="deny: why (the model reads it)")
    text: str | None = Field(None, description="answer: the answer to a human.ask question")


@router.post(
    "/runs/{run_id:path}/approvals/{call_id}",
    response_model=ApprovalRequest,
    responses={
        403: {
            "description": "The token's identity is not one of the request's approvers "
            "(approval_not_allowed)"
        },
        409: {"description": "Decided otherwise already (approval_conflict), or the run ended"},
    },
    tags=["approvals"],
)
async def decide_approval(
    run_id: RunId,
    call_id: Annotated[str, PathParam(min_length=1, max_length=256)],
    body: Decision,
    agents: Agents,
) -> ApprovalRequest:
    """Approve (optionally with edited arguments), deny (with a reason) or answer a waiting
    tool call, as the token's identity (a request naming `approvers` must name it); the same
    decision again is accepted."""
    if body.decision == "approve":
        return await agents.approve(run_id, call_id, body.arguments)
    if body.decision == "deny":
        return await agents.deny(run_id, call_id, _required(body.reason, "reason"))
    return await agents.answer(run_id, call_id, _required(body.text, "text"))


def _required(value: str | None, field: str) -> str:
    if value is None or not value.strip():
        raise ApiError(422, "invalid_request", f"{field}: must be a non-empty string", field=field)
    return value
