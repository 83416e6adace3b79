"""`load_tool`: a tool named by configuration as ``"package.module:attribute"``."""

from __future__ import annotations

import importlib
import types
from typing import Any

from otherone.tools.errors import ToolDefinitionError
from otherone.tools.registry import _as_spec
from otherone.tools.spec import ToolSpec


def load_tool(reference: str) -> ToolSpec:
    """Import a tool from ``"package.module:attribute"`` (attribute may be dotted).

    This is how configuration names tools, so every failure says which reference was wrong.
    """
    module_name, attribute = _split_reference(reference)
    target = _resolve_attribute(reference, _import_module(reference, module_name), attribute)
    if isinstance(target, ToolSpec):
        return target
    if not callable(target):
        raise ToolDefinitionError(
            f"tool reference {reference!r}: {type(target).__name__} object is not callable"
        )
    try:
        return _as_spec(target)
    except ToolDefinitionError as exc:
        raise ToolDefinitionError(f"tool reference {reference!r}: {exc.message}") from exc


def _split_reference(reference: str) -> tuple[str, str]:
    """Check the ``module:attribute`` shape before importing anything."""
    module_name, separator, attribute = (
        reference.partition(":") if isinstance(reference, str) else ("", "", "")
    )
    if not separator or not module_name.strip() or not attribute.strip() or ":" in attribute:
        raise ToolDefinitionError(
            f"tool reference {reference!r}: expected the form 'package.module:attribute'"
        )
    return module_name.strip(), attribute.strip()


def _import_module(reference: str, module_name: str) -> types.ModuleType:
    """Import the module, reporting a missing or broken one against the reference."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ToolDefinitionError(f"tool reference {reference!r}: {exc}") from exc
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool reference {reference!r}: importing {module_name!r} failed: {exc!r}"
        ) from exc
    except SystemExit as exc:  # a module that exits on import: the process ended silently
        raise ToolDefinitionError(
            f"tool reference {reference!r}: importing {module_name!r} called exit({exc.code!r})"
        ) from None


def _resolve_attribute(reference: str, module: types.ModuleType, attribute: str) -> Any:
    """Follow a possibly dotted attribute path inside the module."""
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ToolDefinitionError(
                f"tool reference {reference!r}: {module.__name__!r} has no attribute {attribute!r}"
            ) from None
    return target
