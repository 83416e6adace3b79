"""Deterministic orchestration: every agent run is one `AgentRunWorkflow` (no I/O here); a
root's completion webhook is delivered by a `WebhookDeliveryWorkflow` it starts as it ends."""

from otherone.workflows.agent_run import AgentRunWorkflow
from otherone.workflows.webhook_delivery import WebhookDeliveryWorkflow

#: Every workflow a worker registers.
ALL_WORKFLOWS: tuple[type, ...] = (AgentRunWorkflow, WebhookDeliveryWorkflow)

__all__ = ["ALL_WORKFLOWS", "AgentRunWorkflow", "WebhookDeliveryWorkflow"]
