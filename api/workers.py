"""`GET /v1/workers`: whether workers poll the API's task queue (a run waits while none
does), from Temporal's task-queue description."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from otherone.api.dependencies import Caller, api_runtime

router = APIRouter()


class Poller(BaseModel):
    #: The worker's identity (``pid@host`` by default); with tokens, a tenant sees only a
    #: number: host names and processes are the operator's, not every tenant's.
    identity: str
    kind: Literal["workflow", "activity"]
    last_access_time: datetime | None = None


class Workers(BaseModel):
    task_queue: str
    #: Pollers seen by Temporal within `POLLER_LIVE_SECONDS`.
    live_workflow_pollers: int = Field(description="Workers taking this queue's workflow tasks.")
    live_activity_pollers: int = Field(description="Workers taking this queue's activities.")
    pollers: list[Poller] = Field(description="What Temporal lists (stopped workers linger).")


#: A poller Temporal saw this recently is a live worker (an idle worker polls about once a
#: minute: its long polls last up to 60 s).
POLLER_LIVE_SECONDS = 90


@router.get("/workers", response_model=Workers, tags=["server"])
async def workers(request: Request, caller: Caller) -> Workers:
    """Whether workers poll the API's task queue (a run waits while none does): the page asks
    when a run has shown no progress for a while."""
    context = api_runtime(request).context
    found: list[Poller] = []
    for kind, queue_type in (
        ("workflow", TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        ("activity", TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    ):
        described = await context.temporal.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=context.namespace,
                task_queue=TaskQueue(name=context.task_queue),
                task_queue_type=queue_type,
            ),
            timeout=timedelta(seconds=10),
        )
        found += [
            Poller(
                identity=f"worker {len(found) + index + 1}" if context.tokens else poller.identity,
                kind=kind,
                last_access_time=poller.last_access_time.ToDatetime(tzinfo=UTC)
                if poller.HasField("last_access_time")
                else None,
            )
            for index, poller in enumerate(described.pollers)
        ]
    now = datetime.now(UTC)

    def live(kind: str) -> int:
        return sum(
            1
            for poller in found
            if poller.kind == kind
            and poller.last_access_time is not None
            and (now - poller.last_access_time).total_seconds() <= POLLER_LIVE_SECONDS
        )

    return Workers(
        task_queue=context.task_queue,
        live_workflow_pollers=live("workflow"),
        live_activity_pollers=live("activity"),
        pollers=found,
    )
