"""How activities call the store and keep heartbeating: on the event loop when a call is brief
and the store allows it, else in a thread (`store_call`, `in_thread`); heartbeats only once a
body lasts (`heartbeating`). Which failures are an outage worth waiting for, and how they are
described without user data: `otherone.store.errors`."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from temporalio import activity

from otherone.store import Store
from otherone.store.errors import DatabaseLocked

T = TypeVar("T")

HEARTBEAT_EVERY_SECONDS = 1.0
#: The most text (characters) a write made on the event loop carries. Writing it into SQLite
#: takes ~0.1 ms for 64 KB but ~0.5 ms for 256 KB (`max_result_bytes`' default) and ~1.8 ms
#: for 1 MB (its ceiling): a bigger write goes through a thread, so the worker's other runs
#: go on meanwhile, for the price of the hop (~0.3 ms).
BRIEF_WRITE_CHARS = 64 * 1024


def brief_write(*texts: str | None) -> bool:
    """Whether a write of ``texts`` is small enough to be made on the event loop."""
    return sum(len(text) for text in texts if text) <= BRIEF_WRITE_CHARS


def heartbeat_if_running() -> None:
    """Heartbeat when called inside an activity (store helpers also run in tests directly).

    Not in a local activity (prepare_run, finish_run): it has no heartbeats, and Temporal's
    core would log a warning for each one."""
    with contextlib.suppress(RuntimeError):
        if not activity.info().is_local:
            activity.heartbeat()


async def store_call(store: Store, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)``, a call of ``store`` with bounded work: on the event loop
    when the store allows it (`Store.call_without_waiting`: SQLite, where the call takes a
    fraction of a millisecond, less than the hop to a thread and back), else in a thread
    (`in_thread`). Also in a thread when another connection holds the lock the call needs:
    waiting for it there leaves the event loop free."""
    if store.calls_without_waiting:
        with contextlib.suppress(DatabaseLocked):
            return store.call_without_waiting(function, *args, **kwargs)
    return await _thread_call(function, args, kwargs, to_its_end=False)


async def store_call_to_its_end(
    store: Store, function: Callable[..., T], *args: Any, **kwargs: Any
) -> T:
    """`store_call`, its thread (if it needs one) awaited to its end even when the caller is
    cancelled meanwhile (`in_thread_to_its_end`)."""
    if store.calls_without_waiting:
        with contextlib.suppress(DatabaseLocked):
            return store.call_without_waiting(function, *args, **kwargs)
    return await _thread_call(function, args, kwargs, to_its_end=True)


async def in_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function`` in the default thread pool (like `asyncio.to_thread`); heartbeating only
    if it takes longer than `HEARTBEAT_EVERY_SECONDS`. No task per call: a store call is
    ~1 ms, and a task plus a heartbeat request each time cost more than the call."""
    return await _thread_call(function, args, kwargs, to_its_end=False)


async def in_thread_to_its_end(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`in_thread`, except that a cancellation (raised all the same) first waits for the call
    to end: a thread cannot be stopped, and a caller whose write may commit after it was
    cancelled must know whether it did (an attempt's last write: `EventBuffer.write_with`).
    The wait is as long as the store call's own bounds (its driver's timeouts)."""
    return await _thread_call(function, args, kwargs, to_its_end=True)


async def _thread_call(
    function: Callable[..., T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    to_its_end: bool,
) -> T:
    """``function(*args, **kwargs)`` in the default thread pool, heartbeating once it lasts;
    ``to_its_end``: a cancellation waits for the call to end before it is raised."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
    async with heartbeating():  # a timer until the first heartbeat is due: nothing per call
        future = loop.run_in_executor(None, call)
        if not to_its_end:
            return await future
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            activity.logger.info("cancelled during a store write: waiting for it to end")
            while not future.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait({future})
            raise


@contextlib.asynccontextmanager
async def heartbeating(first_after: float = HEARTBEAT_EVERY_SECONDS) -> AsyncIterator[None]:
    """Heartbeat while the body runs, so cancellation reaches it and stalls are detected.

    The first heartbeat goes out after ``first_after`` seconds, then one every
    `HEARTBEAT_EVERY_SECONDS`: a body that ends sooner sends none (it is done before a
    cancellation or a stall would matter), which saves a server request per activity.
    """

    async def beat() -> None:
        while True:
            heartbeat_if_running()
            await asyncio.sleep(HEARTBEAT_EVERY_SECONDS)

    # A timer, not a task, until the first heartbeat is due: a body that ends sooner (most
    # do) costs no task, and leaving it does not wait for one to stop.
    loop = asyncio.get_running_loop()
    beating: list[asyncio.Task[None]] = []
    timer = loop.call_later(first_after, lambda: beating.append(loop.create_task(beat())))
    try:
        yield
    finally:
        timer.cancel()
        for task in beating:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
