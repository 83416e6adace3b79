"""The schedules endpoints (`otherone.client.schedules`): Temporal Schedules that start runs of
the caller's partition (a token's, else ``?partition=`` or the default one); another
partition's schedule is "not found"."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from otherone.api.dependencies import Partition, api_runtime
from otherone.api.problems import ApiError
from otherone.client.schedules import (
    SCHEDULE_NAME_PATTERN,
    ScheduleRequest,
    Schedules,
    ScheduleView,
)
from otherone.partitions import DEFAULT_PARTITION, PARTITION_PATTERN
from otherone.runs import RuntimeContext

router = APIRouter()

Name = Annotated[str, PathParam(pattern=SCHEDULE_NAME_PATTERN, description="The schedule's name.")]
PartitionQuery = Annotated[
    str | None,
    Query(
        alias="partition",
        pattern=PARTITION_PATTERN,
        description=f"Without a token: the partition (default `{DEFAULT_PARTITION}`).",
    ),
]


def _schedules(request: Request, partition: str | None, asked: str | None) -> Schedules:
    if partition is not None and asked not in (None, partition):
        raise ApiError(
            422,
            "invalid_request",
            f"partition: this token is bound to partition '{partition}'",
            field="partition",
        )
    context = api_runtime(request).context
    return Schedules(
        context.temporal,
        task_queue=context.task_queue,
        partition_key=partition or asked or DEFAULT_PARTITION,
        config=context.config,
    )


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str | None = Field(None, max_length=1000, description="Why (shown with it).")


@router.get("/schedules", response_model=list[ScheduleView], tags=["schedules"])
async def list_schedules(
    request: Request, partition: Partition, asked: PartitionQuery = None
) -> list[ScheduleView]:
    """The partition's schedules, by name (a schedule created a moment ago may take a second
    to be listed: Temporal's list is eventually consistent; `GET /schedules/{name}` is not)."""
    return await _schedules(request, partition, asked).list()


@router.post(
    "/schedules",
    response_model=ScheduleView,
    status_code=201,
    responses={409: {"description": "A schedule of that name exists (schedule_exists)"}},
    tags=["schedules"],
)
async def create_schedule(
    request: Request, body: ScheduleRequest, partition: Partition, asked: PartitionQuery = None
) -> ScheduleView:
    """Create a schedule: each firing (at ``cron`` times or ``every`` interval) starts a root
    run of ``request`` (its partition: the caller's), id ``<name>.<partition>-<time>``."""
    schedules = _schedules(request, partition, asked)
    if "runtime_context" not in body.request.model_fields_set:
        context = RuntimeContext(partition_key=schedules.partition_key)
        body = body.model_copy(
            update={"request": body.request.model_copy(update={"runtime_context": context})}
        )
    return await schedules.create(body)


@router.get("/schedules/{name}", response_model=ScheduleView, tags=["schedules"])
async def get_schedule(
    request: Request, name: Name, partition: Partition, asked: PartitionQuery = None
) -> ScheduleView:
    """A schedule: its timing, state, next firings and recent runs."""
    return await _schedules(request, partition, asked).get(name)


@router.post("/schedules/{name}/pause", response_model=ScheduleView, tags=["schedules"])
async def pause_schedule(
    request: Request,
    name: Name,
    partition: Partition,
    body: Note | None = None,
    asked: PartitionQuery = None,
) -> ScheduleView:
    """Stop it firing until unpaused."""
    return await _schedules(request, partition, asked).pause(name, body.note if body else None)


@router.post("/schedules/{name}/unpause", response_model=ScheduleView, tags=["schedules"])
async def unpause_schedule(
    request: Request,
    name: Name,
    partition: Partition,
    body: Note | None = None,
    asked: PartitionQuery = None,
) -> ScheduleView:
    """Let it fire again."""
    return await _schedules(request, partition, asked).unpause(name, body.note if body else None)


@router.post("/schedules/{name}/trigger", response_model=ScheduleView, tags=["schedules"])
async def trigger_schedule(
    request: Request, name: Name, partition: Partition, asked: PartitionQuery = None
) -> ScheduleView:
    """Fire it now (its overlap policy holds; paused or not)."""
    return await _schedules(request, partition, asked).trigger(name)


@router.delete("/schedules/{name}", status_code=204, tags=["schedules"])
async def delete_schedule(
    request: Request, name: Name, partition: Partition, asked: PartitionQuery = None
) -> Response:
    """Delete it; the runs it started go on."""
    await _schedules(request, partition, asked).delete(name)
    return Response(status_code=204)
