"""Tool names on the wire: ours (``agent.call``, ``mcp.github.search``) as providers accept them.

OpenAI, Anthropic and the OpenAI-compatible servers only accept function names matching
``^[a-zA-Z0-9_-]{1,64}$``; ours may contain dots. The encoding:

* a name that is already acceptable is sent unchanged (``get_weather`` stays ``get_weather``);
* every ``.`` becomes ``__`` (``agent.call`` → ``agent__call``; the form models know from MCP
  tool names), any other unacceptable character becomes ``_``;
* a result longer than 64 characters keeps its first 55 and gets ``_`` plus 8 hex digits of
  the SHA-256 of the original name.

Decoding uses the table of the names offered in the request (`WireNames`), so it is exact: the
encoding is only required to be injective on the configured names, and `check_wire_names` makes
that a configuration error when it is not (``a.b`` next to ``a__b``). A name the model invents
that is not in the table comes back unchanged, and the run answers it as an unknown tool.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from otherone.errors import ConfigurationError
from otherone.tools import RESERVED_TOOL_NAMES

WIRE_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
MAX_WIRE_NAME = 64
_HASHED_PREFIX = 55

_WIRE_NAME = re.compile(WIRE_NAME_PATTERN)
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")


def encode_tool_name(name: str) -> str:
    """The provider-safe form of ``name`` (unchanged when it is already safe)."""
    if _WIRE_NAME.match(name):
        return name
    wire = _NOT_ALLOWED.sub("_", name.replace(".", "__")) or "_"
    if len(wire) > MAX_WIRE_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        wire = f"{wire[:_HASHED_PREFIX]}_{digest}"
    return wire


class WireNames:
    """The two-way table of one request's tool names."""

    def __init__(self, names: Iterable[str]) -> None:
        self._to_wire = {name: encode_tool_name(name) for name in names}
        self._from_wire = {wire: name for name, wire in self._to_wire.items()}

    def encode(self, name: str) -> str:
        return self._to_wire.get(name) or encode_tool_name(name)

    def decode(self, wire: str) -> str:
        """Our name for a wire name; an unknown one (a hallucination) is returned unchanged."""
        return self._from_wire.get(wire, wire)


def find_wire_name_collision(names: Iterable[str]) -> tuple[str, str, str] | None:
    """Two names that encode alike, and their wire name; None when the encoding is injective."""
    seen: dict[str, str] = {}
    for name in sorted(set(names)):
        wire = encode_tool_name(name)
        if wire in seen:
            return seen[wire], name, wire
        seen[wire] = name
    return None


def check_wire_names(names: Iterable[str], *, source: str | None = None) -> None:
    """Raise ConfigurationError when two tool names (with the built-ins) share a wire name."""
    collision = find_wire_name_collision([*names, *RESERVED_TOOL_NAMES])
    if collision is not None:
        first, second, wire = collision
        raise ConfigurationError(
            f"tool names '{first}' and '{second}' are both sent to model providers as "
            f"'{wire}'; rename one of them",
            file=source,
            table="runtime",
            field="tools",
        )


__all__ = [
    "WIRE_NAME_PATTERN",
    "WireNames",
    "check_wire_names",
    "encode_tool_name",
    "find_wire_name_collision",
]
