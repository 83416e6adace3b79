"""The `guardrail` decorator: check one function and describe it as a `GuardrailSpec`."""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from typing import Any, overload

from otherone.guardrail_policy import GUARDRAIL_NAME_PATTERN
from otherone.guardrails.spec import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TIMEOUT_SECONDS,
    GuardrailDefinitionError,
    GuardrailSpec,
)

_NAME = re.compile(GUARDRAIL_NAME_PATTERN)


@overload
def guardrail(
    func: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> GuardrailSpec: ...


@overload
def guardrail(
    func: None = None,
    /,
    *,
    name: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> Callable[[Callable[..., Any]], GuardrailSpec]: ...


def guardrail(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> GuardrailSpec | Callable[[Callable[..., Any]], GuardrailSpec]:
    """Turn ``def check(check: GuardrailCheck) -> GuardrailResult`` (sync or async) into a
    guardrail; usable as ``@guardrail`` or ``@guardrail(name=..., timeout_seconds=...)``.

    Each call runs as an activity: ``timeout_seconds`` per attempt, ``max_attempts`` attempts
    when it raises; then the run fails with ``guardrail_failed``.
    """

    def decorate(function: Callable[..., Any]) -> GuardrailSpec:
        return make_spec(function, name, timeout_seconds, max_attempts)

    return decorate if func is None else decorate(func)


def make_spec(
    function: Callable[..., Any], name: str | None, timeout_seconds: float, max_attempts: int
) -> GuardrailSpec:
    if isinstance(function, GuardrailSpec):
        return function
    if not callable(function):
        raise GuardrailDefinitionError(f"guardrail {name or function!r}: not callable")
    label = name if name is not None else getattr(function, "__name__", None)
    if not isinstance(label, str) or not _NAME.fullmatch(label):
        raise GuardrailDefinitionError(
            f"guardrail {label!r}: invalid name, must match {GUARDRAIL_NAME_PATTERN}"
        )
    _check_signature(label, function)
    if not (isinstance(timeout_seconds, int | float) and 0 < timeout_seconds < math.inf):
        raise GuardrailDefinitionError(f"guardrail {label!r}: timeout_seconds must be > 0")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise GuardrailDefinitionError(f"guardrail {label!r}: max_attempts must be an int >= 1")
    return GuardrailSpec(
        name=label,
        function=function,
        is_async=_is_async(function),
        timeout_seconds=float(timeout_seconds),
        max_attempts=max_attempts,
    )


def _check_signature(name: str, function: Callable[..., Any]) -> None:
    """One positional parameter (the `GuardrailCheck`), found now rather than at a run."""
    try:
        signature = inspect.signature(function)
        signature.bind(object())
    except (TypeError, ValueError):
        raise GuardrailDefinitionError(
            f"guardrail {name!r}: must take one argument, the GuardrailCheck"
        ) from None


def _is_async(function: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(function):
        return True
    return inspect.iscoroutinefunction(getattr(function, "__call__", None))  # noqa: B004
