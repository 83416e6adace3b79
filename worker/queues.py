"""Task queues and worker roles: which Temporal workers a worker process runs.

An agent run touches three kinds of work, each routed to a task queue:

- **workflows** — `AgentRunWorkflow` tasks and the quick store activities (prepare a run, check
  an agent call, finish a run) — always on the workflow task queue (``task_queue``);
- **model** — model-call activities, on ``model_task_queue``;
- **tools** — tool-call activities, on ``tool_task_queue``.

By default the model and tool queues *are* the workflow queue (``None``): one Temporal worker
polls one queue, and Temporal's eager activity execution hands a model or tool call straight back
to the worker that scheduled it (measured here: ~20-40% less latency per activity than a second
queue). Naming separate queues lets model-heavy and tool-heavy workers be scaled apart, each
with its own slot limit (``max_concurrent_model_calls`` / ``max_concurrent_tool_calls``); a
process then serves the roles it is given (``worker_roles``), all three by default.

The workflow learns the queues deterministically: the worker that prepares a run writes its
model and tool queues into the `RunPlan` (`stamp_queues`), which the run keeps through
continue-as-new. A plan recorded before queues existed says ``None``: the workflow's own queue,
which is why a worker with the *workflows* role also registers the model and tool activities.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from otherone.errors import ConfigurationError

if TYPE_CHECKING:  # the CLI imports this module through its settings: keep it light
    from otherone.contracts import RunPlan


class WorkerRole(StrEnum):
    """What a worker process serves (``--roles`` / ``OTHERONE_WORKER_ROLES``)."""

    WORKFLOWS = "workflows"
    MODEL = "model"
    TOOLS = "tools"


ALL_ROLES: tuple[WorkerRole, ...] = (WorkerRole.WORKFLOWS, WorkerRole.MODEL, WorkerRole.TOOLS)


def parse_roles(value: str | Iterable[str]) -> tuple[WorkerRole, ...]:
    """``"workflows,model"`` (or a list; ``all`` = every role) as roles, in canonical order.

    Raises ValueError naming the bad role (pydantic reports it under ``worker_roles``).
    """
    names = value.split(",") if isinstance(value, str) else list(value)
    wanted: set[WorkerRole] = set()
    for raw in names:
        name = str(raw).strip().lower()
        if not name:
            continue
        if name == "all":
            wanted.update(ALL_ROLES)
            continue
        try:
            wanted.add(WorkerRole(name))
        except ValueError:
            choices = ", ".join(role.value for role in ALL_ROLES)
            raise ValueError(f"unknown role '{name}'; choose from {choices} (or all)") from None
    if not wanted:
        raise ValueError("give at least one of workflows, model, tools")
    return tuple(role for role in ALL_ROLES if role in wanted)


def _queue_name(value: str | None) -> str | None:
    name = (value or "").strip()
    return name or None


@dataclass(frozen=True)
class TaskQueues:
    """The workflow task queue and, when split off, the model and tool queues."""

    workflow: str
    model: str | None = None
    tool: str | None = None

    def __post_init__(self) -> None:
        if not self.workflow.strip():
            raise ConfigurationError("task_queue: must not be empty")
        # Naming the workflow queue itself is the same as not splitting: normalise to None so
        # plans stay as they were before queues could be split.
        model, tool = _queue_name(self.model), _queue_name(self.tool)
        object.__setattr__(self, "model", None if model == self.workflow else model)
        object.__setattr__(self, "tool", None if tool == self.workflow else tool)

    @property
    def model_queue(self) -> str:
        return self.model or self.workflow

    @property
    def tool_queue(self) -> str:
        return self.tool or self.workflow

    @property
    def split(self) -> bool:
        return self.model is not None or self.tool is not None


def stamp_queues(plan: RunPlan, queues: TaskQueues) -> RunPlan:
    """The plan with this worker's model and tool queues (None: the workflow's own queue)."""
    return plan.model_copy(
        update={"model_task_queue": queues.model, "tool_task_queue": queues.tool}
    )


#: Local activities (prepare_run, finish_run) one workflow worker runs at once: Temporal's own
#: default (`Settings.max_concurrent_local_activities`).
DEFAULT_LOCAL_ACTIVITY_SLOTS = 100


@dataclass(frozen=True)
class QueueWorker:
    """One Temporal worker to run: a task queue and what it serves there."""

    task_queue: str
    workflows: bool = False
    model: bool = False
    tools: bool = False
    max_concurrent_activities: int = 64


@dataclass(frozen=True)
class SlotLimits:
    """Activity slots: of the workflow queue's worker, and of the model and tool queues'."""

    activities: int = 64
    model_calls: int | None = None
    tool_calls: int | None = None

    def __post_init__(self) -> None:
        for name in ("activities", "model_calls", "tool_calls"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigurationError(f"max_concurrent_{name}: must be greater than 0")


def plan_workers(
    queues: TaskQueues, roles: Iterable[WorkerRole], slots: SlotLimits
) -> list[QueueWorker]:
    """The Temporal workers a process with ``roles`` runs: one per distinct task queue.

    The workflow queue's worker (role *workflows*) also runs model and tool calls routed to it
    (queues not split, or runs prepared before the split). A queue shared by the model and tool
    roles gets both slot limits added up. Raises `ConfigurationError` when a role without
    *workflows* would poll the workflow queue (it would be handed activities it cannot run).
    """
    wanted = set(roles)
    if not wanted:
        raise ConfigurationError("worker_roles: give at least one of workflows, model, tools")
    _check_roles(queues, wanted)
    workers: dict[str, QueueWorker] = {}
    if WorkerRole.WORKFLOWS in wanted:
        workers[queues.workflow] = QueueWorker(
            queues.workflow,
            workflows=True,
            model=True,
            tools=True,
            max_concurrent_activities=slots.activities,
        )
    for role, queue, limit in (
        (WorkerRole.MODEL, queues.model, slots.model_calls),
        (WorkerRole.TOOLS, queues.tool, slots.tool_calls),
    ):
        if role not in wanted or queue is None:
            continue  # not split: the workflow queue's worker serves it
        slots_here = limit or slots.activities
        known = workers.get(queue)
        # One queue for model and tool calls: Temporal hands either kind to any of its
        # pollers, so whoever polls it must be able to run both.
        shared = queues.model == queues.tool
        if known is None:
            workers[queue] = QueueWorker(
                queue,
                model=role is WorkerRole.MODEL or shared,
                tools=role is WorkerRole.TOOLS or shared,
                max_concurrent_activities=slots_here,
            )
        else:  # the model and tool queues are one queue
            workers[queue] = QueueWorker(
                queue,
                model=True,
                tools=True,
                max_concurrent_activities=known.max_concurrent_activities + slots_here,
            )
    return list(workers.values())


def _check_roles(queues: TaskQueues, roles: set[WorkerRole]) -> None:
    if WorkerRole.WORKFLOWS in roles:
        return
    for role, queue, setting in (
        (WorkerRole.MODEL, queues.model, "model_task_queue"),
        (WorkerRole.TOOLS, queues.tool, "tool_task_queue"),
    ):
        if role in roles and queue is None:
            raise ConfigurationError(
                f"worker_roles: a '{role.value}' worker without 'workflows' needs its own "
                f"{setting} (OTHERONE_{setting.upper()}); {role.value} calls now run on the "
                f"workflow task queue '{queues.workflow}'"
            )


__all__ = [
    "ALL_ROLES",
    "QueueWorker",
    "SlotLimits",
    "TaskQueues",
    "WorkerRole",
    "parse_roles",
    "plan_workers",
    "stamp_queues",
]
