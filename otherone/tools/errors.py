"""How a tool fails: a call's classified failure (`ToolError`) or a wrong declaration."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from otherone.errors import ConfigurationError


class ToolErrorKind(StrEnum):
    """How a tool call failed; decides whether the model sees the error or the run ends."""

    RECOVERABLE = "recoverable"
    INVALID_ARGUMENTS = "invalid_arguments"
    PERMISSION_DENIED = "permission_denied"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    FATAL = "fatal"


class ToolError(Exception):
    """Raised by a tool to report a classified failure (goes back to the model unless FATAL).

    Any *other* exception escaping a tool is treated as unexpected and retried by Temporal (up to
    the tool's ``max_attempts``), so raise ``ToolError`` for failures that retrying cannot fix.
    """

    def __init__(self, message: str, kind: ToolErrorKind = ToolErrorKind.RECOVERABLE) -> None:
        super().__init__(message)
        self.message = message
        self.kind = ToolErrorKind(kind)

    def __reduce__(self) -> tuple[Any, ...]:
        """Keep ``kind`` across pickling (the default would rebuild from ``args`` only)."""
        return (type(self), (self.message, self.kind))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, kind={self.kind.value!r})"

    @classmethod
    def recoverable(cls, message: str) -> ToolError:
        """A failure the model may work around (try other input, another tool, or give up)."""
        return cls(message, ToolErrorKind.RECOVERABLE)

    @classmethod
    def invalid_arguments(cls, message: str) -> ToolError:
        """The arguments were well-typed but unacceptable; the model should fix and retry."""
        return cls(message, ToolErrorKind.INVALID_ARGUMENTS)

    @classmethod
    def permission_denied(cls, message: str) -> ToolError:
        """The caller may not do this; the model is told so instead of the run crashing."""
        return cls(message, ToolErrorKind.PERMISSION_DENIED)

    @classmethod
    def timed_out(cls, message: str) -> ToolError:
        """The tool gave up waiting on something it depends on."""
        return cls(message, ToolErrorKind.TIMED_OUT)

    @classmethod
    def cancelled(cls, message: str) -> ToolError:
        """The work was cancelled on purpose (not by the run's own cancellation)."""
        return cls(message, ToolErrorKind.CANCELLED)

    @classmethod
    def fatal(cls, message: str) -> ToolError:
        """Continuing the run makes no sense; it ends with failure code ``tool_error``."""
        return cls(message, ToolErrorKind.FATAL)


class ToolDefinitionError(ConfigurationError, ValueError):
    """A tool is declared wrongly; the message names the tool and, when relevant, the parameter.

    A ``ConfigurationError`` so worker start-up reports it like any other bad declaration, and a
    ``ValueError`` for callers that only know the standard library.
    """
