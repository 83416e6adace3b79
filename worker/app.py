"""Wiring of a worker process: the workflow, the activities bound to config, store and providers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.worker import Interceptor, Worker
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


async def connect(
    address: str,
    namespace: str = "default",
    *,
    tracing: bool = False,
    runtime: Runtime | None = None,
) -> Client:
    """A client with the pydantic data converter (workers, clients and replayers must agree).

    ``tracing`` adds Temporal's OpenTelemetry ``TracingInterceptor`` (workers built from this
    client inherit it; see `worker.telemetry`); ``runtime`` is e.g. a Prometheus-metrics runtime
    (`worker.telemetry.prometheus_runtime`).
    """
    return await Client.connect(
        address,
        namespace=namespace,
        data_converter=pydantic_data_converter,
        interceptors=[TracingInterceptor()] if tracing else [],
        runtime=runtime,
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
    interceptors: Sequence[Interceptor] = (),
    max_cached_workflows: int = 1000,
) -> Worker:
    """A worker that runs agent workflows and their activities on ``task_queue``.

    ``authorizer`` may deny agent calls (after the static checks passed). ``interceptors`` are
    added to those the client carries (e.g. `worker.telemetry.OtheroneActivityInterceptor`);
    ``max_cached_workflows`` (Temporal's default) of 0 makes every workflow task a replay.
    """
    activities = AgentActivities(config, store, dict(providers or {}), authorizer)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentRunWorkflow],
        activities=activities.all(),
        workflow_runner=sandbox_runner(),
        max_concurrent_activities=max_concurrent_activities,
        interceptors=interceptors,
        max_cached_workflows=max_cached_workflows,
    )
