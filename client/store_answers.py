"""Store calls made for a client waiting on them (the HTTP API, `AgentClient`), in a thread and
for a bounded time.

A database that stops answering without closing its connections (a frozen server, a stalled
disk; TCP keeps such a connection open, so no driver timeout fires) held an API request for as
long as that lasted: 170 s and counting in a test. Such a call now raises `TimeoutError`, an
outage (`is_outage`: the API's 503 ``unavailable``, streams wait and read again); its thread
stays with the call until the database answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds a store call made for a waiting client may take.
STORE_ANSWER_SECONDS = 30.0


async def answered(call: Callable[..., T], /, *args: object, **kwargs: object) -> T:
    """``call(*args, **kwargs)`` in a thread, answered within `STORE_ANSWER_SECONDS`."""
    limit = STORE_ANSWER_SECONDS
    try:
        return await asyncio.wait_for(asyncio.to_thread(call, *args, **kwargs), limit)
    except TimeoutError:
        raise TimeoutError(f"the store did not answer within {limit:g}s") from None
