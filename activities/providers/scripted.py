"""The offline, deterministic `scripted` provider: plays each agent's turns from its profile.

It goes through exactly the same activity path as real providers (streaming, limits, events,
retries), so the demo and the tests exercise the real machinery without a network.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from otherone.activities.providers.base import (
    Finished,
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageReport,
)
from otherone.definitions import ScriptedTurn


class ScriptedProvider:
    """Turn *n* of a run of agent *a* plays ``profile.script[a][n-1]``."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if request.purpose == "summary":
            async for event in _summary(request):
                yield event
            return
        turn = self._turn(request)
        if turn.fail is not None and request.attempt <= turn.fail.attempts:
            raise ProviderError(turn.fail.message, retryable=turn.fail.retryable)
        if turn.delay_seconds:
            await asyncio.sleep(turn.delay_seconds)
        if turn.thinking:
            yield ThinkingDelta(turn.thinking)
        for chunk in turn.chunks if turn.chunks is not None else (turn.text,):
            if chunk:
                yield TextDelta(chunk)
            if turn.chunk_delay_seconds:
                await asyncio.sleep(turn.chunk_delay_seconds)
        for index, call in enumerate(turn.tool_calls):
            arguments = (
                call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            )
            call_id = call.id or f"call_{request.turn}_{index}"
            yield ToolCallDelta(index=index, id=call_id, name=call.name, arguments=arguments)
        yield UsageReport(
            input_tokens=turn.input_tokens if turn.input_tokens is not None else _estimate(request),
            output_tokens=turn.output_tokens
            if turn.output_tokens is not None
            else max(1, len(turn.full_text) // 4),
        )
        yield Finished(turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop"))

    @staticmethod
    def _turn(request: ModelRequest) -> ScriptedTurn:
        turns = request.profile.script.get(request.agent_id)
        if not turns:
            raise ProviderError(
                f"scripted model '{request.profile.id}' has no script "
                f"for agent '{request.agent_id}'",
                retryable=False,
            )
        if request.turn > len(turns):
            raise ProviderError(
                f"scripted model '{request.profile.id}' has {len(turns)} turns for agent "
                f"'{request.agent_id}', turn {request.turn} was requested",
                retryable=False,
            )
        return turns[request.turn - 1]


def _estimate(request: ModelRequest) -> int:
    """Rough token count of the prompt (4 characters a token: its texts and tool calls), so
    usage is never empty. Counted, not serialised: the prompt grows with every turn, and a
    stand-in model should not cost a long run more than the runtime it stands in for."""
    size = 0
    for message in request.messages:
        size += len(str(message.get("content") or ""))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            size += len(str(function.get("name") or "")) + len(str(function.get("arguments") or ""))
    return max(1, size // 4)


async def _summary(request: ModelRequest) -> AsyncIterator[StreamEvent]:
    """A deterministic stand-in summary (compaction must work offline too)."""
    transcript = str(request.messages[-1]["content"])
    lines = [line for line in transcript.splitlines() if line.strip()]
    yield TextDelta(
        f"Summary of {len(lines)} earlier lines; the latest: {lines[-1][:200] if lines else ''}"
    )
    yield UsageReport(input_tokens=_estimate(request), output_tokens=32)
    yield Finished("stop")
