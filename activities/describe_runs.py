"""`describe_runs`: which of some runs Temporal reports as ended, with their results.

A spawned child reports its end to its caller by signal. A child that is *terminated* from
outside the runtime (`temporal workflow terminate`, the Web UI) runs no more code and sends
none; in the history that started it the caller's child handle reports it, but after the caller
continued as new it holds no handle. And a cancel request cannot tell: Temporal reports a cancel
request to a closed workflow as delivered. So the caller asks here, through the worker's own
Temporal client (`temporalio.activity.client()`).
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from otherone.contracts import DescribeRunsInput, EndedRun, EndedRuns
from otherone.runs import AgentRunResult

#: Statuses of a run that goes on (a spawned child may continue as new itself).
_GOING_ON = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)


async def describe_runs(input: DescribeRunsInput) -> EndedRuns:
    client = activity.client()
    ended = [end for run_id in input.run_ids if (end := await _ended(client, run_id))]
    return EndedRuns(ended=tuple(ended))


async def _ended(client: Client, run_id: str) -> EndedRun | None:
    """The latest execution of ``run_id`` if it has ended, else None."""
    handle = client.get_workflow_handle(run_id, result_type=AgentRunResult)
    try:
        description = await handle.describe()
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:  # e.g. past the namespace's retention
            return EndedRun(run_id=run_id, status="not_found")
        raise
    status = description.status
    if status is None or status in _GOING_ON:
        return None
    if status is not WorkflowExecutionStatus.COMPLETED:
        return EndedRun(run_id=run_id, status=status.name.lower())
    try:
        result = await handle.result(follow_runs=False)
    except Exception as error:  # completed, yet its result does not decode: say so
        activity.logger.warning("result of run %s unreadable: %s", run_id, error)
        return EndedRun(run_id=run_id, status="completed")
    return EndedRun(run_id=run_id, status="completed", result=result)
