"""Seams for the hard-edge tests and their recorded histories."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine

from otherone.activities.providers.base import (
    ModelProvider,
    ModelRequest,
    ProviderError,
    StreamEvent,
)
from otherone.store import EntryRow, Store
from otherone.store.errors import DatabaseLocked
from otherone.store.schema import entries


class GateStore(Store):
    """A real store whose method ``held`` waits at a gate (by default `save_snapshot`, the
    first write of `prepare_run`).

    A store call that waits does so in a worker thread, hence threading events: ``entered`` is
    set when the call arrives, ``release`` lets it go on (after ``bound`` seconds at the latest,
    so a failing test never hangs a thread). A call made on the event loop (SQLite's brief
    calls: `Store.call_without_waiting`) meets the gate as it would another connection's lock:
    `DatabaseLocked`, and the call is made again in a thread, where it waits.
    """

    def __init__(self, url: str, held: str = "save_snapshot", *, bound: float = 30) -> None:
        super().__init__(Store.open(url).engine)
        self.entered = threading.Event()
        self.release = threading.Event()
        original = getattr(self, held)

        def gated(*args: Any, **kwargs: Any) -> Any:
            if _on_event_loop():
                raise DatabaseLocked
            self.entered.set()
            self.release.wait(bound)
            return original(*args, **kwargs)

        setattr(self, held, gated)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def unpaired_tool_calls(messages: list[dict[str, Any]]) -> list[str]:
    """What OpenAI and Anthropic reject: an assistant tool call not answered by tool messages
    right after it (before any other message), or a tool message answering no open call."""
    problems: list[str] = []
    open_ids: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in open_ids:
                open_ids.remove(call_id)
            else:
                problems.append(f"message {index}: tool result for no open call {call_id!r}")
            continue
        if open_ids:
            problems.append(f"message {index}: tool calls {open_ids} have no results")
            open_ids = []
        if role == "assistant":
            open_ids = [call["id"] for call in message.get("tool_calls") or []]
    if open_ids:
        problems.append(f"end: tool calls {open_ids} have no results")
    return problems


@dataclass
class StrictProvider:
    """The scripted model behind the check a real provider makes: a transcript with an unpaired
    tool call is refused like an HTTP 400 (non-retryable)."""

    inner: ModelProvider
    refused: list[list[str]] = field(default_factory=list)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        problems = unpaired_tool_calls(request.messages)
        if problems:
            self.refused.append(problems)
            raise ProviderError(
                "400 invalid_request_error: " + "; ".join(problems), retryable=False
            )
        async for event in self.inner.stream(request):
            yield event


class RefusingStore(Store):
    """A real store on a real database, whose `append_entries` sends the database a statement
    it refuses (a NOT NULL violation) whenever an entry holds ``marker``: a permanent driver
    error, with the entry's text among the statement's parameters."""

    def __init__(self, engine: Engine, marker: str) -> None:
        super().__init__(engine)
        self.marker = marker
        self.refused = 0

    def _insert_entries(
        self, conn: Connection, partition_key: str, session_id: str, rows: Iterable[EntryRow]
    ) -> int:
        # Every entry write goes through here (`append_entries`, and a turn's end, which writes
        # its entry and events in one transaction).
        rows = list(rows)
        for row in rows:
            if self.marker in row.content:
                self.refused += 1
                conn.execute(
                    entries.insert().values(
                        partition_key=partition_key,
                        session_id=session_id,
                        entry_key=None,  # NOT NULL: refused
                        role=row.role,
                        content=row.content,
                    )
                )
        return super()._insert_entries(conn, partition_key, session_id, rows)
