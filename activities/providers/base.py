"""The provider seam: what every model provider (real or scripted) implements.

A provider turns a `ModelRequest` into an async stream of `StreamEvent`s and classifies its own
failures as `ProviderError(retryable=...)`. It never retries: Temporal owns retries.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from otherone.definitions import ModelProfile


@dataclass(frozen=True)
class ModelRequest:
    """One model call: messages in our neutral (OpenAI-like) shape plus generation settings."""

    profile: ModelProfile
    agent_id: str
    run_id: str
    turn: int
    attempt: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    settings: dict[str, Any] = field(default_factory=dict)
    #: "turn" for an agent's answer, "summary" for a context compaction.
    purpose: str = "turn"


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


#: Key of a neutral assistant message holding its `ReasoningBlock` blocks (providers that do not
#: take them back drop the key).
REASONING_KEY = "reasoning_blocks"
#: Key of a neutral tool message whose call failed (Anthropic marks its `tool_result` so).
TOOL_ERROR_KEY = "is_error"


@dataclass(frozen=True)
class ReasoningBlock:
    """A provider's own reasoning block, complete, to be sent back exactly as received in
    later requests (Anthropic's signed ``thinking`` and ``redacted_thinking`` blocks, which
    extended thinking with tool use requires)."""

    block: dict[str, Any]


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a tool call; pieces are merged by index, then by id."""

    index: int | None = None
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class UsageReport:
    """Tokens a provider reported (None: not said in this event; a later report wins).

    ``input_tokens`` counts every prompt token, cached or not (OpenAI's ``prompt_tokens``;
    Anthropic's three input counts added up); ``cache_read_tokens`` and ``cache_write_tokens``
    are the parts of it read from and written to the provider's prompt cache, priced apart.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


@dataclass(frozen=True)
class Finished:
    reason: str | None = None


StreamEvent = TextDelta | ThinkingDelta | ReasoningBlock | ToolCallDelta | UsageReport | Finished


class ProviderError(Exception):
    """A classified provider failure. ``retry_after`` (seconds) is honoured by Temporal."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after


class ModelProvider(Protocol):
    """Streams one model response."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]: ...
