"""Starting, following, messaging, cancelling and inspecting runs; the `otherone` CLI.

Names are imported on first use, so that the CLI (`otherone.client.cli`) starts without loading
the Temporal client for commands that do not need it (``--help``, ``sessions``, ``db``).
"""

from typing import TYPE_CHECKING

from otherone.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from otherone.client.agent_client import (
        AgentClient,
        RunHandle,
        TypedRunHandle,
        build_request,
        root_run_id,
    )
    from otherone.client.typed_results import validated_output

#: Names served lazily: name → module that defines it.
_LAZY_EXPORTS = {
    **dict.fromkeys(
        ("AgentClient", "RunHandle", "TypedRunHandle", "build_request", "root_run_id"),
        "otherone.client.agent_client",
    ),
    "validated_output": "otherone.client.typed_results",
}
__getattr__ = lazy_exports(__name__, _LAZY_EXPORTS)

__all__ = [
    "AgentClient",
    "RunHandle",
    "TypedRunHandle",
    "build_request",
    "root_run_id",
    "validated_output",
]
