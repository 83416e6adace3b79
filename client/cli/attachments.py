"""``otherone show``: the images and files of a run's user messages, as their artifact
references (kind, media type, size, SHA-256), read from the store's transcript."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from otherone.parts import PART_ADAPTER, PARTS_KEY, BinaryPart, TextPart, part_label
from otherone.runs import RunRecord

if TYPE_CHECKING:
    from otherone.store import Store


def run_attachments(store: Store, record: RunRecord) -> list[str]:
    """One line per image or file part of the run's user entries, in the order sent."""
    if not record.session_id:
        return []
    rows = store.load_entries(record.partition_key, record.session_id)
    lines: list[str] = []
    for row in rows:
        if row.run_id != record.run_id or row.role != "user":
            continue
        lines += [part_label(part) for part in _binary_parts(row.meta)]
    return lines


async def attachments_of(store: Store | None, record: RunRecord) -> list[str]:
    if store is None:
        return []
    return await asyncio.to_thread(run_attachments, store, record)


def _binary_parts(meta: dict[str, Any] | None) -> list[BinaryPart]:
    parts = [PART_ADAPTER.validate_python(part) for part in (meta or {}).get(PARTS_KEY) or ()]
    return [part for part in parts if not isinstance(part, TextPart)]
