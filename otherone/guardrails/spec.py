"""What a guardrail is: a function over one `GuardrailCheck` that answers a `GuardrailResult`.

A guardrail runs in an activity on a worker (never in workflow code), so it may do I/O (call a
classifier, ask a small agent); the run's workflow only sees its verdict.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue

from otherone.errors import ConfigurationError

#: Where a guardrail checks: the run's input (user messages), its final answer, a tool call.
GuardrailKind = Literal["input", "output", "tool", "tool_result"]

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_ATTEMPTS = 3


class GuardrailDefinitionError(ConfigurationError, ValueError):
    """A guardrail is declared wrongly (at registration), or named where none is registered."""


class GuardrailResult(BaseModel):
    """A guardrail's verdict: passed, or tripped with a reason (and optional data)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tripped: bool = False
    reason: str = ""
    data: JsonValue = None

    @classmethod
    def passed(cls) -> GuardrailResult:
        return cls()

    @classmethod
    def trip(cls, reason: str, data: JsonValue = None) -> GuardrailResult:
        return cls(tripped=True, reason=reason, data=data)


class GuardrailCheck(BaseModel):
    """What one guardrail call checks.

    ``input``: ``text`` holds the user messages the run takes now (one per line). ``output``:
    ``text`` is the final answer's text and ``output`` its value (JSON under a result
    contract). ``tool``: ``tool_name`` and ``arguments`` (as the model sent them; ``text`` is
    their JSON). ``tool_result``: the same, with ``text`` the tool's result (JSON text).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: GuardrailKind
    run_id: str
    agent_id: str
    turn: int
    #: The run's tenant (an agent-backed guardrail runs its judge there).
    partition_key: str = "local"
    text: str = ""
    output: JsonValue = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    arguments: dict[str, JsonValue] | None = None


@dataclass(frozen=True, eq=False)
class GuardrailSpec:
    """One registered guardrail: its name, function and limits (per call: an activity)."""

    name: str
    function: Callable[[GuardrailCheck], Any]
    is_async: bool
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    max_attempts: int = DEFAULT_MAX_ATTEMPTS

    def __call__(self, check: GuardrailCheck) -> Any:
        return self.function(check)

    async def evaluate(self, check: GuardrailCheck) -> GuardrailResult:
        """Run the function (a sync one in a thread) and insist on a `GuardrailResult`.

        Raises `GuardrailResultError` naming the guardrail when it returns anything else;
        what the function raises propagates (the activity retries it)."""
        if self.is_async:
            result = await self.function(check)
        else:
            result = await asyncio.to_thread(self.function, check)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, GuardrailResult):
            raise GuardrailResultError(
                f"guardrail {self.name!r} returned {type(result).__name__}, not a "
                "GuardrailResult (return GuardrailResult.passed() or GuardrailResult.trip(...))"
            )
        return result


class GuardrailResultError(TypeError):
    """A guardrail returned something other than a `GuardrailResult` (not retried)."""
