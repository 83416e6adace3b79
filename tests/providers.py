"""Test seams for the model provider: record requests, hold turns until the test releases them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from otherone.activities.providers.base import ModelRequest, StreamEvent
from otherone.activities.providers.scripted import ScriptedProvider


@dataclass
class RecordingProvider:
    """Plays the scripted turns, records every request, and can hold a turn at a gate.

    ``hold[(agent_id, turn)]`` is an event the turn waits for before answering, so a test can
    act (signal, cancel) while the model is "thinking" without any sleep.
    """

    hold: dict[tuple[str, int], asyncio.Event] = field(default_factory=dict)
    requests: list[ModelRequest] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    inner: ScriptedProvider = field(default_factory=ScriptedProvider)

    def gate(self, agent_id: str, turn: int) -> asyncio.Event:
        return self.hold.setdefault((agent_id, turn), asyncio.Event())

    def calls(self, agent_id: str | None = None) -> list[ModelRequest]:
        return [r for r in self.requests if agent_id is None or r.agent_id == agent_id]

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        self.started.set()
        gate = self.hold.get((request.agent_id, request.turn))
        if gate is not None:
            await gate.wait()
        async for event in self.inner.stream(request):
            yield event
