"""Starting, following, messaging, cancelling and inspecting runs; the `otherone` CLI."""

from otherone.client.agent_client import AgentClient, RunHandle, build_request, root_run_id

__all__ = ["AgentClient", "RunHandle", "build_request", "root_run_id"]
