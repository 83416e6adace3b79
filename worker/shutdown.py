"""Running workers until a signal, then draining them (graceful shutdown).

What `serve` does when ``stop`` is set (the CLI sets it on SIGTERM / Ctrl-C):

1. every worker stops polling (`Worker.shutdown`): no new workflow or activity task starts in
   this process; the health file (`otherone.worker.health`) goes away at once;
2. activities already running get the worker's ``graceful_shutdown_timeout``
   (`Settings.shutdown_grace_seconds`, passed by `otherone.worker.app.build_worker`) to finish and
   report
   their results to Temporal;
3. after that the SDK cancels the ones still running (an async activity gets `CancelledError`);
   Temporal retries them on another worker (a tool gets the same idempotency key);
4. `serve` returns and the process exits 0 — also when an activity ignores cancellation (a tool
   blocked in a thread): `serve` stops waiting `ABANDON_AFTER_SECONDS` after the grace period;
   the activity's heartbeat timeout then hands it to another worker.

A second signal while draining stops waiting at once (`ShutdownReport.forced`).

Workflow tasks need no draining: a workflow's state is its history in Temporal, and any worker
replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.exceptions import CancelledError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)

from otherone.worker import health

#: Seconds `serve` keeps waiting after the grace period for cancelled activities to report.
ABANDON_AFTER_SECONDS = 10.0


class WorkerFailed(Exception):
    """A worker stopped on its own (not because of a signal) without raising an error."""


class ActivityTracker(Interceptor):
    """Worker interceptor counting the activities running in this process, and those that ended
    cancelled (for the shutdown notices: how many were drained, cancelled or left running)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.cancelled = 0

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Counted(next, self)


class _Counted(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, tracker: ActivityTracker) -> None:
        super().__init__(next)
        self.tracker = tracker

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        self.tracker.in_flight += 1
        try:
            return await super().execute_activity(input)
        except (asyncio.CancelledError, CancelledError):
            self.tracker.cancelled += 1
            raise
        finally:
            self.tracker.in_flight -= 1


@dataclass(frozen=True)
class ShutdownReport:
    in_flight: int  # activities running when the signal came
    cancelled: int  # of those, cancelled after the grace period (Temporal retries them)
    left_running: int  # still running when `serve` stopped waiting (0 after a clean stop)
    forced: bool  # a second signal cut the drain short

    @property
    def clean(self) -> bool:
        """Every worker finished its shutdown (nothing is left running in this process)."""
        return self.left_running == 0 and not self.forced


def grace_of(workers: Sequence[Worker]) -> float:
    """The longest ``graceful_shutdown_timeout`` of ``workers``, in seconds."""
    graces = [w.config().get("graceful_shutdown_timeout") or timedelta() for w in workers]
    return max((grace.total_seconds() for grace in graces), default=0.0)


async def serve(
    workers: Sequence[Worker],
    stop: asyncio.Event,
    *,
    tracker: ActivityTracker | None = None,
    health_file: Path | None = None,
    notify: Callable[[str], None] = lambda _: None,
    force: asyncio.Event | None = None,
) -> ShutdownReport:
    """Run ``workers`` until ``stop`` is set, then drain them (see the module docstring).

    Raises `WorkerFailed` when a worker stops by itself. ``force`` (set by a second signal)
    ends the drain early; ``notify`` receives one-line progress messages.
    """
    running: list[asyncio.Future[None]] = [asyncio.ensure_future(w.run()) for w in workers]
    beating = _start_beat(health_file, workers, stop)
    try:
        await _until_stop_or_failure(running, stop)
    finally:
        if beating is not None:  # unhealthy from the first moment of the drain (file removed)
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
    return await _drain(workers, running, tracker, notify, force)


def _start_beat(
    path: Path | None, workers: Sequence[Worker], stop: asyncio.Event
) -> asyncio.Task[None] | None:
    if path is None:
        return None

    def alive() -> bool:
        return not stop.is_set() and all(w.is_running for w in workers)

    return asyncio.create_task(health.beat(path, alive))


async def _until_stop_or_failure(running: list[asyncio.Future[None]], stop: asyncio.Event) -> None:
    stopper: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([*running, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    ended = [task for task in running if task.done()]
    if ended and not stop.is_set():
        for task in running:
            task.cancel()
        error = None if ended[0].cancelled() else ended[0].exception()
        if error is not None:
            raise error  # what stopped the worker (e.g. Temporal unreachable), for the CLI
        raise WorkerFailed("worker stopped unexpectedly")


async def _drain(
    workers: Sequence[Worker],
    running: list[asyncio.Future[None]],
    tracker: ActivityTracker | None,
    notify: Callable[[str], None],
    force: asyncio.Event | None,
) -> ShutdownReport:
    tracker = tracker or ActivityTracker()  # without one, the counts stay 0
    in_flight, cancelled_before = tracker.in_flight, tracker.cancelled
    grace = grace_of(workers)
    notify(_drain_notice(in_flight, grace))
    shutting: asyncio.Future[Any] = asyncio.ensure_future(
        asyncio.gather(*(w.shutdown() for w in workers))
    )
    forcing: asyncio.Future[Any] = asyncio.ensure_future((force or asyncio.Event()).wait())
    try:
        done, _ = await asyncio.wait(
            [shutting, forcing],
            timeout=grace + ABANDON_AFTER_SECONDS,
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        forcing.cancel()
    report = ShutdownReport(
        in_flight=in_flight,
        cancelled=tracker.cancelled - cancelled_before,
        left_running=0 if shutting in done else tracker.in_flight,
        forced=forcing in done and shutting not in done,
    )
    if shutting in done:
        shutting.result()
        for task in running:  # they ended with the shutdown; collect their outcome
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    notify(_final_notice(report))
    return report


def _plural(count: int) -> str:
    return f"{count} in-flight activit{'y' if count == 1 else 'ies'}"


def _drain_notice(in_flight: int, grace: float) -> str:
    if in_flight == 0:
        return "stopping the worker (no activity in flight)…"
    return f"stopping the worker: draining {_plural(in_flight)} (up to {grace:g} s)…"


def _final_notice(report: ShutdownReport) -> str:
    if report.clean:
        if report.cancelled:
            return (
                f"worker stopped; {_plural(report.cancelled)} cancelled after the grace period "
                "(Temporal retries them on another worker)"
            )
        return "worker stopped"
    why = "second signal" if report.forced else "grace period over"
    return (
        f"{why}: exiting with {_plural(report.left_running)} still running; Temporal retries "
        "them on another worker after their heartbeat timeout"
    )
