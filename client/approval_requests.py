"""Approval requests as the client reads and answers them: the runs waiting for a person (by
Temporal visibility) and their open requests (from the store's events), a person's decision as
the run's update takes it, and a run's refusal of a decision as our error types.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError

from otherone import search_attributes as attrs
from otherone.client.request_checks import most_specific
from otherone.client.run_results import not_found_or, unanswered_update
from otherone.errors import (
    ApprovalConflictError,
    ApprovalNotAllowedError,
    ApprovalNotFoundError,
    InvalidRequestError,
    OtheroneError,
    RunNotActiveError,
)
from otherone.runs import DEFAULT_PARTITION, RunStatus
from otherone.workflow_names import QUERY_APPROVALS, UPDATE_DECIDE_APPROVAL

# The contract models are imported by the functions that build one (the CLI imports this
# module through `AgentClient`; `otherone show` builds none of them).
if TYPE_CHECKING:
    from otherone.contracts import ApprovalDecision, ApprovalRequest, EventRecord
    from otherone.store import Store


#: How long a decision waits for the run to take it. With no worker polling the run's queue,
#: Temporal keeps an update waiting for one; the caller is told (`UnavailableError`) instead of
#: waiting for as long as that lasts. The update stays with the run: a worker that comes takes
#: it (sending the same decision again meanwhile is answered with the one recorded).
DECISION_TIMEOUT = timedelta(seconds=30)
#: How long the hint of an unanswered decision waits for Temporal's description of the run.
DESCRIBE_TIMEOUT = timedelta(seconds=5)


async def send_decision(
    handle: WorkflowHandle[Any, Any], run_id: str, decision: ApprovalDecision, task_queue: str
) -> ApprovalRequest:
    """``decision`` sent by the run's `decide_approval` update; the request as it now stands. A
    repeated send is one decision (the run answers it with the recorded one); a refusal raises
    our error types."""
    from otherone.contracts import ApprovalRequest

    try:
        # The whole wait is bounded, not each request: the SDK asks again while the server
        # answers "admitted, not taken yet", so a per-request timeout alone never expires.
        async with asyncio.timeout(DECISION_TIMEOUT.total_seconds()):
            request: ApprovalRequest = await handle.execute_update(
                UPDATE_DECIDE_APPROVAL,
                decision,
                id=decision_update_id(decision),
                result_type=ApprovalRequest,
                rpc_timeout=DECISION_TIMEOUT,
            )
    except WorkflowUpdateFailedError as error:
        raise refused_decision(run_id, decision.call_id, error) from None
    except (WorkflowUpdateRPCTimeoutOrCancelledError, TimeoutError):
        queue = await run_task_queue(handle, task_queue)
        raise unanswered_update(
            f"run '{run_id}' did not take the decision within "
            f"{DECISION_TIMEOUT.total_seconds():g}s (is a worker polling '{queue}'?); it "
            "is taken when a worker comes, unless the request is decided otherwise first: "
            "send it again to see its outcome"
        ) from None
    except RPCError as error:
        raise not_found_or(error, run_id, finished=True) from None
    return request


async def decide_in_tree(
    send: Callable[[str], Awaitable[ApprovalRequest]],
    pending: Callable[[str], Awaitable[list[ApprovalRequest]]],
    run_id: str,
) -> ApprovalRequest:
    """The decision ``send`` sends to a run, sent to ``run_id``; when that run has no request
    for its call, to the one run of its tree that waits on it (`holder_of_call`; ``pending``:
    the open requests of a run's tree)."""
    try:
        return await send(run_id)
    except ApprovalNotFoundError as missing:
        holder = holder_of_call(await _open_in_tree(pending, run_id), run_id, missing.call_id)
        if holder is None:
            raise
    return await send(holder)


async def _open_in_tree(
    pending: Callable[[str], Awaitable[list[ApprovalRequest]]], run_id: str
) -> list[ApprovalRequest]:
    """The open requests of ``run_id``'s tree; none when they cannot be listed (an id no
    visibility query can name, the store down): the run's own answer stands then."""
    try:
        return await pending(run_id)
    except OtheroneError:
        return []


def holder_of_call(requests: Sequence[ApprovalRequest], run_id: str, call_id: str) -> str | None:
    """The run of ``run_id``'s tree whose open ``requests`` include ``call_id`` when ``run_id``
    has no such request: `otherone approve ROOT CALL` for a call a child waits on is decided in
    that child. None when no run waits on it; refused, naming the runs, when several do (call
    ids are the model provider's, unique within a turn only)."""
    holders = sorted({r.run_id for r in requests if r.call_id == call_id and r.run_id != run_id})
    if len(holders) > 1:
        raise ApprovalNotFoundError(run_id, call_id, waiting_in=tuple(holders))
    return holders[0] if holders else None


async def run_task_queue(handle: WorkflowHandle[Any, Any], fallback: str) -> str:
    """The task queue the run is on, as Temporal describes it: the hint must name the queue a
    worker has to poll, which need not be the client's (``fallback``: what is said when the run
    cannot be described, or our caller is giving up)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        return fallback
    try:
        description = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
    except RPCError:
        return fallback
    return description.task_queue or fallback


async def open_requests_of_runs(
    handle_of: Callable[[str], WorkflowHandle[Any, Any]],
    run_ids: list[str],
    query_timeout: timedelta,
) -> list[ApprovalRequest]:
    """Without a store: the open requests of ``run_ids``, each run asked by its approvals
    query (a run that ended meanwhile, or that does not answer, has none)."""
    from otherone.contracts import ApprovalRequest

    found: list[ApprovalRequest] = []
    for run_id in run_ids:
        with contextlib.suppress(RPCError):
            requests: tuple[ApprovalRequest, ...] = await handle_of(run_id).query(
                QUERY_APPROVALS, result_type=tuple[ApprovalRequest, ...], rpc_timeout=query_timeout
            )
            found.extend(request for request in requests if request.is_open)
    return found


async def runs_waiting(
    temporal: Client, root_run_id: str | None, partition_key: str | None
) -> dict[str, tuple[str, str]]:
    """The runs waiting for a person (of one tree, of one partition when given), by Temporal
    visibility: run id → (root run id, partition)."""
    # Running ones only: a run terminated from outside keeps its last `OtheroneStatus`
    # (nothing of ours ran to change it), and its requests can never be decided.
    query = (
        f'{attrs.STATUS.name} = "{RunStatus.WAITING_FOR_APPROVAL.value}"'
        ' AND ExecutionStatus = "Running"'
    )
    if root_run_id is not None:
        query += f' AND RootWorkflowId = "{root_run_id}"'
    if partition_key is not None:
        query += f' AND {attrs.PARTITION.name} = "{partition_key}"'
    waiting: dict[str, tuple[str, str]] = {}
    async for execution in temporal.list_workflows(query):
        partition = execution.typed_search_attributes.get(attrs.PARTITION)
        waiting[execution.id] = (
            execution.root_id or execution.id,
            partition or DEFAULT_PARTITION,
        )
    return waiting


def open_requests_in_store(
    store: Store, partition_key: str | None, waiting: dict[str, tuple[str, str]]
) -> list[ApprovalRequest]:
    """Requests announced (`approval_requested`) and not yet decided, of waiting runs."""
    requests: dict[tuple[str, str], ApprovalRequest] = {}
    partitions = {run_id: partition for run_id, (_, partition) in waiting.items()}
    for root in sorted({root for root, _ in waiting.values()}):
        cursor = 0
        while batch := store.read_events(root, after=cursor, partition_key=partition_key):
            for record in batch:
                cursor = record.sequence
                _apply_approval_event(requests, record, partitions)
    return [request for request in requests.values() if request.is_open]


def approval_decision(call_id: str, identity: str, fields: dict[str, Any]) -> ApprovalDecision:
    """A person's decision as the run's `decide_approval` update takes it; a bad field is an
    `InvalidRequestError` naming it."""
    from otherone.contracts import ApprovalDecision

    try:
        return ApprovalDecision.model_validate({"call_id": call_id, "identity": identity, **fields})
    except ValidationError as error:
        field, message = most_specific(error)
        field, _, message = _split_field(field, message)
        raise InvalidRequestError(message, field=field) from None


def decision_update_id(decision: ApprovalDecision) -> str:
    """A new update id for every send, readable in the run's history (the decision and the
    call). Not derived from the decision: Temporal answers an update id it has seen in the run
    with that update's old result, and a provider may repeat a call id in a later turn, whose
    new request the same decision must reach. Sending a decision again is still one decision:
    the run answers a repeat with the decision it recorded (`ApprovalGate.check`)."""
    return f"{decision.decision}-{decision.call_id[:128]}-{uuid.uuid4().hex[:16]}"


def refused_decision(run_id: str, call_id: str, error: WorkflowUpdateFailedError) -> Exception:
    """The run's refusal as our error type (the update's `ApplicationError.type`)."""
    cause = error.cause
    kind = getattr(cause, "type", None)
    message = getattr(cause, "message", None) or str(cause or error)
    if kind == "approval_not_found":
        return ApprovalNotFoundError(run_id, call_id)
    if kind == "approval_not_allowed":
        return ApprovalNotAllowedError(message)
    if kind == "approval_conflict":
        return ApprovalConflictError(message)
    if kind == "run_ended":
        return RunNotActiveError(run_id)
    if kind == "invalid_arguments":
        field, _, text = message.partition(": ")
        if field == "arguments" and text:
            return InvalidRequestError(text, field="arguments")
        return InvalidRequestError(message, field="decision")
    return InvalidRequestError(message, field="decision")


def _split_field(field: str, message: str) -> tuple[str, str, str]:
    """``reason: a denial needs a reason`` (a model-level check) names its own field."""
    head, separator, rest = message.partition(": ")
    if not field and separator and all(part.isidentifier() for part in head.split(".")):
        return head, separator, rest
    return field or "decision", "", message


def _apply_approval_event(
    requests: dict[tuple[str, str], ApprovalRequest],
    record: EventRecord,
    waiting: dict[str, str],
) -> None:
    from otherone.contracts import ApprovalOutcome, ApprovalRequest

    body = record.event
    kind, call_id = body.get("type"), body.get("call_id")
    if record.run_id not in waiting or not isinstance(call_id, str):
        return
    key = (record.run_id, call_id)
    if kind == "approval_requested":
        timeout = body.get("timeout_seconds")
        requests[key] = ApprovalRequest(
            run_id=record.run_id,
            root_run_id=record.root_run_id,
            agent_id=record.agent_id,
            partition_key=waiting[record.run_id],
            call_id=call_id,
            tool_name=str(body.get("tool_name") or ""),
            arguments=str(body.get("arguments") or ""),
            kind="question" if body.get("kind") == "question" else "approval",
            question=body.get("question") if isinstance(body.get("question"), str) else None,
            approvers=tuple(str(name) for name in _list(body.get("approvers"))),
            requested_at=record.timestamp,
            timeout_at=record.timestamp + timedelta(seconds=float(timeout))
            if isinstance(timeout, int | float)
            else None,
            on_timeout="fail" if body.get("on_timeout") == "fail" else "deny",
        )
    elif kind == "approval_decided" and key in requests:
        requests[key] = requests[key].model_copy(
            update={
                "decision": ApprovalOutcome(
                    decision=_decided(body.get("decision")),
                    decided_by=str(body.get("decided_by") or ""),
                    decided_at=record.timestamp,
                )
            }
        )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _decided(value: Any) -> Any:
    return value if value in ("approved", "denied", "answered", "timed_out") else "denied"
