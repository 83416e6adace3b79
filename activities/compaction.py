"""Context compaction: when a session's context nears the window, summarise its older part.

The rule (the seed's): when the estimated tokens of the context reach
``context_window * threshold_percentage``, the older entries are summarised by a model call and
the newest ~40% of the window is kept verbatim. A tool call is never separated from its results:
the kept part never starts with a tool result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from otherone.parts import stored_part_labels
from otherone.store import EntryRow
from otherone.store.records import estimate_entry_tokens

#: Share of the context window kept verbatim after a compaction.
KEEP_FRACTION = 0.4
SUMMARY_INSTRUCTIONS = (
    "You compress conversations. Summarise the conversation below so that an assistant can "
    "continue it without the original: keep the user's goals, decisions, facts, numbers, names, "
    "open questions and what tools returned. Write plain prose, no preamble."
)


def row_tokens(row: EntryRow) -> int:
    return row.tokens if row.tokens is not None else estimate_entry_tokens(row)


@dataclass(frozen=True)
class CompactionPlan:
    """Entries to summarise (older) and to keep (newer); ``up_to_entry_id`` marks the cut."""

    summarise: tuple[EntryRow, ...]
    keep: tuple[EntryRow, ...]
    up_to_entry_id: int


def plan_compaction(
    rows: Sequence[EntryRow], *, fixed_tokens: int, context_window: int, threshold: float
) -> CompactionPlan | None:
    """Decide whether to compact. ``fixed_tokens``: system prompt, tools and current summary."""
    total = fixed_tokens + sum(row_tokens(row) for row in rows)
    if total < context_window * threshold or len(rows) < 2:
        return None
    cut = _cut_index(rows, keep_budget=int(context_window * KEEP_FRACTION))
    if cut <= 0:
        return None
    up_to = rows[cut - 1].id
    if up_to is None:
        return None
    return CompactionPlan(summarise=tuple(rows[:cut]), keep=tuple(rows[cut:]), up_to_entry_id=up_to)


def _cut_index(rows: Sequence[EntryRow], *, keep_budget: int) -> int:
    """First kept row: the newest rows that fit the budget, moved back off tool results."""
    kept = 0
    cut = len(rows)
    for index in range(len(rows) - 1, -1, -1):
        size = row_tokens(rows[index])
        if kept + size > keep_budget and cut < len(rows):
            break
        kept += size
        cut = index
    # Keep a tool call with its results: never start the kept part on a tool result.
    while 0 < cut < len(rows) and rows[cut].role == "tool":
        cut -= 1
    # And an answer with the question right before it (the kept part opening with an
    # assistant turn answers nothing the model can see).
    if 0 < cut < len(rows) and rows[cut].role == "assistant" and rows[cut - 1].role == "user":
        cut -= 1
    return cut


#: Summary calls one compaction makes at most; past it the oldest entries are left out
#: (named in the request) rather than a turn spending hundreds of calls on a huge backlog.
MAX_SUMMARY_CHUNKS = 8


def summary_chunks(rows: Sequence[EntryRow], budget: int) -> tuple[list[tuple[EntryRow, ...]], int]:
    """The entries to summarise in parts of at most ``budget`` tokens each (a part holds one
    entry at least), oldest first, so that no summary request outgrows the window the session
    assumes its model has (a session that built up more than that, e.g. under a larger
    window before, was one request several windows long: refused by a real model, every run of
    the session failing on it). At most `MAX_SUMMARY_CHUNKS` parts, the newest; the number of
    entries left out before them is returned too."""
    chunks: list[list[EntryRow]] = [[]]
    size = 0
    for row in rows:
        tokens = row_tokens(row)
        if chunks[-1] and size + tokens > budget:
            chunks.append([])
            size = 0
        chunks[-1].append(row)
        size += tokens
    kept = chunks[-MAX_SUMMARY_CHUNKS:]
    omitted = sum(len(chunk) for chunk in chunks[: len(chunks) - len(kept)])
    return [tuple(chunk) for chunk in kept], omitted


def summary_messages(
    previous_summary: str | None, rows: Sequence[EntryRow], *, omitted: int = 0
) -> list[dict[str, str]]:
    """The summariser's request: instructions, then the earlier summary and the entries."""
    parts: list[str] = []
    if previous_summary:
        parts.append(f"Summary so far:\n{previous_summary}")
    if omitted:
        parts.append(f"({omitted} earlier entries are left out: too many to summarise.)")
    for row in rows:
        parts.append(_transcript_line(row))
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _transcript_line(row: EntryRow) -> str:
    if row.role == "tool":
        return f"tool {row.tool_name or ''} result: {row.content}"
    if row.tool_calls:
        calls = ", ".join(
            f"{call['function']['name']}({call['function']['arguments']})"
            for call in row.tool_calls
        )
        return f"{row.role}: {row.content}\n(called {calls})".strip()
    labels = stored_part_labels(row.meta)
    if labels:  # the summariser sees text only: it is told what was attached
        return f"{row.role}: {row.content}\n(attached: {', '.join(labels)})"
    return f"{row.role}: {row.content}"


def with_dropped_attachments(summary: str, rows: Sequence[EntryRow]) -> str:
    """``summary``, naming the images and files of the summarised ``rows``: they leave the
    context with their messages, and the model is told they were there (by reference)."""
    labels = [label for row in rows for label in stored_part_labels(row.meta)]
    if not labels:
        return summary
    return f"{summary}\n\nAttachments of the summarised messages (no longer shown): " + (
        ", ".join(labels)
    )


def summary_message(summary: str) -> dict[str, str]:
    """How a summary enters the model's context (right after the system prompt)."""
    return {"role": "system", "content": f"Summary of the earlier conversation:\n{summary}"}
