"""Wiring of a worker process: the workflow, the activities bound to config, store and providers."""

from __future__ import annotations

from collections.abc import Mapping

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.agent_activities import AgentActivities
from activities.providers.base import ModelProvider
from otherone.authorization import AgentCallAuthorizer
from otherone.config import RuntimeConfig
from store import Store
from workflows import AgentRunWorkflow

#: Our shared packages are pure (pydantic models, constants): pass them through the sandbox so
#: they are imported once per worker, not once per workflow run.
PASSTHROUGH_MODULES = ("otherone", "workflows.outcomes")


def sandbox_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


async def connect(address: str, namespace: str = "default") -> Client:
    """A client with the pydantic data converter (workers, clients and replayers must agree)."""
    return await Client.connect(
        address, namespace=namespace, data_converter=pydantic_data_converter
    )


def build_worker(
    client: Client,
    config: RuntimeConfig,
    store: Store,
    *,
    task_queue: str,
    providers: Mapping[str, ModelProvider] | None = None,
    authorizer: AgentCallAuthorizer | None = None,
    max_concurrent_activities: int = 64,
) -> Worker:
    """A worker that runs agent workflows and their activities on ``task_queue``.

    ``authorizer`` may deny agent calls (after the static checks passed).
    """
    activities = AgentActivities(config, store, dict(providers or {}), authorizer)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentRunWorkflow],
        activities=activities.all(),
        workflow_runner=sandbox_runner(),
        max_concurrent_activities=max_concurrent_activities,
    )
