"""Deterministic orchestration: every agent run is one `AgentRunWorkflow` (no I/O here)."""

from workflows.agent_run import AgentRunWorkflow

__all__ = ["AgentRunWorkflow"]
