"""What a tool's signature says: the model-facing parameters and the injected context."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Annotated, Any, Union, get_args, get_origin

from otherone.tools.context import ToolContext
from otherone.tools.errors import ToolDefinitionError


def _signature(name: str, function: Callable[..., Any]) -> inspect.Signature:
    """The signature with string annotations evaluated (``from __future__ import annotations``)."""
    try:
        return inspect.signature(function, eval_str=True)
    except Exception as exc:
        raise ToolDefinitionError(f"tool {name!r}: cannot read its signature: {exc}") from exc


def _tool_parameters(name: str, function: Callable[..., Any]) -> list[inspect.Parameter]:
    """The model-facing parameters: every parameter except the injected ``ToolContext``."""
    parameters = []
    for parameter in _signature(name, function).parameters.values():
        _check_parameter(name, parameter)
        if not _is_context_annotation(parameter.annotation):
            parameters.append(parameter)
    return parameters


def _check_parameter(name: str, parameter: inspect.Parameter) -> None:
    """Only named, annotated parameters can be described to a model and passed by keyword."""
    where = f"tool {name!r}: parameter {parameter.name!r}"
    if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
        raise ToolDefinitionError(f"{where}: *args/**kwargs cannot be described as JSON schema")
    if parameter.kind is parameter.POSITIONAL_ONLY:
        raise ToolDefinitionError(f"{where}: positional-only parameters are not supported")
    if parameter.annotation is parameter.empty:
        raise ToolDefinitionError(f"{where}: missing type annotation")


def _context_parameter(name: str, function: Callable[..., Any]) -> str | None:
    """The name of the parameter annotated ``ToolContext`` (any name), if there is one."""
    found = [
        parameter.name
        for parameter in _signature(name, function).parameters.values()
        if _is_context_annotation(parameter.annotation)
    ]
    if len(found) > 1:
        raise ToolDefinitionError(f"tool {name!r}: more than one ToolContext parameter: {found}")
    return found[0] if found else None


def _is_context_annotation(annotation: Any) -> bool:
    """``ToolContext``, ``ToolContext | None`` or an ``Annotated`` form of either."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_context_annotation(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return len(members) == 1 and _is_context_annotation(members[0])
    return isinstance(annotation, type) and issubclass(annotation, ToolContext)
