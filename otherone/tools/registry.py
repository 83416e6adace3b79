"""`ToolRegistry`: the user tools a worker can run, by name."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from otherone.tools.decorator import tool
from otherone.tools.errors import ToolDefinitionError
from otherone.tools.spec import RESERVED_TOOL_NAMES, ToolSpec


def _as_spec(candidate: ToolSpec | Callable[..., Any]) -> ToolSpec:
    """Registries accept ready specs and plain functions alike."""
    return candidate if isinstance(candidate, ToolSpec) else tool(candidate)


class ToolRegistry:
    """The user tools a worker can run, by name. Built-in (reserved) names are never accepted."""

    def __init__(self, tools: Iterable[ToolSpec | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, ToolSpec] = {}
        for candidate in tools:
            self.register(candidate)

    def register(self, tool: ToolSpec | Callable[..., Any]) -> ToolSpec:
        """Add a tool; a duplicate or reserved name is a configuration error, not an override."""
        spec = _as_spec(tool)
        if spec.name in RESERVED_TOOL_NAMES:
            raise ToolDefinitionError(
                f"tool {spec.name!r}: the name is reserved for a built-in tool"
            )
        if spec.name in self._tools:
            raise ToolDefinitionError(f"tool {spec.name!r}: a tool with this name is registered")
        self._tools[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec | None:
        """The tool with this name, or ``None`` (the caller then answers: permission denied)."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """All registered names, sorted, so snapshots and prompts are deterministic."""
        return sorted(self._tools)

    def definitions(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Model-facing definitions in sorted name order (all, or the given names).

        Unknown names raise ``KeyError``: filtering by policy is the caller's job, and silently
        dropping a tool would hide a configuration mistake.
        """
        selected = self.names() if names is None else sorted(set(names))
        unknown = [name for name in selected if name not in self._tools]
        if unknown:
            raise KeyError(f"unknown tools: {', '.join(unknown)}")
        return [self._tools[name].definition() for name in selected]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter([self._tools[name] for name in self.names()])
