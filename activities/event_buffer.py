"""`EventBuffer`: an activity's events, written in few transactions instead of one per event.

A model or tool activity announces itself (`model_started`, `tool_started`), streams deltas and
announces its end. Written one by one, that is a transaction and a thread hop per event, on the
activity's critical path. Buffered, an activity's events are written:

- at once when asked (`add_now`, or `write_soon`: as soon as the event loop is free, e.g. the
  first delta of an answer, for first-token latency; `DeltaBuffer` spaces the later ones);
- at the latest `LATE_WRITE_SECONDS` after they were added (a long model call or tool shows its
  `*_started` event within that bound while it runs);
- and always before the activity returns or fails: `flush` (or `take`, when the activity writes
  them in the same transaction as its entries). A worker killed mid-activity loses at most what
  a killed worker loses anyway: the events of an attempt that had not completed (the retried
  attempt announces itself again, with its attempt number).

Writing stays observation only, as `ActivityContext.emit`: a failed write never fails the run,
and the run's next stored events say how many were lost (`events_lost`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from otherone.activities.shared import ActivityContext
from otherone.contracts import RunRef

T = TypeVar("T")

#: The longest an added event waits before it is written while the activity goes on.
LATE_WRITE_SECONDS = 0.05


class EventBuffer:
    """The events one activity attempt emits for its run (``ref``), written in batches."""

    def __init__(self, context: ActivityContext, ref: RunRef) -> None:
        self.context, self.ref = context, ref
        self._bodies: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()  # writes keep the order the events were added in
        self._late: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Whether a write of this buffer's events began (then later ones must follow it).
        self._began_writing = False
        #: Whether `write_with`'s write committed although the attempt was cancelled meanwhile
        #: (its events, the attempt's end among them, are stored: the attempt adds no other end).
        self.written_when_cancelled = False

    def add(self, *bodies: dict[str, Any]) -> None:
        """Queue ``bodies`` (the run's visibility applies); written within the bound."""
        visible = self.context.visible(self.ref, bodies)
        if not visible:
            return
        self._bodies.extend(visible)
        if self._late is None:
            loop = asyncio.get_running_loop()
            self._late = loop.call_later(LATE_WRITE_SECONDS, self._write_late)

    async def add_now(self, *bodies: dict[str, Any]) -> None:
        """Queue ``bodies`` and write everything queued now (someone is waiting for them)."""
        self.add(*bodies)
        await self.flush()

    def write_soon(self) -> None:
        """Write what is queued as soon as the event loop is free (not waiting for it here)."""
        self._cancel_late()
        task = asyncio.get_running_loop().create_task(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _write_late(self) -> None:
        self._late = None
        self.write_soon()

    async def write_with(
        self, together: Callable[[list[dict[str, Any]]], T], *, brief: bool = True
    ) -> T:
        """Write what is queued in the same transaction as the caller's own write
        (``together(bodies)``: e.g. the turn's entry), through `ActivityContext.brief_io`, or
        `ActivityContext.io` when not ``brief`` (a large write: in a thread). Outages are ridden
        out, a refused write fails the attempt as any store write does. A cancellation while
        the write runs in a thread waits for it to end (`ActivityContext.io_to_its_end`) and
        says whether it committed (`written_when_cancelled`)."""
        await self.settle()
        bodies = self.take()
        written = False

        def write(batch: list[dict[str, Any]]) -> T:
            nonlocal written
            done = together(batch)
            written = True  # returned: committed
            return done

        try:
            return await self.context.io_to_its_end(write, bodies, brief=brief)
        except BaseException as error:
            if written:  # cancelled while the write went on in its thread, which committed
                self.written_when_cancelled = True
            else:
                self.lost(bodies, error)
            raise

    def drop_unwritten(self, *bodies: dict[str, Any]) -> bool:
        """Forget the queued events if they are no more than ``bodies`` (as `add` queued them)
        and nothing of this buffer was written yet: the caller hands them on to be written
        later, with something else. False (nothing dropped) otherwise, and also while this
        worker owes the run an `events_lost` marker: only its own writes of the run's events
        carry one (`ActivityContext.with_lost_marker`)."""
        queued = self._bodies
        if self._began_writing or self._tasks or any(body not in bodies for body in queued):
            return False
        if queued and self.context.owes_lost_marker(self.ref):
            return False
        self._cancel_late()
        self._bodies = []
        return True

    def take(self) -> list[dict[str, Any]]:
        """Everything queued, handed to the caller to write (with its own rows, in one
        transaction; it reports a failure with `lost`). Call after `settle`."""
        self._cancel_late()
        bodies, self._bodies = self._bodies, []
        self._began_writing = self._began_writing or bool(bodies)
        return self.context.with_lost_marker(self.ref, bodies)

    def lost(self, bodies: list[dict[str, Any]], error: BaseException) -> None:
        """``bodies`` (from `take`) could not be written: counted for the next marker."""
        self.context.count_lost(self.ref, bodies, error)

    async def settle(self) -> None:
        """Wait for writes already under way (so what `take` returns comes after them)."""
        async with self._lock:
            pass

    async def flush(self) -> None:
        """Write everything queued (one transaction); never raises for a failed write."""
        async with self._lock:
            self._cancel_late()
            bodies, self._bodies = self._bodies, []
            if bodies:
                self._began_writing = True
                await self.context.write_events(self.ref, bodies)

    async def close(self) -> None:
        """Flush, shielded: the activity may be ending because it was cancelled."""
        if not self._bodies and not self._tasks and not self._lock.locked():
            self._cancel_late()
            return  # the usual end (all written with the result): no task for a shield
        await asyncio.shield(self.flush())
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _cancel_late(self) -> None:
        if self._late is not None:
            self._late.cancel()
            self._late = None
