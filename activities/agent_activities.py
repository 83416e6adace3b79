"""The activities of an agent run, registered under their Temporal names.

All I/O of a run happens in activities, one module each, over one shared `ActivityContext`
(store, providers, snapshots, store I/O, events; `otherone.activities.shared`):

- `prepare_run`: pin the snapshot, lease the session, plan the run;
- `call_model`: one model turn (context, compaction in `compact_context`, streaming, storing);
- `run_tool`: one tool call and its stored result;
- `prepare_call`: check an `agent.call` and build the child's input;
- `finish_run`: last entries, session release, run record, terminal events;
- `record_approval_decision`: check a person's decision and record it (`approvals`);
- `hand_off`: pass the conversation to another agent (`handoffs`);
- `run_guardrail`: one guardrail over a run's input, answer or tool call (`guardrails`);
- `record_events`: store events the workflow decided, now (`sleep_started`; `sleep_tools`);
- `describe_runs`: which spawned children ended unseen (`describe_runs`; no store, no context).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity

from otherone.activities import approvals, guardrails, handoffs, sleep_tools, webhooks
from otherone.activities import call_model as model
from otherone.activities import describe_runs as described
from otherone.activities import finish_run as finish
from otherone.activities import prepare_call as agent_call
from otherone.activities import prepare_run as prepare
from otherone.activities import run_tool as tool
from otherone.activities.shared import ActivityContext
from otherone.activities.store_calls import heartbeating
from otherone.contracts import (
    ACTIVITY_CALL_MODEL,
    ACTIVITY_DELIVER_WEBHOOK,
    ACTIVITY_DESCRIBE_RUNS,
    ACTIVITY_FINISH_RUN,
    ACTIVITY_HAND_OFF,
    ACTIVITY_PREPARE_CALL,
    ACTIVITY_PREPARE_RUN,
    ACTIVITY_RECORD_DECISION,
    ACTIVITY_RECORD_EVENTS,
    ACTIVITY_RUN_GUARDRAIL,
    ACTIVITY_RUN_TOOL,
    CallPlan,
    DescribeRunsInput,
    EndedRuns,
    FinishRunInput,
    GuardrailCallInput,
    GuardrailVerdict,
    HandOffInput,
    HandOffResult,
    ModelCallInput,
    ModelTurn,
    PrepareCallInput,
    PrepareRunInput,
    RecordDecisionInput,
    RecordEventsInput,
    RunPlan,
    ToolCallInput,
    ToolOutcome,
    WebhookDelivered,
    WebhookDelivery,
)
from otherone.runs import RunRecord
from otherone.worker.telemetry import annotate_run


class AgentActivities:
    """The activities of one worker, bound to its `ActivityContext` (configuration, store,
    providers)."""

    def __init__(self, context: ActivityContext) -> None:
        self.context = context

    async def aclose(self) -> None:
        """Release what the activities hold open: the MCP servers' sessions and processes."""
        await self.context.mcp.aclose()

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.prepare_run,
            self.call_model,
            self.run_tool,
            self.prepare_call,
            self.finish_run,
            self.record_approval_decision,
            self.hand_off,
            self.describe_runs,
            self.run_guardrail,
            self.record_events,
            self.deliver_webhook,
        ]

    # Store activities heartbeat throughout, so a killed worker is noticed in seconds, not
    # minutes; model and tool calls heartbeat around their own waits.

    @activity.defn(name=ACTIVITY_PREPARE_RUN)
    async def prepare_run(self, input: PrepareRunInput) -> RunPlan:
        async with heartbeating():
            plan = await prepare.prepare_run(self.context, input)
        # The reference the run's model and tool inputs will name by its key.
        ref = input.ref.model_copy(update={"snapshot_version": plan.snapshot_version})
        self.context.run_refs.remember(ref)
        return plan

    @activity.defn(name=ACTIVITY_CALL_MODEL)
    async def call_model(self, input: ModelCallInput) -> ModelTurn:
        if isinstance(input.ref, str):
            ref = await self.context.run_refs.resolve(input.ref)
            input = input.model_copy(update={"ref": ref})
            annotate_run(ref)
        return await model.call_model(self.context, input)

    @activity.defn(name=ACTIVITY_RUN_TOOL)
    async def run_tool(self, input: ToolCallInput) -> ToolOutcome:
        if isinstance(input.ref, str):
            ref = await self.context.run_refs.resolve(input.ref)
            input = input.model_copy(update={"ref": ref})
            annotate_run(ref)
        return await tool.run_tool(self.context, input)

    @activity.defn(name=ACTIVITY_PREPARE_CALL)
    async def prepare_call(self, input: PrepareCallInput) -> CallPlan:
        """Check an agent call (the seed's order) and build the child's input; deny = raise."""
        async with heartbeating():
            return await agent_call.prepare_call(self.context, input)

    @activity.defn(name=ACTIVITY_FINISH_RUN)
    async def finish_run(self, input: FinishRunInput) -> RunRecord | None:
        async with heartbeating():
            return await finish.finish_run(self.context, input)

    @activity.defn(name=ACTIVITY_RECORD_DECISION)
    async def record_approval_decision(self, input: RecordDecisionInput) -> None:
        async with heartbeating():
            await approvals.record_decision(self.context, input)

    @activity.defn(name=ACTIVITY_HAND_OFF)
    async def hand_off(self, input: HandOffInput) -> RunPlan | HandOffResult:
        """Pass the run's conversation to another agent; the plan it goes on with."""
        async with heartbeating():
            return await handoffs.hand_off(self.context, input)

    @activity.defn(name=ACTIVITY_DESCRIBE_RUNS)
    async def describe_runs(self, input: DescribeRunsInput) -> EndedRuns:
        """Which of the given runs have ended (a terminated spawned child sends no signal)."""
        return await described.describe_runs(input)

    @activity.defn(name=ACTIVITY_RECORD_EVENTS)
    async def record_events(self, input: RecordEventsInput) -> None:
        """Store events the workflow decided, now (`sleep_started`)."""
        async with heartbeating():
            await sleep_tools.record_events(self.context, input)

    @activity.defn(name=ACTIVITY_RUN_GUARDRAIL)
    async def run_guardrail(self, input: GuardrailCallInput) -> GuardrailVerdict:
        """One guardrail's verdict (user code: heartbeats so a dead worker is seen soon)."""
        async with heartbeating():
            return await guardrails.run_guardrail(self.context, input)

    @activity.defn(name=ACTIVITY_DELIVER_WEBHOOK)
    async def deliver_webhook(self, input: WebhookDelivery) -> WebhookDelivered:
        """One attempt to POST a root's record to its webhook (`otherone.activities.webhooks`)."""
        return await webhooks.deliver_webhook(self.context, input)
