"""Server-Sent Events of a run tree: resumable by sequence, with heartbeats.

Each frame is one stored event envelope: ``id:`` is its sequence (gap-free per root tree),
``event:`` its type, ``data:`` the envelope as JSON. A client that reconnects with
``Last-Event-ID: <last sequence seen>`` (browsers' EventSource does it by itself) gets every
event after it: the store is the buffer, so nothing is lost however long it was away (within
``OTHERONE_EVENT_RETENTION_HOURS`` of the tree's end). With ``format=ag-ui`` the frames are AG-UI
events instead (`otherone.api.agui`); the last frame of an envelope carries its sequence.

The stream ends after the root run's terminal event (``run_completed`` / ``run_failed`` /
``run_cancelled``), when the root has stopped without one (terminated), or when the server shuts
down (the client resumes elsewhere). Idle streams get a ``: heartbeat`` comment line every
``OTHERONE_SERVE_HEARTBEAT_SECONDS`` so proxies keep them open and clients notice a dead peer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from otherone.api.agui import to_ag_ui
from otherone.api.notify import EventNotifier
from otherone.contracts import EventRecord
from otherone.store import Store

__all__ = ["StreamFormat", "TreeStream", "sse_frame"]

StreamFormat = Literal["otherone", "ag-ui"]
TERMINAL_EVENTS = frozenset({"run_completed", "run_failed", "run_cancelled"})
#: Events read from the store at once; a longer backlog is read in several batches.
BATCH = 500
#: A stream re-reads the store at least this often even when not woken (a lost notification).
SAFETY_READ_SECONDS = 5.0


def sse_frame(data: str, *, event_id: int | None = None, event: str | None = None) -> str:
    """One SSE frame; ``data`` is one line of JSON."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append(f"data: {data}")
    return "\n".join(lines) + "\n\n"


def is_root_end(record: EventRecord) -> bool:
    return record.run_id == record.root_run_id and record.event.get("type") in TERMINAL_EVENTS


def frames_of(record: EventRecord, format: StreamFormat) -> list[str]:
    if format == "otherone":
        kind = str(record.event.get("type", "event"))
        return [sse_frame(record.model_dump_json(), event_id=record.sequence, event=kind)]
    mapped = to_ag_ui(record)
    frames = [
        sse_frame(event.model_dump_json(by_alias=True, exclude_none=True)) for event in mapped
    ]
    if frames:  # the envelope's sequence on its last frame: resuming after it skips them all
        frames[-1] = f"id: {record.sequence}\n{frames[-1]}"
    else:  # nothing to show, but the cursor moved: a bare id keeps resumption exact
        frames = [f"id: {record.sequence}\n\n"]
    return frames


@dataclass
class TreeStream:
    """The frames of one root tree after ``after``, for one client."""

    store: Store
    notifier: EventNotifier
    root_run_id: str
    partition_key: str | None
    is_running: Callable[[], Awaitable[bool]]
    after: int = 0
    format: StreamFormat = "otherone"
    heartbeat_seconds: float = 15.0
    closing: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self) -> list[EventRecord]:
        return await asyncio.to_thread(
            self.store.read_events,
            self.root_run_id,
            after=self.after,
            limit=BATCH,
            partition_key=self.partition_key,
        )

    async def frames(self) -> AsyncIterator[str]:
        last_sent = time.monotonic()
        with self.notifier.subscribe(self.root_run_id) as woken:
            while not self.closing.is_set():
                woken.clear()  # before reading: a notification during the read wakes us again
                batch = await self.read()
                for record in batch:
                    self.after = record.sequence
                    for frame in frames_of(record, self.format):
                        yield frame
                    if is_root_end(record):
                        return
                if batch:
                    last_sent = time.monotonic()
                    if len(batch) == BATCH:
                        continue
                elif not await self._wait(woken, last_sent):
                    return
                if time.monotonic() - last_sent >= self.heartbeat_seconds:
                    yield ": heartbeat\n\n"
                    last_sent = time.monotonic()

    async def _wait(self, woken: asyncio.Event, last_sent: float) -> bool:
        """Sleep until woken, a heartbeat is due or the safety re-read; False when the
        stream should end (server closing, or the root stopped without a terminal event)."""
        until_heartbeat = self.heartbeat_seconds - (time.monotonic() - last_sent)
        timeout = max(0.0, min(until_heartbeat, SAFETY_READ_SECONDS))
        closing = asyncio.ensure_future(self.closing.wait())
        waking = asyncio.ensure_future(woken.wait())
        try:
            done, _ = await asyncio.wait(
                {closing, waking}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            closing.cancel()
            waking.cancel()
        if self.closing.is_set():
            return False
        if done:
            return True
        # Quiet: a root that is no longer running will write nothing more.
        return await self.is_running() or bool(await self._peek())

    async def _peek(self) -> list[EventRecord]:
        return await self.read()
