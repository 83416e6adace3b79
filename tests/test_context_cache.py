"""`Store.turn_context` through the worker's context cache, on SQLite and PostgreSQL.

Why: a turn reads a session's entries from the cache as far as the database confirms them, and
the next run of a session may be on another worker, a zombie attempt may still write, entries
may become visible out of id order (PostgreSQL) or be deleted, and a compaction moves the cut.
Each case must give exactly what reading the whole session gives (`load_entries` after the
latest compaction), and the cache must stay within its bounds.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import delete, insert

from otherone.activities.context import messages_from_entries
from otherone.activities.providers.anthropic import anthropic_messages
from otherone.activities.providers.base import REASONING_KEY
from otherone.activities.providers.openai import _wire_message
from otherone.store import EntryRow, Store
from otherone.store.context_cache import ROW_OVERHEAD_BYTES, ContextCache, SessionContext
from otherone.store.schema import entries
from otherone.wire_names import WireNames

P, S = "tenant-a", "s-1"


def _turn(store: Store, session: str = S, answer_key: str = "no-answer") -> list[EntryRow]:
    existing, _, rows = store.turn_context(P, session, answer_key, "run-1", [], lambda _: [])
    assert existing is None
    return rows


def _expected(store: Store, session: str = S) -> list[EntryRow]:
    """What reading everything gives: the entries after the latest compaction."""
    compaction = store.latest_compaction(P, session)
    return store.load_entries(
        P, session, after_id=compaction.up_to_entry_id if compaction else None
    )


def _append(store: Store, *keys: str, session: str = S) -> None:
    store.append_entries(P, session, [_row(key) for key in keys])


def _row(key: str, content: str | None = None) -> EntryRow:
    return EntryRow(
        entry_key=key,
        role="assistant",
        content=content if content is not None else f"text of {key}",
        tool_calls=[{"id": key, "type": "function", "function": {"name": "t", "arguments": "{}"}}],
        usage={"input_tokens": 3},
        run_id="run-1",
        meta={REASONING_KEY: [{"type": "thinking", "thinking": "hm", "signature": "sig"}]},
    )


@pytest.fixture
def other(store: Store) -> Iterator[Store]:
    """A second worker's store on the same database (its own engine and cache)."""
    url = store.engine.url.render_as_string(hide_password=False)
    opened = Store.open(url, migrate=False)
    try:
        yield opened
    finally:
        opened.close()


def test_cached_reads_equal_full_reads_and_only_new_entries_are_read(store: Store) -> None:
    _append(store, "a", "b")
    store.append_entries(P, S, [EntryRow("plain", "user", "no json columns")])
    assert _turn(store) == _expected(store)
    cached = store.contexts.get((P, S))
    assert cached is not None and len(cached.rows) == 3
    _append(store, "c")
    rows = _turn(store)
    assert rows == _expected(store) and len(rows) == 4
    # The cached rows are reused as they are, not read again.
    assert rows[0] is cached.rows[0]


def test_pending_entries_written_in_the_turn_are_in_its_context(store: Store) -> None:
    _append(store, "a")
    _turn(store)
    store.put_tool_result(P, "run-1", "c1", tool_name="t", content="42", error_kind=None)
    _, _, rows = store.turn_context(
        P,
        S,
        "answer",
        "run-1",
        ["c1"],
        lambda stored: [EntryRow("tool-c1", "tool", stored["c1"], tool_call_id="c1")],
    )
    assert [row.content for row in rows] == ["text of a", "42"]
    assert rows == _expected(store)


def test_entries_written_by_another_worker_are_read(store: Store, other: Store) -> None:
    _append(store, "a")
    assert len(_turn(store)) == 1
    _append(other, "b", "c")
    assert len(_turn(other)) == 3
    _append(other, "d")
    assert _turn(store) == _expected(store)
    assert [row.entry_key for row in _turn(store)] == ["a", "b", "c", "d"]


def test_a_compaction_trims_the_cached_entries(store: Store, other: Store) -> None:
    _append(store, "a", "b", "c")
    rows = _turn(store)
    other.add_compaction(P, S, key="k1", summary="sum", up_to_entry_id=rows[1].id or 0, tokens=1)
    existing, compaction, after = store.turn_context(P, S, "x", "run-1", [], lambda _: [])
    assert existing is None and compaction is not None and compaction.summary == "sum"
    assert [row.entry_key for row in after] == ["c"] == [row.entry_key for row in _expected(store)]
    # A compaction past every cached entry, then one that cuts less (the newest one counts).
    _append(store, "d")
    everything = store.load_entries(P, S)
    other.add_compaction(
        P, S, key="k2", summary="all", up_to_entry_id=everything[-1].id or 0, tokens=1
    )
    assert _turn(store) == [] == _expected(store)
    _append(store, "e")
    assert [row.entry_key for row in _turn(store)] == ["e"]
    other.add_compaction(
        P, S, key="k3", summary="less", up_to_entry_id=everything[0].id or 0, tokens=1
    )
    assert [row.entry_key for row in _turn(store)] == ["b", "c", "d", "e"]
    assert _turn(store) == _expected(store)


def test_an_entry_visible_below_the_newest_cached_id_is_read(store: Store) -> None:
    """PostgreSQL: a transaction that took its id first may commit after a later one; here a
    row is written with an id below the newest cached one."""
    _append(store, "a")
    first = store.load_entries(P, S)[0].id or 0
    _insert_with_id(store, first + 10, "late-high")
    assert [row.entry_key for row in _turn(store)] == ["a", "late-high"]
    _insert_with_id(store, first + 5, "late-low")
    rows = _turn(store)
    assert [row.entry_key for row in rows] == ["a", "late-low", "late-high"]
    assert rows == _expected(store)


def test_deleted_entries_are_noticed(store: Store) -> None:
    _append(store, "a", "b", "c")
    assert len(_turn(store)) == 3
    with store.engine.begin() as conn:
        conn.execute(delete(entries).where(entries.c.entry_key == "b"))
    assert [row.entry_key for row in _turn(store)] == ["a", "c"] == _keys(_expected(store))


def test_a_session_deleted_and_written_again_with_the_same_ids_is_noticed(store: Store) -> None:
    """SQLite gives the highest ids again once they are deleted: same count, sum and newest
    id, only the contents (and write times) differ."""
    _append(store, "a", "b")
    ids = [row.id for row in _turn(store)]
    with store.engine.begin() as conn:
        conn.execute(delete(entries).where(entries.c.session_id == S))
    store.append_entries(P, S, [_row("a", "new a"), _row("b", "new b")])
    if store.engine.dialect.name == "sqlite":
        assert [row.id for row in store.load_entries(P, S)] == ids
    rows = _turn(store)
    assert [row.content for row in rows] == ["new a", "new b"]
    assert rows == _expected(store)


def _keys(rows: list[EntryRow]) -> list[str]:
    return [row.entry_key for row in rows]


def test_the_stored_answer_of_a_retried_turn_is_returned(store: Store) -> None:
    _append(store, "a")
    _turn(store)
    store.append_entries(P, S, [_row("answer", "done")])
    existing, compaction, rows = store.turn_context(P, S, "answer", "run-1", [], lambda _: [])
    assert existing is not None and existing.content == "done" and existing.meta == _row("x").meta
    assert compaction is None and rows == []


def test_the_cache_keeps_its_bounds() -> None:
    def context(text: str) -> SessionContext:
        return SessionContext.of(0, [EntryRow("k", "user", text, id=1)], marker=None)

    small = context("x")
    cache = ContextCache(max_sessions=2, max_bytes=10 * small.size)
    for session in ("s1", "s2", "s3"):
        cache.put((P, session), small)
    assert len(cache) == 2 and cache.get((P, "s1")) is None
    assert cache.bytes == 2 * small.size
    # One entry that leaves room for no other session, then one larger than the whole cache.
    large = context("x" * (cache.max_bytes - small.size + 1 - ROW_OVERHEAD_BYTES))
    cache.put((P, "s4"), large)
    assert cache.get((P, "s4")) is large and len(cache) == 1
    cache.put((P, "s5"), context("x" * cache.max_bytes))
    assert cache.get((P, "s5")) is None  # not kept: read every time
    assert cache.bytes == large.size <= cache.max_bytes


def test_a_store_with_an_evicting_cache_reads_correctly(store: Store) -> None:
    store.contexts = ContextCache(max_sessions=1)
    _append(store, "a", session="one")
    _append(store, "b", session="two")
    for _ in range(2):
        assert _turn(store, "one") == _expected(store, "one")
        assert _turn(store, "two") == _expected(store, "two")
    assert len(store.contexts) == 1


def test_building_a_request_leaves_the_cached_entries_unchanged(store: Store) -> None:
    """Cached rows are shared with every turn: context building and providers must copy."""
    _append(store, "a")
    store.append_entries(P, S, [EntryRow("t", "tool", "out", tool_call_id="a", tool_name="t")])
    rows = _turn(store)
    before = copy.deepcopy(rows)
    messages = messages_from_entries("system", rows, "summary")
    anthropic_messages(messages, WireNames(["t"]))
    for message in messages:
        _wire_message(message, WireNames(["t"]))
    assert rows == before == _turn(store)
    # A provider of the user's own that edits its request in place touches copies only.
    edited = [call for message in messages for call in message.get("tool_calls", [])]
    assert edited, "the session has a tool call"
    for call in edited:
        call["function"]["name"] = "edited in place"
    blocks = [block for message in messages for block in message.get(REASONING_KEY, [])]
    assert blocks, "the session has a reasoning block"
    for block in blocks:
        block["signature"] = "edited in place"
    assert rows == before == _turn(store)


def test_a_providers_own_reasoning_block_is_copied_whatever_its_containers() -> None:
    """Rows read from the store hold lists and dicts; a row built by other code may hold
    tuples: the copy reaches the dicts inside them too."""
    block = {"type": "thinking", "parts": ({"text": "hm"},)}
    row = EntryRow("a", "assistant", "", meta={REASONING_KEY: [block]})
    (message,) = messages_from_entries("", [row])
    message[REASONING_KEY][0]["parts"][0]["text"] = "edited in place"
    assert block == {"type": "thinking", "parts": ({"text": "hm"},)}


def _compact(store: Store, key: str, up_to: EntryRow) -> None:
    store.add_compaction(P, S, key=key, summary=key, up_to_entry_id=up_to.id or 0, tokens=1)


def _insert_with_id(store: Store, id_: int, key: str) -> None:
    values: dict[str, Any] = {
        "id": id_,
        "partition_key": P,
        "session_id": S,
        "entry_key": key,
        "role": "user",
        "content": key,
        "tokens": 1,
        "created_at": datetime.now(UTC),
    }
    with store.engine.begin() as conn:
        conn.execute(insert(entries).values(**values))
