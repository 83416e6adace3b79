"""The tool layer: plain Python callables exposed to models as JSON-schema described functions.

A user tool is an ordinary function, sync or async, decorated with :func:`tool`. The decorator
derives the model-facing JSON schema from the type hints (and the docstring), so the schema can
never drift from the code that runs. The same pydantic model that produced the schema validates
the model's arguments, so "what the model was told" and "what is accepted" are one thing.

Tools run inside Temporal activities (not here). This package therefore does no I/O at import time,
and everything it hands back across the activity boundary is plain JSON data: activity results
travel through Temporal's payload converter, and a value that cannot be serialised there would fail
in a far less readable place.

Errors are split in two on purpose:

* :class:`ToolDefinitionError` — the tool itself is declared wrongly. Raised when the tool is
  defined or registered (worker start-up), never while a run is going, and it is a
  :class:`~otherone.errors.ConfigurationError` so start-up reports it like any other bad config.
* :class:`ToolError` — a classified failure of one call. Every kind except ``fatal`` is returned
  to the model as the tool result so it can correct itself; ``fatal`` ends the run.

The package's modules follow that path: `decorator` (`tool`) reads a function's `signature` and
`docstrings`, builds its arguments model and JSON `schema`, and returns a `spec` (`ToolSpec`);
`calls` parses and validates one call's arguments and turns its result into JSON; `context`
(`ToolContext`) is what a tool may know about its call; `errors` classifies failures; `registry`
(`ToolRegistry`) holds a worker's tools and `loading` (`load_tool`) imports one by reference.
Import the names from here (`from otherone.tools import tool`).
"""

from __future__ import annotations

from otherone.tools.calls import parse_arguments as parse_arguments
from otherone.tools.context import ToolContext
from otherone.tools.decorator import tool
from otherone.tools.errors import ToolDefinitionError, ToolError, ToolErrorKind
from otherone.tools.loading import load_tool
from otherone.tools.registry import ToolRegistry
from otherone.tools.spec import DEFAULT_MAX_ATTEMPTS as DEFAULT_MAX_ATTEMPTS
from otherone.tools.spec import DEFAULT_TIMEOUT_SECONDS as DEFAULT_TIMEOUT_SECONDS
from otherone.tools.spec import RESERVED_TOOL_NAMES, TOOL_NAME_PATTERN, Approval, ToolSpec

__all__ = [
    "RESERVED_TOOL_NAMES",
    "TOOL_NAME_PATTERN",
    "Approval",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolErrorKind",
    "ToolRegistry",
    "ToolSpec",
    "load_tool",
    "tool",
]
