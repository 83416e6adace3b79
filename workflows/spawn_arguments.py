"""The arguments of the spawn tools (`agent.await`, `agent.status`, `agent.cancel`), checked
before anything runs: a malformed one goes back to the model as `invalid_arguments`, never
reaches the workflow's timers (`otherone.workflows.spawns` runs the tools).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The strict sandbox re-imports this with this module and checks it for non-deterministic calls.
from otherone.workflows.agent_calls import tool_arguments

#: The longest `agent.await` timeout the tool accepts (a year; the run's deadline caps it too).
MAX_AWAIT_SECONDS = 365 * 24 * 3600
#: The most handles one `agent.await` may name.
MAX_AWAIT_HANDLES = 256
#: How much of a model-written handle an error message repeats.
_HANDLE_SHOWN = 80


class SpawnArgumentsError(ValueError):
    """Malformed arguments of a spawn tool (goes back to the model as invalid_arguments)."""


@dataclass(frozen=True)
class AwaitRequest:
    """`agent.await`: which handles (None: every one not reported yet), for how long at most."""

    handles: tuple[str, ...] | None
    timeout_seconds: float | None


def _object(arguments: str, allowed: set[str]) -> dict[str, object]:
    return tool_arguments(arguments, allowed, SpawnArgumentsError)


def parse_await(arguments: str) -> AwaitRequest:
    """Handles (each once, in the order given) and a finite timeout: anything else is the
    model's error to read, never a value that reaches the workflow's timers (an infinite or
    huge timeout fails the workflow task with OverflowError)."""
    raw = _object(arguments, {"handles", "timeout_seconds"})
    handles = raw.get("handles")
    if handles is not None and (
        not isinstance(handles, list)
        or not handles
        or not all(isinstance(handle, str) for handle in handles)
    ):
        raise SpawnArgumentsError("handles: must be a non-empty list of handle strings")
    if handles is not None and len(handles) > MAX_AWAIT_HANDLES:
        raise SpawnArgumentsError(f"handles: at most {MAX_AWAIT_HANDLES} handles")
    timeout = raw.get("timeout_seconds")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 <= timeout <= MAX_AWAIT_SECONDS
    ):
        raise SpawnArgumentsError(
            f"timeout_seconds: must be a number from 0 to {MAX_AWAIT_SECONDS}"
        )
    return AwaitRequest(
        # A handle named twice is awaited, and reported, once.
        handles=tuple(dict.fromkeys(handles)) if handles is not None else None,
        timeout_seconds=float(timeout) if timeout is not None else None,
    )


def parse_handle(arguments: str) -> str:
    handle = _object(arguments, {"handle"}).get("handle")
    if not isinstance(handle, str) or not handle:
        raise SpawnArgumentsError("handle: a handle string returned by agent.spawn is required")
    return handle


def unknown_handle(handle: str) -> SpawnArgumentsError:
    """The error for a handle this run did not spawn (a long one shortened)."""
    shown = handle if len(handle) <= _HANDLE_SHOWN else f"{handle[:_HANDLE_SHOWN]}…"
    return SpawnArgumentsError(f"unknown handle '{shown}' (not spawned by this run)")
