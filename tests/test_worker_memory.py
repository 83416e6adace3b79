"""`otherone.worker.memory`: a worker gives a burst's freed memory back to the system."""

from __future__ import annotations

import asyncio
import gc
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from otherone.worker import memory


def _rss_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux")
def test_trimming_returns_the_freed_pages_of_a_burst() -> None:
    """Many small objects freed, a few kept among them (as a burst of runs leaves the heap):
    glibc keeps the pages until trimmed."""
    trim = memory._malloc_trim()
    assert trim is not None, "glibc's malloc_trim should be found on this Linux"
    blocks = [bytearray(2000) for _ in range(100_000)]  # ~200 MiB in small allocations
    kept = blocks[::20]
    del blocks
    gc.collect()
    freed = _rss_mib()
    trim(0)
    assert _rss_mib() < freed - 100, (freed, _rss_mib())
    assert len(kept) == 5000


async def test_the_periodic_trim_runs_until_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    thrice = asyncio.Event()
    loop = asyncio.get_running_loop()

    def trim(pad: int) -> int:  # runs in a thread, as malloc_trim does
        calls.append(pad)
        if len(calls) == 3:
            loop.call_soon_threadsafe(thrice.set)
        return 1

    monkeypatch.setattr(memory, "_malloc_trim", lambda: trim)
    task = asyncio.create_task(memory.trim_memory_periodically(timedelta(milliseconds=10)))
    await asyncio.wait_for(thrice.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls[:3] == [0, 0, 0]
