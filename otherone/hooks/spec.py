"""What a hook is: a function over the view of one call at one stage, answering the view it
may have rewritten (or raising `HookRefusal`). Hooks run inside the activities that make the
calls (model call, tool call), so they may do I/O without touching workflow determinism."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ConfigDict, JsonValue

from otherone.errors import ConfigurationError
from otherone.guardrail_policy import GUARDRAIL_NAME_PATTERN


class HookDefinitionError(ConfigurationError, ValueError):
    """A hook is declared wrongly, or named where none is registered."""


class HookRefusal(Exception):
    """Raised by a hook to refuse the call (a model call fails the run; a tool call turns into
    a refusal the model sees)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        #: The hook that refused (set by `run_stage`).
        self.hook: str | None = None


class HookFailed(Exception):
    """A hook raised or returned the wrong type (the message names it and its stage)."""


class ModelCallView(BaseModel):
    """A model request as a ``before_model_call`` hook sees it (neutral, OpenAI-like
    messages). Rewrite ``messages`` / ``tools`` to change what goes to the provider (the
    stored transcript is not changed); ``metadata`` is shown in the `model_started` event."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    agent_id: str
    turn: int
    attempt: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    metadata: dict[str, JsonValue] = {}


class ToolCallView(BaseModel):
    """A tool call as ``before_tool_call`` / ``after_tool_call`` hooks see it. Before: rewrite
    ``arguments`` (JSON text). After: ``result`` is the result's JSON text, rewrite it to
    change what is stored and what the model sees."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    agent_id: str
    tool_name: str
    tool_call_id: str
    arguments: str
    result: str | None = None


class ModelAnswerView(BaseModel):
    """A model's answer as an ``after_model_call`` hook sees it (audit: changes to the answer
    are not taken; ``metadata`` is shown in the `model_completed` event)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    agent_id: str
    turn: int
    attempt: int
    text: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None = None
    metadata: dict[str, JsonValue] = {}


class RunView(BaseModel):
    """A run as ``on_run_start`` / ``on_run_end`` hooks see it (``status``, ``failure`` and
    ``usage`` at its end)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    root_run_id: str
    parent_run_id: str | None
    agent_id: str
    depth: int
    partition_key: str
    metadata: dict[str, JsonValue] = {}
    status: str | None = None
    failure: dict[str, JsonValue] | None = None
    usage: dict[str, JsonValue] | None = None


View = TypeVar("View", ModelCallView, ToolCallView, ModelAnswerView, RunView)

_NAME = re.compile(GUARDRAIL_NAME_PATTERN)


@dataclass(frozen=True, eq=False)
class HookSpec:
    """One registered hook."""

    name: str
    function: Callable[[Any], Any]
    is_async: bool

    async def apply(self, stage: str, view: View) -> View:
        """Run the hook on ``view``; `HookRefusal` propagates, anything else it raises or a
        result of another type is a `HookFailed` naming it."""
        try:
            if self.is_async:
                result = await self.function(view.model_copy(deep=True))
            else:
                result = await asyncio.to_thread(self.function, view.model_copy(deep=True))
            if inspect.isawaitable(result):
                result = await result
        except HookRefusal:
            raise
        except Exception as error:
            raise HookFailed(
                f"hook '{self.name}' ({stage}) raised {type(error).__name__}: {error}"
            ) from None
        if not isinstance(result, type(view)):
            raise HookFailed(
                f"hook '{self.name}' ({stage}) returned {type(result).__name__}, not a "
                f"{type(view).__name__} (return the view, changed or not)"
            )
        return result


@overload
def hook(func: Callable[..., Any], /, *, name: str | None = None) -> HookSpec: ...


@overload
def hook(
    func: None = None, /, *, name: str | None = None
) -> Callable[[Callable[..., Any]], HookSpec]: ...


def hook(
    func: Callable[..., Any] | None = None, /, *, name: str | None = None
) -> HookSpec | Callable[[Callable[..., Any]], HookSpec]:
    """Make a hook of ``def h(view) -> view`` (sync or async): ``@hook`` or ``@hook(name=...)``."""

    def decorate(function: Callable[..., Any]) -> HookSpec:
        if isinstance(function, HookSpec):
            return function
        label = name if name is not None else getattr(function, "__name__", None)
        if not isinstance(label, str) or not _NAME.fullmatch(label):
            raise HookDefinitionError(
                f"hook {label!r}: invalid name, must match {GUARDRAIL_NAME_PATTERN}"
            )
        if not callable(function):
            raise HookDefinitionError(f"hook {label!r}: not callable")
        try:
            inspect.signature(function).bind(object())
        except (TypeError, ValueError):
            raise HookDefinitionError(
                f"hook {label!r}: must take one argument, the call's view"
            ) from None
        is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            getattr(function, "__call__", None)  # noqa: B004
        )
        return HookSpec(name=label, function=function, is_async=is_async)

    return decorate if func is None else decorate(func)
