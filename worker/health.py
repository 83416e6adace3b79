"""Liveness of a worker process, as a file it keeps fresh (container healthchecks).

While `otherone worker` runs (`Settings.health_file`, ``OTHERONE_HEALTH_FILE``), `beat` rewrites
the file every `BEAT_SECONDS`; it removes the file when the worker starts shutting down. The
file is fresh only while the event loop turns *and* the Temporal worker is running (not failed,
not draining), which is what "healthy" means for a worker. It says nothing about Temporal
itself: a worker waiting for an unreachable server is alive and reconnects on its own, and a
liveness probe must not restart it for that.

The check runs as a plain script so it costs a few milliseconds, not the ~1 s of importing the
``otherone`` CLI (this module uses only the standard library)::

    python /app/worker/health.py [PATH]     # exit 0 healthy, 1 not (PATH: $OTHERONE_HEALTH_FILE)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: Seconds between two writes of the health file.
BEAT_SECONDS = 5.0
#: A file older than this means the worker is stuck or gone (several missed beats).
MAX_AGE_SECONDS = 30.0
HEALTH_FILE_ENV = "OTHERONE_HEALTH_FILE"


def write(path: Path) -> None:
    """Write the file atomically (a reader never sees it half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(f"pid {os.getpid()} alive at {time.time():.3f}\n", encoding="utf-8")
    partial.replace(path)


def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


async def beat(path: Path, alive: Callable[[], bool], every: float = BEAT_SECONDS) -> None:
    """Keep ``path`` fresh while ``alive()``; remove it when not (and when cancelled)."""
    try:
        while True:
            # Written inline (a few microseconds), not in a thread: once this task is cancelled
            # no write can land after the removal below.
            if alive():
                write(path)
            else:
                remove(path)
            await asyncio.sleep(every)
    finally:
        remove(path)


def problem(path: Path, max_age: float = MAX_AGE_SECONDS, now: float | None = None) -> str | None:
    """Why the worker writing ``path`` is not healthy, or None when it is."""
    try:
        modified = path.stat().st_mtime
    except FileNotFoundError:
        return f"{path} does not exist (worker not started, shutting down, or failed)"
    age = (time.time() if now is None else now) - modified
    if age > max_age:
        return f"{path} was last written {age:.0f} s ago (more than {max_age:g} s): worker stuck"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    location = args[0] if args else os.environ.get(HEALTH_FILE_ENV, "")
    if not location:
        print(f"unhealthy: no health file ({HEALTH_FILE_ENV} is not set)", file=sys.stderr)
        return 1
    found = problem(Path(location))
    if found is not None:
        print(f"unhealthy: {found}", file=sys.stderr)
        return 1
    print(f"healthy: {location} is fresh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
