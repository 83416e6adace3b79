"""Typed inputs and outputs of every workflow, activity, signal and query.

Workflows and activities both import this module (and nothing else from each other), so the
workflow sandbox never loads I/O code. One input and one result type per entry point, so that
fields can be added compatibly later (the Temporal samples' advice).

Activity inputs carry *references* (run, session, snapshot version, tool call ids) rather than the
conversation: the transcript lives in the store, so workflow history grows linearly with the run.

The models live in this package's modules by what they serve: `refs` (`RunRef`, and the base
every contract shares), `run` (the workflow's input, plan, carry-over, handoffs, messages,
finish and stored events), `turns` (model and tool calls, and the transcript entries they
leave), `approvals` and `agent_calls` (``agent.call``, ``agent.spawn``). Import them from here.
They are Temporal payloads: their class and field names, field order and defaults are the JSON
of recorded histories, so they move between modules only verbatim.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from otherone.contracts.agent_calls import (
    CallAgentInput,
    CallPlan,
    DescribeRunsInput,
    EndedRun,
    EndedRuns,
    PrepareCallInput,
    SpawnedCall,
    SpawnEnded,
    child_run_id,
)
from otherone.contracts.approvals import (
    ApprovalDecision,
    ApprovalNeed,
    ApprovalOutcome,
    ApprovalRequest,
    RecordDecisionInput,
)
from otherone.contracts.guardrails import GUARDRAIL_BROKEN as GUARDRAIL_BROKEN
from otherone.contracts.guardrails import GuardrailCallInput as GuardrailCallInput
from otherone.contracts.guardrails import GuardrailPlan as GuardrailPlan
from otherone.contracts.guardrails import GuardrailSettings as GuardrailSettings
from otherone.contracts.guardrails import GuardrailVerdict as GuardrailVerdict
from otherone.contracts.refs import RunRef, resolved_ref
from otherone.contracts.run import (
    CarryOver,
    EventRecord,
    FinishRunInput,
    HandOffInput,
    HandOffResult,
    PlannedModel,
    PrepareRunInput,
    RecordEventsInput,
    RunInput,
    RunPlan,
    ToolSettings,
    UserMessages,
)
from otherone.contracts.turns import (
    DEFAULT_RESULT_LIMIT_BYTES,
    STORE_OUTAGE_PATIENCE,
    CapacityWait,
    ModelCallInput,
    ModelTurn,
    PendingEntry,
    ToolCallInput,
    ToolCallSpec,
    ToolOutcome,
)
from otherone.contracts.webhooks import (
    ACTIVITY_DELIVER_WEBHOOK,
    WEBHOOK_WORKFLOW_NAME,
    WebhookDelivered,
    WebhookDelivery,
    WebhookPlan,
    delivery_workflow_id,
)
from otherone.workflow_names import MEMO_FINGERPRINT as MEMO_FINGERPRINT
from otherone.workflow_names import MEMO_IDEMPOTENCY_KEY as MEMO_IDEMPOTENCY_KEY
from otherone.workflow_names import QUERY_APPROVALS as QUERY_APPROVALS
from otherone.workflow_names import QUERY_RECORD as QUERY_RECORD
from otherone.workflow_names import QUERY_RUN_REF as QUERY_RUN_REF
from otherone.workflow_names import SIGNAL_CAPACITY_FREED as SIGNAL_CAPACITY_FREED
from otherone.workflow_names import SIGNAL_SPAWNED_RUN_ENDED as SIGNAL_SPAWNED_RUN_ENDED
from otherone.workflow_names import SIGNAL_USER_MESSAGES as SIGNAL_USER_MESSAGES
from otherone.workflow_names import UPDATE_CALL_AGENT as UPDATE_CALL_AGENT
from otherone.workflow_names import UPDATE_DECIDE_APPROVAL as UPDATE_DECIDE_APPROVAL
from otherone.workflow_names import WORKFLOW_NAME as WORKFLOW_NAME

ACTIVITY_PREPARE_RUN = "otherone.prepare_run"
ACTIVITY_CALL_MODEL = "otherone.call_model"
ACTIVITY_RUN_TOOL = "otherone.run_tool"
ACTIVITY_FINISH_RUN = "otherone.finish_run"
ACTIVITY_PREPARE_CALL = "otherone.prepare_call"
ACTIVITY_RECORD_DECISION = "otherone.record_approval_decision"
ACTIVITY_HAND_OFF = "otherone.hand_off"
#: Ask Temporal which of some runs have ended (spawned children a caller did not start in its
#: current history, so it holds no handle that would tell it).
ACTIVITY_DESCRIBE_RUNS = "otherone.describe_runs"
#: One guardrail over a run's input, answer or tool call (`otherone.guardrails`).
ACTIVITY_RUN_GUARDRAIL = "otherone.run_guardrail"
#: Store events the workflow decided, now (`sleep_started`: watchers see the run sleep).
ACTIVITY_RECORD_EVENTS = "otherone.record_events"
#: Store activities (prepare, check a call, finish) heartbeat: a worker killed while running
#: one is noticed after this long, and the activity runs again elsewhere.
STORE_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
#: They ride out a database outage in place for up to 2 minutes (`ActivityContext.io`).
STORE_ACTIVITY_TIMEOUT = timedelta(minutes=5)
#: All attempts of a store activity together: a store that stays down or keeps refusing a write
#: ends the run (`storage_error`) instead of keeping it alive for ever.
STORE_TOTAL_TIMEOUT = timedelta(minutes=10)
#: The error type of a start refused because its run id belongs to a run that ended
#: (`otherone.store.errors.RunIdUsed`): the run ends refused, writing nothing.
RUN_ID_USED = "run_id_used"
#: The error type of a prepare attempt that starts after the run's deadline
#: (`PrepareRunInput.give_up_at`): the run ends timed out.
PREPARE_DEADLINE_PASSED = "prepare_deadline_passed"


#: Activity inputs and results: written by our workers, read by our workers and workflows only,
#: so their payloads leave out the fields at their defaults (`otherone.payloads`).
COMPACT_PAYLOAD_TYPES: tuple[type[BaseModel], ...] = (
    PrepareRunInput,
    RunPlan,
    ModelCallInput,
    ModelTurn,
    ToolCallInput,
    ToolOutcome,
    PrepareCallInput,
    CallPlan,
    RecordDecisionInput,
    RecordEventsInput,
    FinishRunInput,
    GuardrailCallInput,
    GuardrailVerdict,
)


__all__ = [
    "ACTIVITY_CALL_MODEL",
    "ACTIVITY_DELIVER_WEBHOOK",
    "ACTIVITY_DESCRIBE_RUNS",
    "ACTIVITY_FINISH_RUN",
    "ACTIVITY_HAND_OFF",
    "ACTIVITY_PREPARE_CALL",
    "ACTIVITY_PREPARE_RUN",
    "ACTIVITY_RECORD_DECISION",
    "ACTIVITY_RECORD_EVENTS",
    "ACTIVITY_RUN_GUARDRAIL",
    "ACTIVITY_RUN_TOOL",
    "COMPACT_PAYLOAD_TYPES",
    "DEFAULT_RESULT_LIMIT_BYTES",
    "MEMO_FINGERPRINT",
    "MEMO_IDEMPOTENCY_KEY",
    "PREPARE_DEADLINE_PASSED",
    "QUERY_APPROVALS",
    "QUERY_RECORD",
    "QUERY_RUN_REF",
    "RUN_ID_USED",
    "SIGNAL_CAPACITY_FREED",
    "SIGNAL_SPAWNED_RUN_ENDED",
    "SIGNAL_USER_MESSAGES",
    "STORE_ACTIVITY_TIMEOUT",
    "STORE_HEARTBEAT_TIMEOUT",
    "STORE_OUTAGE_PATIENCE",
    "STORE_TOTAL_TIMEOUT",
    "UPDATE_CALL_AGENT",
    "UPDATE_DECIDE_APPROVAL",
    "WEBHOOK_WORKFLOW_NAME",
    "WORKFLOW_NAME",
    "ApprovalDecision",
    "ApprovalNeed",
    "ApprovalOutcome",
    "ApprovalRequest",
    "CallAgentInput",
    "CallPlan",
    "CapacityWait",
    "CarryOver",
    "DescribeRunsInput",
    "EndedRun",
    "EndedRuns",
    "EventRecord",
    "FinishRunInput",
    "HandOffInput",
    "HandOffResult",
    "ModelCallInput",
    "ModelTurn",
    "PendingEntry",
    "PlannedModel",
    "PrepareCallInput",
    "PrepareRunInput",
    "RecordDecisionInput",
    "RecordEventsInput",
    "RunInput",
    "RunPlan",
    "RunRef",
    "SpawnEnded",
    "SpawnedCall",
    "ToolCallInput",
    "ToolCallSpec",
    "ToolOutcome",
    "ToolSettings",
    "UserMessages",
    "WebhookDelivered",
    "WebhookDelivery",
    "WebhookPlan",
    "child_run_id",
    "delivery_workflow_id",
    "resolved_ref",
]
