"""Plain values the store reads and writes (frozen: a row read is a snapshot, not a handle)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from otherone.parts import PARTS_KEY, estimate_part_tokens

#: A field of an event body (taken off before it is stored) that makes `Store.append_events`
#: store the event at most once per root tree under that key: for writers Temporal may run
#: again whole, such as local activities re-run after a failed workflow task (`event_key`).
EVENT_KEY = "__event_key__"


def event_key(run_id: str, *parts: str) -> str:
    """The key of one event of ``run_id`` (``parts`` say which): the same on every re-run,
    of bounded length whatever the ids (stored in ``otherone_events.event_key``)."""
    return hashlib.sha256("\0".join((run_id, *parts)).encode()).hexdigest()


@dataclass(frozen=True)
class EntryRow:
    """One transcript entry, as written (the model context is rebuilt from these).

    ``id`` is assigned by the database (None until stored); ids grow in append order, so a
    compaction can say "everything up to id N" and a reader can continue "after id N".
    Rows from `Store.turn_context` are shared with the worker's context cache: never change the
    lists and dicts they hold (copy them).
    """

    entry_key: str
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    error_kind: str | None = None
    usage: dict[str, Any] | None = None
    run_id: str | None = None
    id: int | None = None
    #: Estimated tokens; `Store.append_entries` fills in `estimate_entry_tokens` when None.
    tokens: int | None = None
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class Compaction:
    """A summary that replaces a session's entries with ``id <= up_to_entry_id``."""

    id: int
    partition_key: str
    session_id: str
    compaction_key: str
    summary: str
    up_to_entry_id: int
    tokens: int
    created_at: datetime
    #: The summary call's usage (``input_tokens``, ``output_tokens``); None when not known.
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class Artifact:
    """A stored blob (a large tool result or output, passed around by its id)."""

    partition_key: str
    artifact_id: str
    run_id: str
    name: str
    media_type: str
    size_bytes: int
    content: bytes
    created_at: datetime


@dataclass(frozen=True)
class SessionInfo:
    """A session as listed (``otherone sessions``): who holds its writer lease, until when."""

    partition_key: str
    session_id: str
    internal: bool
    created_at: datetime
    updated_at: datetime
    lease_run_id: str | None
    lease_until: datetime | None

    def holder(self, now: datetime) -> str | None:
        """The run holding the lease at ``now`` (None when free or expired)."""
        if self.lease_run_id is None or self.lease_until is None or self.lease_until <= now:
            return None
        return self.lease_run_id


@dataclass(frozen=True)
class KeyedRun:
    """A keyed root run the store knows (`Store.keyed_run`): the fingerprint of the request
    that started it, or None when only its record is kept (started before fingerprints were
    kept, or its starter stopped before keeping it)."""

    fingerprint: str | None


@dataclass(frozen=True)
class MigrationResult:
    """Schema revision before and after an upgrade (None: no schema)."""

    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        return self.before != self.after


def estimate_tokens(text: str) -> int:
    """A cheap token estimate (UTF-8 bytes / 4, at least 1): enough to decide on compaction."""
    return max(1, len(text.encode("utf-8")) // 4)


def estimate_entry_tokens(row: EntryRow) -> int:
    """`estimate_tokens` of what the model sees of an entry: its text and its tool calls, and
    its images and files by `otherone.parts.estimate_part_tokens`."""
    text = row.content
    if row.tool_calls:
        text += json.dumps(row.tool_calls, ensure_ascii=False, separators=(",", ":"))
    meta = row.meta or {}
    parts = [*(meta.get(PARTS_KEY) or ()), *(meta.get("images") or ())]  # a tool's images too
    return estimate_tokens(text) + sum(estimate_part_tokens(part) for part in parts)


def aware(value: datetime) -> datetime:
    """SQLite returns naive datetimes even for timezone=True columns; we always store UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def aware_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else aware(value)


def utc(value: datetime) -> datetime:
    """``value`` in UTC, so SQLite's text comparison of stored datetimes stays correct."""
    return aware(value).astimezone(UTC)
