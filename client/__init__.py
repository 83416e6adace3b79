"""Starting, following, messaging, cancelling and inspecting runs; the `otherone` CLI.

Names are imported on first use, so that the CLI (`otherone.client.cli`) starts without loading
the Temporal client for commands that do not need it (``--help``, ``sessions``, ``db``).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otherone.client.agent_client import AgentClient, RunHandle, build_request, root_run_id

_EXPORTS = ("AgentClient", "RunHandle", "build_request", "root_run_id")


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'otherone.client' has no attribute {name!r}")
    value = getattr(importlib.import_module("otherone.client.agent_client"), name)
    globals()[name] = value
    return value


__all__ = ["AgentClient", "RunHandle", "build_request", "root_run_id"]
