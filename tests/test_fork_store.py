"""The store's forked sessions (`otherone.store.forks`) on SQLite and PostgreSQL: entries
shared by reference up to a cut, a fork of a fork, the compaction a fork starts from."""

from __future__ import annotations

from otherone.store import Store
from otherone.store.records import EntryRow


def _append(store: Store, session: str, *texts: str) -> list[int]:
    rows = [EntryRow(entry_key=f"{session}:{text}", role="user", content=text) for text in texts]
    store.append_entries("p", session, rows)
    return [e.id or 0 for e in store.load_entries("p", session) if e.content in texts]


def _contents(store: Store, session: str, after_id: int | None = None) -> list[str]:
    return [e.content for e in store.load_entries("p", session, after_id=after_id)]


def test_a_fork_reads_the_source_up_to_the_cut_in_place_and_then_its_own(store: Store) -> None:
    ids = _append(store, "a", "a1", "a2", "a3")
    store.add_compaction("p", "a", key="c1", summary="up to a1", up_to_entry_id=ids[0], tokens=3)
    store.add_compaction("p", "a", key="c2", summary="up to a3", up_to_entry_id=ids[2], tokens=3)
    store.fork_session("p", "a", "b", ids[1])
    store.fork_session("p", "a", "b", ids[1])  # a retried start: nothing more
    assert _contents(store, "b") == ["a1", "a2"]
    assert [e.id for e in store.load_entries("p", "b")] == ids[:2]  # the very rows
    assert _contents(store, "b", after_id=ids[0]) == ["a2"]
    # The latest compaction the cut keeps whole is the fork's too; the later one is not.
    compaction = store.latest_compaction("p", "b")
    assert compaction is not None and compaction.summary == "up to a1"
    assert compaction.up_to_entry_id == ids[0]

    _append(store, "b", "b1")
    _append(store, "a", "a4")
    assert _contents(store, "b") == ["a1", "a2", "b1"]
    assert _contents(store, "a") == ["a1", "a2", "a3", "a4"]

    # A fork of the fork before its own entry: both sources, each cut there.
    b1 = store.load_entries("p", "b")[-1].id or 0
    store.fork_session("p", "b", "c", b1 - 1)
    assert store.session_links("p", "c") == {"a": ids[1], "b": b1 - 1}
    assert _contents(store, "c") == ["a1", "a2"]
    store.fork_session("p", "b", "d", b1)
    assert _contents(store, "d") == ["a1", "a2", "b1"]
    # Another partition sees none of it.
    assert store.load_entries("q", "b") == [] and store.session_links("q", "b") == {}
