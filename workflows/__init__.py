"""Deterministic orchestration: every agent run is one `AgentRunWorkflow` (no I/O here)."""

from otherone.workflows.agent_run import AgentRunWorkflow

__all__ = ["AgentRunWorkflow"]
