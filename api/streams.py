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
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from temporalio.service import RPCError

from otherone.api.agui import stopped_without_end, to_ag_ui
from otherone.api.agui_interrupts import WaitingCalls, interrupted
from otherone.api.notify import EventNotifier
from otherone.client.store_answers import answered
from otherone.contracts import EventRecord
from otherone.store import Store, StoreError
from otherone.store.errors import is_outage

__all__ = ["StreamFormat", "TreeReader", "TreeReaders", "TreeStream", "sse_frame"]

StreamFormat = Literal["otherone", "ag-ui"]
TERMINAL_EVENTS = frozenset({"run_completed", "run_failed", "run_cancelled"})
#: Events read from the store at once; a longer backlog is read in several batches.
BATCH = 500
#: A stream re-reads the store at least this often even when not woken (a lost notification).
SAFETY_READ_SECONDS = 5.0
_log = logging.getLogger(__name__)


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


def frames_of(record: EventRecord, format: StreamFormat, thread_id: str | None = None) -> list[str]:
    if format == "otherone":
        kind = str(record.event.get("type", "event"))
        return [sse_frame(record.model_dump_json(), event_id=record.sequence, event=kind)]
    mapped = to_ag_ui(record, thread_id)
    frames = [
        sse_frame(event.model_dump_json(by_alias=True, exclude_none=True)) for event in mapped
    ]
    if frames:  # the envelope's sequence on its last frame: resuming after it skips them all
        frames[-1] = f"id: {record.sequence}\n{frames[-1]}"
    else:  # nothing to show, but the cursor moved: a bare id keeps resumption exact
        frames = [f"id: {record.sequence}\n\n"]
    return frames


class TreeReader:
    """Reads one tree's new events once per notification for all the streams following it.

    Without it every stream would query the store on every wake-up (clients x events). The
    reader keeps the tree's latest events (up to `CACHE` of them, contiguous) and fetches only
    what is newer, one fetch at a time. A stream asks for events after its cursor *as of* the
    notifier version it saw when it cleared its wake-up flag: a fetch started at that version or
    later has seen every event notified before, so it can be shared (unless it hit the batch
    limit: then more may follow and a new fetch is needed). A stream further behind than the
    cache (a client resuming from long ago) reads the store directly.
    """

    CACHE = 2000

    def __init__(
        self, store: Store, notifier: EventNotifier, root_run_id: str, partition_key: str | None
    ) -> None:
        self.store = store
        self.notifier = notifier
        self.root_run_id = root_run_id
        self.partition_key = partition_key
        self.users = 0
        #: The cache holds every event after ``_base`` up to its last (None: nothing yet).
        self._base: int | None = None
        self._events: list[EventRecord] = []
        self._fetch: asyncio.Task[bool] | None = None
        self._fetch_version = -1

    async def after(self, cursor: int, version: int) -> tuple[list[EventRecord], bool]:
        """Events after ``cursor`` (in order, contiguous) and whether more may follow at once."""
        while True:
            if self._base is not None and cursor < self._base:
                batch = await self._read(cursor)  # behind the cache: a read of its own
                return batch, len(batch) == BATCH
            fetch = self._fetch
            if fetch is not None and self._fetch_version >= version and not _was_full(fetch):
                full = await self._result(fetch)
                if self._base is not None and cursor < self._base:
                    continue  # the cache moved past us meanwhile
                return [event for event in self._events if event.sequence > cursor], full
            if fetch is not None and not fetch.done():
                await self._result(fetch)  # one fetch at a time: then start a newer one
                continue
            self._fetch_version = self.notifier.version(self.root_run_id)
            self._fetch = asyncio.ensure_future(self._fetch_newer(cursor))

    async def _result(self, fetch: asyncio.Task[bool]) -> bool:
        try:
            return await asyncio.shield(fetch)
        except Exception:
            if self._fetch is fetch:
                self._fetch = None  # the next stream to ask tries again
            raise

    async def _fetch_newer(self, cursor: int) -> bool:
        """Append what follows the cache (the first fetch: what follows ``cursor``)."""
        if self._base is None:
            self._base = cursor
        start = self._events[-1].sequence if self._events else self._base
        batch = await self._read(start)
        self._events.extend(batch)
        if len(self._events) > self.CACHE:
            del self._events[: len(self._events) - self.CACHE]
            self._base = self._events[0].sequence - 1
        return len(batch) == BATCH

    async def _read(self, after: int) -> list[EventRecord]:
        return await answered(
            self.store.read_events,
            self.root_run_id,
            after=after,
            limit=BATCH,
            partition_key=self.partition_key,
        )


def _was_full(fetch: asyncio.Task[bool]) -> bool:
    """A finished fetch that hit the batch limit: more may follow, so do not reuse it."""
    return fetch.done() and not fetch.cancelled() and fetch.exception() is None and fetch.result()


class TreeReaders:
    """The `TreeReader` of each followed (tree, partition), while someone follows it."""

    def __init__(self, store: Store, notifier: EventNotifier) -> None:
        self.store = store
        self.notifier = notifier
        self._readers: dict[tuple[str, str | None], TreeReader] = {}

    @contextlib.contextmanager
    def reader(self, root_run_id: str, partition_key: str | None) -> Iterator[TreeReader]:
        key = (root_run_id, partition_key)
        found = self._readers.get(key)
        if found is None:
            found = self._readers[key] = TreeReader(
                self.store, self.notifier, root_run_id, partition_key
            )
        found.users += 1
        try:
            yield found
        finally:
            found.users -= 1
            if not found.users:
                del self._readers[key]


@dataclass
class TreeStream:
    """The frames of one root tree after ``after``, for one client."""

    readers: TreeReaders
    root_run_id: str
    partition_key: str | None
    is_running: Callable[[], Awaitable[bool]]
    after: int = 0
    format: StreamFormat = "otherone"
    heartbeat_seconds: float = 15.0
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    #: AG-UI's thread: the root's session (its conversation), else the root run id.
    thread_id: str | None = None
    #: AG-UI runs (``POST /v1/ag-ui``): calls that wait for a person end the stream with an
    #: interrupt (`otherone.api.agui_interrupts`); None: the stream waits with the run.
    waiting: WaitingCalls | None = None
    #: Events up to this sequence are read (for ``waiting``) but not sent: a resumed AG-UI
    #: run's client has them.
    sent_through: int = 0

    async def pending(self) -> list[EventRecord]:
        """Events after the cursor now (one read, not shared)."""
        return await answered(
            self.readers.store.read_events,
            self.root_run_id,
            after=self.after,
            limit=BATCH,
            partition_key=self.partition_key,
        )

    async def frames(self) -> AsyncIterator[str]:
        notifier = self.readers.notifier
        last_sent = time.monotonic()
        with (
            notifier.subscribe(self.root_run_id) as woken,
            self.readers.reader(self.root_run_id, self.partition_key) as reader,
        ):
            while not self.closing.is_set():
                # Before reading: a notification during the read wakes us again.
                version = notifier.version(self.root_run_id)
                woken.clear()
                try:
                    batch, more = await reader.after(self.after, version)
                except Exception as error:
                    if not unavailable(error):
                        raise
                    # The store is down: the stream stays open (heartbeats) and reads again
                    # when it is back; a client need not reconnect, and nothing is skipped.
                    _outage(f"the store: {error}")
                    if await self._pause():
                        return
                    yield ": heartbeat (the store is unavailable; retrying)\n\n"
                    last_sent = time.monotonic()
                    continue
                sent, ended = self._frames_of_batch(batch)
                for frame in sent:
                    yield frame
                if ended:
                    return
                if batch:
                    last_sent = time.monotonic()
                if more:
                    continue
                interrupt = self._interrupt()
                if interrupt is not None:
                    yield interrupt
                    return
                if not batch:
                    wait = await self._wait(woken, last_sent)
                    if wait in ("end", "stopped"):
                        for frame in self._closing_frames(wait):
                            yield frame
                        return
                    if wait == "quiet":  # no wake-up for a while: read the store anew
                        notifier.notify(self.root_run_id)
                if time.monotonic() - last_sent >= self.heartbeat_seconds:
                    yield ": heartbeat\n\n"
                    last_sent = time.monotonic()

    def _frames_of_batch(self, batch: list[EventRecord]) -> tuple[list[str], bool]:
        """The frames of ``batch`` (moving the cursor), and whether the root ended in it."""
        frames: list[str] = []
        for record in batch:
            self.after = record.sequence
            if self.waiting is not None:
                self.waiting.see(record)
            if record.sequence <= self.sent_through:
                continue
            frames.extend(frames_of(record, self.format, self.thread_id))
            if is_root_end(record):
                return frames, True
        return frames, False

    def _closing_frames(self, wait: str) -> list[str]:
        """What a stream sends last when it ends without its root's end: an AG-UI client
        waits for a RUN_FINISHED or RUN_ERROR, so a root stopped from outside gets one."""
        if wait != "stopped" or self.format != "ag-ui":
            return []
        ended = stopped_without_end(self.root_run_id)
        return [sse_frame(ended.model_dump_json(by_alias=True, exclude_none=True))]

    def _interrupt(self) -> str | None:
        """An AG-UI run's last frame when calls wait for a person (read all there is first:
        then every waiting call of the turn is known, a turn's requests being stored
        together)."""
        if self.waiting is None or not self.waiting.any:
            return None
        thread = self.thread_id or self.root_run_id
        events = interrupted(thread, self.root_run_id, self.waiting, self.after)
        return "".join(
            sse_frame(event.model_dump_json(by_alias=True, exclude_none=True)) for event in events
        )

    async def _wait(self, woken: asyncio.Event, last_sent: float) -> str:
        """Sleep until woken (``woken``), a heartbeat is due or the safety re-read
        (``quiet``), or the stream should end (``end``: the server is closing; ``stopped``: the
        root stopped without a terminal event)."""
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
            return "end"
        if done:
            return "woken"
        # Quiet: a root that is no longer running will write nothing more.
        try:
            running = await self.is_running() or await self.pending()
        except Exception as error:
            if not unavailable(error):
                raise
            _outage(f"Temporal: {error}")  # not known to have ended: keep waiting
            return "quiet"
        return "quiet" if running else "stopped"

    async def _pause(self) -> bool:
        """Wait before reading again after a failed read; True when the server closes."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.closing.wait(), SAFETY_READ_SECONDS)
        return self.closing.is_set()


def unavailable(error: BaseException) -> bool:
    """Temporal or the store out of reach (worth waiting for), not a bug."""
    return isinstance(error, RPCError | StoreError) or is_outage(error)


_last_outage_log = 0.0


def _outage(what: str) -> None:
    """Log an outage a stream met, at most once a minute for all streams (many streams
    would each say it on every read)."""
    global _last_outage_log
    now = time.monotonic()
    if now - _last_outage_log >= 60:
        _last_outage_log = now
        _log.warning("event streams wait: %s is unavailable", what)
