"""Starting an agent call's child workflow: how it is described, and a start that a
cancellation cannot leave half-done.

Workflow code (not passed through): the strict sandbox re-imports it with `agent_calls`.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ChildWorkflowError, is_cancelled_exception
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from otherone import search_attributes as attrs
    from otherone.contracts import WORKFLOW_NAME, CallPlan, RunInput
    from otherone.errors import FailureCode
    from otherone.runs import (
        AgentCallRequest,
        AgentCallResult,
        AgentFailure,
        AgentRunResult,
        RunOutcome,
        RunStatus,
    )


async def start_child(
    child: RunInput,
    call_id: str,
    request: AgentCallRequest,
    call_plan: CallPlan,
    parent_close_policy: ParentClosePolicy,
) -> ChildWorkflowHandle[object, AgentRunResult]:
    """Start a called (REQUEST_CANCEL) or spawned (ABANDON) child, described for the Web UI."""
    return await workflow.start_child_workflow(
        WORKFLOW_NAME,
        child,
        id=child.run_id,
        result_type=AgentRunResult,
        parent_close_policy=parent_close_policy,
        static_summary=child_summary(child, request),
        static_details=call_plan.details,
        search_attributes=child_search_attributes(child, call_id),
    )


async def started_child(
    child: RunInput, call_id: str, request: AgentCallRequest, call_plan: CallPlan
) -> ChildWorkflowHandle[object, AgentRunResult]:
    """A called child, started even when the run is cancelled while the start is under way.

    Once its start command is with the server, the child may start whatever the caller does:
    cancelling the start then left a child the server started all the same running after its
    caller had ended (its model called, its end announced a second time). So the start is
    waited for and the started child cancelled, then waited for as any running child (its
    cancelled result swallows the run's cancellation: `cancellation_swallowed`)."""
    start = asyncio.ensure_future(
        start_child(child, call_id, request, call_plan, ParentClosePolicy.REQUEST_CANCEL)
    )
    try:
        return await asyncio.shield(start)
    except asyncio.CancelledError:
        pass
    handle = await start
    handle.cancel()
    return handle


def abnormal_child(
    call_id: str, target: str, run_id: str, error: ChildWorkflowError
) -> AgentCallResult:
    """A child that ended without a result (terminated from outside, or a bug)."""
    if is_cancelled_exception(error):
        return AgentCallResult(
            call_id=call_id, target=target, run_id=run_id, outcome=RunOutcome.CANCELLED
        )
    failure = AgentFailure(
        code=FailureCode.INTERNAL_ERROR,
        message=f"child run ended abnormally: {error.cause or error}",
    )
    return AgentCallResult(
        call_id=call_id, target=target, run_id=run_id, outcome=RunOutcome.FAILED, failure=failure
    )


def child_search_attributes(child: RunInput, call_id: str) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            SearchAttributePair(attrs.AGENT_ID, child.request.entry_agent),
            SearchAttributePair(attrs.DEPTH, child.depth),
            SearchAttributePair(attrs.PARTITION, child.request.runtime_context.partition_key),
            SearchAttributePair(attrs.CALL_ID, call_id),
            SearchAttributePair(attrs.STATUS, RunStatus.RUNNING.value),
        ]
    )


def child_summary(child: RunInput, request: AgentCallRequest) -> str:
    """How the child reads in the Web UI: ``researcher ← coordinator: find sources``."""
    return f"{child.request.entry_agent} ← {child.caller_agent_id}: {request.task.strip()[:80]}"
