"""How a run calls its activities: timeouts, retries, and what a cancellation does to them.

Shared by the run's loop (`turns`), its tool calls (`tool_steps`) and its store steps
(`store_steps`). A cancelled activity ends the run's loop as a cancellation, not a failure.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception
from temporalio.workflow import ActivityCancellationType

#: Store activities are quick; they retry on their own schedule (database restarts), within
#: `STORE_TOTAL_TIMEOUT` in all (each attempt rides out a short outage in place).
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
MODEL_CALL_TIMEOUT = timedelta(minutes=10)
#: Activities heartbeat every second and workers send them every second
#: (`otherone.worker.app.HEARTBEAT_THROTTLE`), so cancellation reaches a streaming model call in
#: ~1-2 s.
#: The timeout itself only detects a dead or stalled worker: long enough that a busy process
#: (hundreds of runs in one event loop) does not lose attempts of model calls, which cost tokens.
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
#: How model and tool activities are cancelled: waited for, so that a cancelled activity
#: stores its own end event (`model_completed`, `tool_completed`) before the run's end is
#: announced.
PAIRED_CANCELLATION = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED


def cancellation_swallowed() -> bool:
    """Was this run cancelled while it awaited something that returned normally anyway?

    Awaiting a child turns the run's cancellation into a cancellation request to the child;
    when the child then ends with its structured (`cancelled`) result, the await returns that
    result and the CancelledError is gone. The task's cancel count remembers the request.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def reraise_cancellation(error: ActivityError) -> None:
    """An activity cancelled because the run is cancelled (or timed out) ends the loop as such.

    Also when the activity, waited for after the cancellation request, ended otherwise (e.g.
    its worker died and it timed out): the run was cancelled all the same.
    """
    if is_cancelled_exception(error) or cancellation_swallowed():
        raise asyncio.CancelledError() from error
