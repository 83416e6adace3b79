"""A deliberately incompatible `AgentRunWorkflow` (finishes before preparing).

Kept in its own module, importing nothing with I/O, because the workflow sandbox re-imports the
module that defines a workflow.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from otherone.contracts import ACTIVITY_FINISH_RUN, WORKFLOW_NAME


@workflow.defn(name=WORKFLOW_NAME)
class ReorderedAgentRunWorkflow:
    @workflow.run
    async def run(self, input: object) -> None:
        await workflow.execute_activity(
            ACTIVITY_FINISH_RUN, input, start_to_close_timeout=timedelta(minutes=1)
        )
