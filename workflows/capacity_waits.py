"""A run's calls waiting for fleet capacity (`otherone.store.capacity`), in its workflow.

A model or tool call refused a permit comes back with a `CapacityWait`: the run waits here,
on a timer (no activity, no worker slot), until the wait's end or until a release of the
capacity wakes it (`SIGNAL_CAPACITY_FREED`), then makes the call again. Several calls of a
turn may wait at once: each wakes on any release signalled after its wait began.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import CapacityWait


class CapacityWaits:
    def __init__(self, details: Callable[[], str]) -> None:
        #: Releases signalled to this run so far.
        self.releases = 0
        self._waiting = 0
        #: The Web UI's "current details" once nothing waits any more.
        self._details = details

    def freed(self) -> None:
        """A release of capacity this run waits for was signalled."""
        self.releases += 1

    async def wait(self, wait: CapacityWait) -> None:
        """Until a release is signalled, or ``wait.retry_in_ms`` has passed; meanwhile the
        Web UI's "current details" say what the run waits for."""
        seen = self.releases
        self._waiting += 1
        workflow.set_current_details(
            f"waiting for capacity: {wait.scope} ({wait.reason}), next try within "
            f"{wait.retry_in_ms / 1000:.1f}s"
        )
        try:
            with contextlib.suppress(TimeoutError):  # the wait's end: ask again
                await workflow.wait_condition(
                    lambda: self.releases > seen, timeout=timedelta(milliseconds=wait.retry_in_ms)
                )
        finally:
            self._waiting -= 1
        if not self._waiting:
            workflow.set_current_details(self._details())
