"""The `tool` decorator: inspect, check and describe one function as a `ToolSpec`."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

from otherone.tools.docstrings import _docstring_arguments, _first_paragraph
from otherone.tools.errors import ToolDefinitionError
from otherone.tools.schema import _build_arguments_model, _parameters_schema
from otherone.tools.signature import _context_parameter, _tool_parameters
from otherone.tools.spec import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TIMEOUT_SECONDS,
    RESERVED_TOOL_NAMES,
    TOOL_NAME_PATTERN,
    Approval,
    ToolSpec,
)

_TOOL_NAME_RE = re.compile(TOOL_NAME_PATTERN)


@overload
def tool(
    func: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    allow_reserved: bool = False,
    approval: Approval = "never",
    approval_timeout_seconds: float | None = None,
    approval_on_timeout: Literal["deny", "fail"] = "deny",
    guardrails: Sequence[str] = (),
) -> ToolSpec: ...


@overload
def tool(
    func: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    allow_reserved: bool = False,
    approval: Approval = "never",
    approval_timeout_seconds: float | None = None,
    approval_on_timeout: Literal["deny", "fail"] = "deny",
    guardrails: Sequence[str] = (),
) -> Callable[[Callable[..., Any]], ToolSpec]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    allow_reserved: bool = False,
    approval: Approval = "never",
    approval_timeout_seconds: float | None = None,
    approval_on_timeout: Literal["deny", "fail"] = "deny",
    guardrails: Sequence[str] = (),
) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
    """Turn a typed function into a :class:`ToolSpec`; usable as ``@tool`` or ``@tool(...)``.

    The description defaults to the docstring's first paragraph (a tool without one is rejected:
    the model would not know when to use it). Parameter descriptions come from a Google-style
    ``Args:`` section and from ``Annotated[..., Field(description=...)]``. ``allow_reserved`` is
    for the runtime's own built-in tools only.

    ``approval`` makes calls wait for a person: ``"always"``, ``"never"`` (default) or a
    predicate over the validated arguments, e.g. ``lambda args: args["amount"] > 100``. A person
    then has ``approval_timeout_seconds`` (None: the run's deadline) before the call is denied
    or the run fails (``approval_on_timeout``).

    ``guardrails`` names registered guardrails that check every call's arguments before it
    runs (after the runtime policy's and the agent's, `otherone.guardrails`).
    """

    def decorate(function: Callable[..., Any]) -> ToolSpec:
        spec = _make_spec(
            function,
            name=name,
            description=description,
            timeout_seconds=timeout_seconds,
            max_attempts=max_attempts,
            allow_reserved=allow_reserved,
        )
        _check_approval(spec.name, approval, approval_timeout_seconds, approval_on_timeout)
        return dataclasses.replace(
            spec,
            approval=approval,
            approval_timeout_seconds=approval_timeout_seconds,
            approval_on_timeout=approval_on_timeout,
            guardrails=_checked_guardrails(spec.name, guardrails),
        )

    return decorate if func is None else decorate(func)


def _make_spec(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    timeout_seconds: float,
    max_attempts: int,
    allow_reserved: bool,
) -> ToolSpec:
    """Do the work of :func:`tool`: inspect, check and describe one function."""
    if isinstance(function, ToolSpec):
        function = function.function
    if not callable(function):
        raise ToolDefinitionError(f"tool {name or function!r}: {function!r} is not callable")
    tool_name = _check_name(name if name is not None else _function_name(function), allow_reserved)
    _check_limits(tool_name, timeout_seconds, max_attempts)
    doc = inspect.getdoc(function) or ""
    parameters = _tool_parameters(tool_name, function)
    model = _build_arguments_model(tool_name, parameters, _docstring_arguments(doc))
    return ToolSpec(
        name=tool_name,
        description=_tool_description(tool_name, description, doc),
        parameters=_parameters_schema(tool_name, model),
        function=function,
        is_async=_is_async(function),
        context_parameter=_context_parameter(tool_name, function),
        timeout_seconds=float(timeout_seconds),
        max_attempts=max_attempts,
        arguments_model=model,
    )


def _check_approval(
    name: str, approval: Any, timeout_seconds: float | None, on_timeout: Any
) -> None:
    """An approval rule is "always", "never" or a callable; its timeout positive and finite."""
    if not callable(approval) and approval not in ("always", "never"):
        raise ToolDefinitionError(
            f"tool {name!r}: approval must be 'always', 'never' or a predicate over the arguments"
        )
    if timeout_seconds is not None and not (0 < timeout_seconds < float("inf")):
        raise ToolDefinitionError(f"tool {name!r}: approval_timeout_seconds must be positive")
    if on_timeout not in ("deny", "fail"):
        raise ToolDefinitionError(f"tool {name!r}: approval_on_timeout must be 'deny' or 'fail'")


def _checked_guardrails(name: str, guardrails: Sequence[str]) -> tuple[str, ...]:
    """Names, not functions: the guardrails themselves are registered on the worker."""
    if isinstance(guardrails, str) or not all(isinstance(item, str) for item in guardrails):
        raise ToolDefinitionError(f"tool {name!r}: guardrails must be a list of guardrail names")
    return tuple(guardrails)


def _function_name(function: Callable[..., Any]) -> str:
    """The default tool name; objects without ``__name__`` (partials) must be given one."""
    name = getattr(function, "__name__", None)
    if not isinstance(name, str):
        raise ToolDefinitionError(f"tool {function!r}: has no __name__; pass name=...")
    return name


def _check_name(name: str, allow_reserved: bool = False) -> str:
    """Reject names providers cannot carry and names that would shadow built-in tools."""
    if not isinstance(name, str) or not _TOOL_NAME_RE.fullmatch(name):
        raise ToolDefinitionError(f"tool {name!r}: invalid name, must match {TOOL_NAME_PATTERN}")
    if name in RESERVED_TOOL_NAMES and not allow_reserved:
        raise ToolDefinitionError(f"tool {name!r}: the name is reserved for a built-in tool")
    return name


def _check_limits(name: str, timeout_seconds: float, max_attempts: int) -> None:
    """Catch limits Temporal would reject later, when the first call is already running."""
    if not timeout_seconds > 0:
        raise ToolDefinitionError(f"tool {name!r}: timeout_seconds must be > 0")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ToolDefinitionError(f"tool {name!r}: max_attempts must be an integer >= 1")


def _is_async(function: Callable[..., Any]) -> bool:
    """Whether calling the function returns a coroutine (also for objects with async __call__)."""
    if inspect.iscoroutinefunction(function):
        return True
    return inspect.iscoroutinefunction(getattr(function, "__call__", None))  # noqa: B004


def _tool_description(name: str, explicit: str | None, doc: str) -> str:
    """The explicit description, else the docstring's first paragraph; one is required."""
    text = (explicit or "").strip() or _first_paragraph(doc)
    if not text:
        raise ToolDefinitionError(
            f"tool {name!r}: missing description; add a docstring or pass description=..."
        )
    return text
