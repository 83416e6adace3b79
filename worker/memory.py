"""Give a burst's freed memory back to the operating system.

CPython frees objects into glibc's heap, which keeps most of it: after 10,000 runs had waited
on one worker and completed, its resident memory stayed ~100 MiB above its idle figure
(docs/benchmarks.md, "Waiting runs"), though nothing of theirs was left. ``malloc_trim(0)``
returns the free pages of every arena; called now and then (it takes milliseconds, and
nothing when there is nothing to return), a worker's memory follows its work back down.
Linux with glibc only; elsewhere this does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from datetime import timedelta

logger = logging.getLogger(__name__)


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None
    return trim


async def trim_memory_periodically(every: timedelta) -> None:
    """Trim the heap every ``every`` until cancelled (a worker's housekeeping)."""
    trim = _malloc_trim()
    if trim is None:
        logger.debug("no malloc_trim here: freed memory stays with the process")
        return
    while True:
        await asyncio.sleep(every.total_seconds())
        await asyncio.to_thread(trim, 0)
