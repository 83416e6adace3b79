"""Changed versions of `AgentRunWorkflow`, as a deploy would bring them (tests/test_upgrade.py,
tests/test_task_queues.py).

Kept in their own module, importing nothing with I/O, because the workflow sandbox re-imports
the module that defines a workflow. Each is registered under the same workflow type name, so a
worker running one of them picks up runs started on the current code.

A subclass overrides methods of `AgentRunWorkflow`; it must declare ``@workflow.init`` and
``@workflow.run`` again (the SDK reads them from the class it registers).

The change under test ("version 2"): at its start a run records ``{"workflow_version": 2}``
in its memo — a new command (UpsertWorkflowProperties), so replaying an older history without
a patch guard fails — and marks its result's metadata, so a test can see which path a run took.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from otherone.contracts import WORKFLOW_NAME, RunInput, RunPlan
from otherone.runs import AgentRunResult
from otherone.workflows.agent_run import AgentRunWorkflow

#: The patch id of the version-2 change.
VERSION_2_PATCH = "memo-workflow-version"
VERSION_KEY = "workflow_version"


def _marked(result: AgentRunResult, version: int) -> AgentRunResult:
    metadata: dict[str, Any] = {**result.metadata, VERSION_KEY: version}
    return result.model_copy(update={"metadata": metadata})


@workflow.defn(name=WORKFLOW_NAME)
class PatchedAgentRunWorkflow(AgentRunWorkflow):
    """Version 2 behind ``workflow.patched``: runs started before the deploy keep version 1.

    The patch is checked once, at the start of the run (the SDK memoises the answer): a run whose
    history began without the marker stays on version 1 to its end; a new run takes version 2.
    """

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        super().__init__(input)

    @workflow.run
    async def run(self, input: RunInput) -> AgentRunResult:
        if workflow.patched(VERSION_2_PATCH):
            workflow.upsert_memo({VERSION_KEY: 2})
            return _marked(await super().run(input), 2)
        return _marked(await super().run(input), 1)


@workflow.defn(name=WORKFLOW_NAME)
class UnpatchedAgentRunWorkflow(AgentRunWorkflow):
    """The same change without the guard: replaying an older run is nondeterministic."""

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        super().__init__(input)

    @workflow.run
    async def run(self, input: RunInput) -> AgentRunResult:
        workflow.upsert_memo({VERSION_KEY: 2})
        return _marked(await super().run(input), 2)


@workflow.defn(name=WORKFLOW_NAME)
class DeprecatedPatchAgentRunWorkflow(AgentRunWorkflow):
    """Step two of the procedure, once no run of version 1 is left: version 2 only, the patch
    deprecated (histories with the marker still replay; version-1 histories no longer do)."""

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        super().__init__(input)

    @workflow.run
    async def run(self, input: RunInput) -> AgentRunResult:
        workflow.deprecate_patch(VERSION_2_PATCH)
        workflow.upsert_memo({VERSION_KEY: 2})
        return _marked(await super().run(input), 2)


@workflow.defn(name=WORKFLOW_NAME)
class UnroutedAgentRunWorkflow(AgentRunWorkflow):
    """Ignores the plan's model and tool task queues (schedules every activity on the
    workflow's own queue): replaying a split-queue history on it shows whether the task queue
    of an activity is part of Temporal's determinism check."""

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        super().__init__(input)

    @workflow.run
    async def run(self, input: RunInput) -> AgentRunResult:
        return await super().run(input)

    def _start(self, plan: RunPlan) -> RunPlan:
        return super()._start(
            plan.model_copy(update={"model_task_queue": None, "tool_task_queue": None})
        )
