"""Wiring of a worker process: the workflow, the activities bound to config, store and providers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

from temporalio import activity
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Interceptor, UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from otherone.activities.agent_activities import AgentActivities
from otherone.activities.providers.base import ModelProvider
from otherone.activities.shared import ActivityContext
from otherone.authorization import AgentCallAuthorizer
from otherone.config import RuntimeConfig
from otherone.contracts import ACTIVITY_PREPARE_RUN, PrepareRunInput, RunPlan
from otherone.errors import ConfigurationError
from otherone.store import Store
from otherone.worker.activity_metrics import OtheroneMetricsInterceptor

# Re-exported: clients import them from `otherone.worker.connection` (light: no activities).
from otherone.worker.connection import connect as connect
from otherone.worker.connection import data_converter as data_converter
from otherone.worker.logs import expected_failures_on_one_line
from otherone.worker.queues import (
    ALL_ROLES,
    DEFAULT_LOCAL_ACTIVITY_SLOTS,
    QueueWorker,
    SlotLimits,
    TaskQueues,
    WorkerRole,
    parse_roles,
    plan_workers,
    stamp_queues,
)
from otherone.worker.reconciler import reconcile_periodically
from otherone.worker.redacting import RedactingActivityInterceptor, remember_configured_secrets
from otherone.worker.sandbox import WorkflowSandbox, workflow_sandbox_from_env
from otherone.worker.versioning import WorkerDeployment
from otherone.workflows import ALL_WORKFLOWS

#: Our pure modules (pydantic models, constants): passed through the sandbox so they are imported
#: once per worker, not once per workflow run. Listed one by one: Temporal matches passthrough
#: names by prefix, and "otherone" alone would also pass through `otherone.workflows` (which
#: stays sandboxed in the ``strict`` mode so its determinism is checked) and the I/O subpackages.
PASSTHROUGH_MODULES = (
    "otherone.authorization",
    "otherone.config",
    "otherone.config_guardrails",
    "otherone.contracts",
    "otherone.definitions",
    "otherone.errors",
    "otherone.guardrail_policy",
    "otherone.guardrails",
    "otherone.hook_policy",
    "otherone.hooks",
    "otherone.lazy_exports",
    "otherone.mcp_servers",
    "otherone.partitions",
    "otherone.payloads",
    "otherone.per_version",
    "otherone.runs",
    "otherone.search_attributes",
    "otherone.skills",
    "otherone.toml_config",
    "otherone.tools",
    "otherone.webhooks",
    "otherone.wire_names",
    "otherone.workflows.budgets",
    "otherone.workflows.handoffs",
    "otherone.workflows.outcomes",
    "otherone.workflows.output_retries",
    "otherone.workflows.spawn_limits",
)


#: Longest gap between heartbeats sent to the server (see `build_worker`).
HEARTBEAT_THROTTLE = timedelta(seconds=1)


#: Our workflow modules: re-imported per run by the ``strict`` sandbox only.
WORKFLOW_MODULES = "otherone.workflows"


def sandbox_runner() -> SandboxedWorkflowRunner:
    """The full sandbox (mode ``strict``): our workflow modules are re-imported for every run and
    their non-deterministic calls fail the workflow task."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def workflow_runner(mode: WorkflowSandbox) -> WorkflowRunner:
    """How workflow code runs in ``mode`` (`otherone.worker.sandbox`)."""
    if mode == "strict":
        return sandbox_runner()
    if mode == "passthrough":
        return SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(
                *PASSTHROUGH_MODULES, WORKFLOW_MODULES
            )
        )
    return UnsandboxedWorkflowRunner()


class AgentWorker:
    """The Temporal workers of one process, one per task queue it polls, run as one.

    `build_worker` returns it. Like a single `temporalio.worker.Worker` it is run with
    ``async with`` (started on entry, shut down on exit) or with `run` until `shutdown`; a fatal
    error of any of its workers shuts the others down and is raised.
    """

    def __init__(
        self,
        workers: Sequence[Worker],
        on_shutdown: Callable[[], Awaitable[None]] | None = None,
        housekeeping: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
    ) -> None:
        if not workers:
            raise ValueError("an AgentWorker needs at least one worker")
        self._workers = tuple(workers)
        self._stack: contextlib.AsyncExitStack | None = None
        #: Runs once the workers have stopped (closes the MCP servers' sessions and processes).
        self._on_shutdown = on_shutdown
        #: Periodic tasks run beside the workers (`background`): the reconciler.
        self._housekeeping = tuple(housekeeping)

    @property
    def workers(self) -> tuple[Worker, ...]:
        return self._workers

    @property
    def task_queues(self) -> tuple[str, ...]:
        return tuple(worker.task_queue for worker in self._workers)

    @property
    def is_running(self) -> bool:
        return any(worker.is_running for worker in self._workers)

    @property
    def is_shutdown(self) -> bool:
        return all(worker.is_shutdown for worker in self._workers)

    @contextlib.asynccontextmanager
    async def background(self) -> AsyncIterator[None]:
        """Run the periodic tasks (the reconciler, `otherone.worker.reconciler`) while the
        block runs; `run` and ``async with`` do it, and so should a caller that drives the
        workers itself (as the CLI does)."""
        tasks = [asyncio.create_task(job()) for job in self._housekeeping]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def run(self) -> None:
        """Run every worker until `shutdown`; raise the first fatal error (after stopping all).
        The periodic tasks (`background`) run meanwhile."""
        async with self.background():
            await self._run()

    async def _run(self) -> None:
        tasks = [asyncio.ensure_future(worker.run()) for worker in self._workers]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()  # a cancelled Worker.run shuts that worker down
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.release()
            raise
        failed = [task for task in done if task.exception() is not None]
        if failed:
            await self.shutdown()
            await asyncio.gather(*tasks, return_exceptions=True)
            error = failed[0].exception()
            assert error is not None
            raise error

    async def shutdown(self) -> None:
        """Stop polling on every queue and wait until in-flight work has ended; then stop the
        MCP servers this process started."""
        await asyncio.gather(*(worker.shutdown() for worker in self._workers))
        await self.release()

    async def release(self) -> None:
        """Stop what the activities hold open (MCP server sessions and processes). `shutdown`
        does it; call it yourself after driving the workers directly (as the CLI's drain
        does)."""
        if self._on_shutdown is not None:
            await self._on_shutdown()

    async def __aenter__(self) -> Self:
        stack = contextlib.AsyncExitStack()
        try:
            for worker in self._workers:
                await stack.enter_async_context(worker)
            await stack.enter_async_context(self.background())
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            raise RuntimeError("AgentWorker was never started")
        # Shut down all at once (each worker's own exit would wait for it alone), then let each
        # worker's context exit raise a fatal error it had.
        await self.shutdown()
        await stack.__aexit__(exc_type, exc, traceback)


def build_worker(
    client: Client,
    config: RuntimeConfig,
    store: Store,
    *,
    task_queue: str,
    providers: Mapping[str, ModelProvider] | None = None,
    authorizer: AgentCallAuthorizer | None = None,
    max_concurrent_activities: int = 64,
    max_concurrent_local_activities: int = DEFAULT_LOCAL_ACTIVITY_SLOTS,
    interceptors: Sequence[Interceptor] = (),
    max_cached_workflows: int = 1000,
    model_task_queue: str | None = None,
    tool_task_queue: str | None = None,
    roles: Iterable[WorkerRole | str] = ALL_ROLES,
    max_concurrent_model_calls: int | None = None,
    max_concurrent_tool_calls: int | None = None,
    graceful_shutdown_timeout: timedelta = timedelta(0),
    workflows: Sequence[type] = ALL_WORKFLOWS,
    workflow_sandbox: WorkflowSandbox | None = None,
    deployment: WorkerDeployment | None = None,
    reconcile_every: timedelta | None = None,
) -> AgentWorker:
    """The workers that run agent workflows (on ``task_queue``) and their activities.

    ``authorizer`` may deny agent calls (after the static checks passed). ``interceptors`` are
    added to those the client carries (e.g.
    `otherone.worker.telemetry.OtheroneActivityInterceptor`);
    ``max_cached_workflows`` (Temporal's default) of 0 makes every workflow task a replay.

    Task queues (`otherone.worker.queues`): by default model and tool calls run on ``task_queue``
    too,
    one Temporal worker with ``max_concurrent_activities`` slots. ``model_task_queue`` /
    ``tool_task_queue`` route them to queues of their own, polled by workers with
    ``max_concurrent_model_calls`` / ``max_concurrent_tool_calls`` slots (default:
    ``max_concurrent_activities``); ``roles`` picks which of workflows, model and tools this
    process serves (all by default). Every worker of a deployment must name the same queues.
    ``workflows`` replaces the workflow class(es) (e.g. a patched version in upgrade tests).
    ``max_concurrent_local_activities`` bounds the local activities (prepare_run, finish_run)
    the workflow queue's worker runs at once.
    ``workflow_sandbox`` is how workflow code runs (`otherone.worker.sandbox`); ``None`` reads
    ``OTHERONE_WORKFLOW_SANDBOX`` as `Settings` does (environment, then ``.env`` files; default
    ``off``; the test suite sets ``strict``).
    ``deployment`` makes every worker a version of a Temporal Worker Deployment whose runs are
    pinned to the build they started on (`otherone.worker.versioning`); None: unversioned.
    ``reconcile_every`` runs the reconciler that often while the worker runs
    (`otherone.worker.reconciler`: closes the store's records of runs that ended in Temporal
    without storing their end); None or 0: not at all (`otherone worker` passes
    ``OTHERONE_RECONCILE_SECONDS``).
    Raises `ConfigurationError` for roles that cannot work with these queues, slots below 1, or
    for an
    unknown ``OTHERONE_WORKFLOW_SANDBOX``.
    """
    queues = TaskQueues(task_queue, model_task_queue, tool_task_queue)
    slots = SlotLimits(
        max_concurrent_activities, max_concurrent_model_calls, max_concurrent_tool_calls
    )
    planned = plan_workers(queues, parse_roles([str(role) for role in roles]), slots)
    if max_concurrent_local_activities <= 0:
        raise ConfigurationError("max_concurrent_local_activities: must be greater than 0")
    mode = workflow_sandbox_from_env() if workflow_sandbox is None else workflow_sandbox
    remember_configured_secrets(config)
    expected_failures_on_one_line()
    activities = AgentActivities(ActivityContext(config, store, dict(providers or {}), authorizer))
    housekeeping: list[Callable[[], Coroutine[Any, Any, None]]] = []
    if reconcile_every:
        every = reconcile_every
        housekeeping.append(lambda: reconcile_periodically(client, store, every))
    return AgentWorker(
        [
            Worker(
                client,
                task_queue=spec.task_queue,
                workflows=list(workflows) if spec.workflows else [],
                activities=_activities_for(spec, activities, queues),
                workflow_runner=workflow_runner(mode),
                max_concurrent_activities=spec.max_concurrent_activities,
                # (Used where workflows run: a local activity runs on its workflow's worker.)
                max_concurrent_local_activities=max_concurrent_local_activities,
                # Innermost: every other interceptor sees the activity's error redacted.
                # (Metrics: always; they go nowhere without a metrics runtime.)
                interceptors=[
                    *interceptors,
                    OtheroneMetricsInterceptor(),
                    RedactingActivityInterceptor(),
                ],
                max_cached_workflows=max_cached_workflows,
                graceful_shutdown_timeout=graceful_shutdown_timeout,
                # Our activities heartbeat every second; sending them that often (instead of
                # 0.8 x the heartbeat timeout) is what makes a cancellation reach a streaming
                # model call within ~1-2 s while the timeout itself can tolerate a busy process.
                max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
                **payload_visiting(client.data_converter),
                deployment_config=deployment.config() if deployment else None,
            )
            for spec in planned
        ],
        on_shutdown=activities.aclose,
        housekeeping=housekeeping,
    )


def payload_visiting(converter: DataConverter) -> dict[str, Any]:
    """Worker options for how the SDK walks a workflow task's payloads.

    With no external payload storage on the client's ``converter`` (ours has none: large
    payloads go to our store, `otherone.payloads`), its storage passes over each workflow
    activation and completion have nothing to fetch or store, and a concurrency of 1 makes them
    plain walks instead of an asyncio task per payload (~2 ms of CPU per 10-turn run).
    """
    if converter.external_storage is not None:
        return {}  # the SDK's default: storage operations of one task run side by side
    return {"max_workflow_task_external_storage_concurrency": 1}


def _activities_for(
    spec: QueueWorker, activities: AgentActivities, queues: TaskQueues
) -> list[Callable[..., Any]]:
    """The activities one queue's worker registers (see `otherone.worker.queues.plan_workers`)."""
    model, tool = activities.call_model, activities.run_tool
    chosen: list[Callable[..., Any]] = []
    for function in activities.all():
        if function == model:
            wanted = spec.model
        elif function in (tool, activities.run_guardrail):  # user code, like tools
            wanted = spec.tools
        else:  # store activities stay with the workflows
            wanted = spec.workflows
        if not wanted:
            continue
        if function == activities.prepare_run:
            function = _stamped_prepare_run(activities, queues)
        chosen.append(function)
    return chosen


def _stamped_prepare_run(activities: AgentActivities, queues: TaskQueues) -> Callable[..., Any]:
    """`prepare_run` whose plan names this worker's model and tool queues (`stamp_queues`)."""

    @activity.defn(name=ACTIVITY_PREPARE_RUN)
    async def prepare_run(input: PrepareRunInput) -> RunPlan:
        return stamp_queues(await activities.prepare_run(input), queues)

    return prepare_run
