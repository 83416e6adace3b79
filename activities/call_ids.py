"""Tool call ids: one per call of a turn, and made up only where the provider gave none.

Much is keyed by a tool call's id within its run: a tool's idempotency key, the memory point a
`memory.store` call writes, an `agent.call` child's workflow id, the transcript's tool result,
the events that pair a call's start with its end. A call id the provider repeats in a later
turn is the same call (the seed's rule: one child, one side effect). Two calls of one turn
with one id are two calls, though (providers number a turn's calls by their index): the later
ones get fresh ids before the turn is stored, or one would be answered for both.
"""

from __future__ import annotations

import secrets

from otherone.contracts import ToolCallSpec

#: Characters of the provider's id kept in a fresh one (providers cap ids: OpenAI at 40).
_KEPT = 28


def made_up_call_id() -> str:
    """An id for a call the provider sent without one: unique in the run and the session (it
    was ``call_<position>``, so every turn's first call had the same id and was taken for the
    first turn's call: its tool skipped as done, its child's old result returned)."""
    return f"call_{secrets.token_hex(12)}"


def with_distinct_call_ids(calls: tuple[ToolCallSpec, ...]) -> tuple[ToolCallSpec, ...]:
    """``calls`` (one turn's) with each call whose id an earlier call has given a fresh one
    (the provider's id and a random suffix)."""
    seen: set[str] = set()
    distinct: list[ToolCallSpec] = []
    for call in calls:
        if call.id in seen:
            call = call.model_copy(update={"id": _fresh(call.id, seen)})
        seen.add(call.id)
        distinct.append(call)
    return tuple(distinct)


def _fresh(call_id: str, seen: set[str]) -> str:
    while True:
        fresh = f"{call_id[:_KEPT]}_{secrets.token_hex(4)}"
        if fresh not in seen:
            return fresh
