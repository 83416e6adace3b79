"""Collects a provider stream into one model turn, enforcing the output limit while streaming."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from otherone.activities.call_ids import made_up_call_id, with_distinct_call_ids
from otherone.activities.providers.base import (
    Finished,
    ReasoningBlock,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageReport,
)
from otherone.contracts import ModelTurn, ToolCallSpec

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """``text`` with lone surrogates and NUL characters replaced by U+FFFD.

    A provider's JSON may carry a broken ``\\udXXX`` escape and a tool may return text decoded
    with ``surrogateescape``; Python keeps those as lone surrogates, which no UTF-8 consumer (the
    store, events, Temporal payloads) accepts, so one bad character would fail every retry.
    Valid astral characters are single code points in a Python string, never matched here.
    U+0000 cannot be stored by PostgreSQL (text or JSON), so model and tool output never
    carries it either, on every store alike.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)


class OutputLimitExceeded(Exception):
    """The streamed answer passed max_result_bytes; it is dropped, never persisted."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"model output exceeds max_result_bytes ({limit} bytes)")
        self.limit = limit


@dataclass
class _PendingCall:
    index: int | None
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class TurnCollector:
    """Accumulates deltas; ``on_text``/``on_thinking`` observe them (events), never block them."""

    limit_bytes: int
    text: list[str] = field(default_factory=list)
    calls: list[_PendingCall] = field(default_factory=list)
    size: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    finish_reason: str | None = None
    reasoning: list[dict[str, Any]] = field(default_factory=list)

    async def consume(
        self,
        stream: AsyncIterator[StreamEvent],
        on_text: Callable[[str], Awaitable[None]],
        on_thinking: Callable[[str], Awaitable[None]],
    ) -> ModelTurn:
        async for item in stream:
            match item:
                case TextDelta(text=text):
                    text = valid_unicode(text)
                    self._grow(len(text.encode()))
                    self.text.append(text)
                    await on_text(text)
                case ThinkingDelta(text=text):
                    await on_thinking(valid_unicode(text))
                case ReasoningBlock(block=block):
                    # Kept as received: a signed block that was changed would be refused.
                    self.reasoning.append(block)
                case ToolCallDelta():
                    self._grow(len(item.arguments.encode()) + len((item.name or "").encode()))
                    self._merge(item)
                case UsageReport():
                    self._count(item)
                case Finished(reason=reason):
                    self.finish_reason = reason
        return self.turn()

    def _count(self, report: UsageReport) -> None:
        """A later report's counts replace the earlier ones it gives (they are cumulative)."""
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            value = getattr(report, name)
            if value is not None:
                setattr(self, name, value)

    def _grow(self, size: int) -> None:
        self.size += size
        if self.size > self.limit_bytes:
            raise OutputLimitExceeded(self.limit_bytes)

    def _merge(self, delta: ToolCallDelta) -> None:
        """Merge into the latest call of the delta's index, or by id when the delta has no
        index (the seed's rule), else start a new call. A delta with an index of its own, or
        with another id than its index's call (Ollama sends each of a turn's calls whole, all
        at index 0), is a new call, even when its id repeats an earlier call's
        (`with_distinct_call_ids` gives it another)."""
        target = None
        if delta.index is not None:
            target = next((c for c in reversed(self.calls) if c.index == delta.index), None)
            if target is not None and delta.id and target.id and delta.id != target.id:
                target = None
        elif delta.id:
            target = next((c for c in self.calls if c.id == delta.id), None)
        if target is None:
            target = _PendingCall(index=delta.index)
            self.calls.append(target)
        target.id = valid_unicode(delta.id or target.id)
        target.name = valid_unicode(delta.name or target.name)
        target.arguments += valid_unicode(delta.arguments)

    def turn(self) -> ModelTurn:
        total = (
            self.input_tokens + self.output_tokens
            if self.input_tokens is not None and self.output_tokens is not None
            else None
        )
        calls = tuple(
            ToolCallSpec(
                id=call.id or made_up_call_id(), name=call.name, arguments=call.arguments or "{}"
            )
            for call in self.calls
        )
        return ModelTurn(
            content="".join(self.text),
            tool_calls=with_distinct_call_ids(calls),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=total,
            cache_read_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
            finish_reason=self.finish_reason,
            reasoning=tuple(self.reasoning),
        )
