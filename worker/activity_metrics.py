"""`OtheroneMetricsInterceptor`: Prometheus metrics of our activities, per agent, model profile
and tool, through Temporal's runtime meter (served with ``OTHERONE_METRICS_PORT`` beside the
``temporal_*`` ones; without a metrics runtime the meter records nothing).

`METRICS` names every metric with its type and labels: the Grafana dashboard in
``deploy/grafana/otherone-dashboard.json`` uses only these (and Temporal's), which a test checks.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from otherone.contracts import (
    ACTIVITY_CALL_MODEL,
    ACTIVITY_FINISH_RUN,
    ACTIVITY_RECORD_DECISION,
    ACTIVITY_RUN_TOOL,
    FinishRunInput,
    ModelTurn,
    RecordDecisionInput,
    RunRef,
    ToolOutcome,
)


@dataclass(frozen=True)
class Metric:
    kind: str  # counter, histogram (Prometheus adds _bucket, _sum, _count)
    help: str
    labels: tuple[str, ...]


#: Every metric this module records (names as Prometheus shows them, before suffixes).
METRICS: Mapping[str, Metric] = {
    "otherone_model_calls": Metric(
        "counter", "Model call attempts by outcome", ("agent", "profile", "outcome")
    ),
    "otherone_model_call_seconds": Metric(
        "histogram", "Model call attempt duration", ("agent", "profile")
    ),
    "otherone_model_tokens": Metric(
        "counter", "Tokens of answered model calls by type", ("agent", "profile", "type")
    ),
    "otherone_model_cost_microusd": Metric(
        "counter", "Cost of answered model calls, millionths of a US dollar", ("agent", "profile")
    ),
    "otherone_capacity_wait_seconds": Metric(
        "histogram", "Time a model call waited for fleet permits", ("agent", "profile")
    ),
    "otherone_tool_calls": Metric(
        "counter", "Tool call attempts by outcome", ("agent", "tool", "outcome")
    ),
    "otherone_tool_call_seconds": Metric(
        "histogram", "Tool call attempt duration", ("agent", "tool")
    ),
    "otherone_approval_wait_seconds": Metric(
        "histogram",
        "Time a tool call waited for a person's decision",
        ("agent", "tool", "decision"),
    ),
    "otherone_runs_finished": Metric("counter", "Runs ended by status", ("agent", "status")),
    "otherone_run_seconds": Metric("histogram", "Run duration", ("agent",)),
}

#: Token types of `otherone_model_tokens` and the `ModelTurn` fields they come from.
TOKEN_TYPES = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_read": "cache_read_tokens",
    "cache_write": "cache_write_tokens",
}


class _Run:
    """The run an activity works for, once it resolved its reference (`note_run`), and how
    long its model call waited for fleet permits (`note_capacity_wait`)."""

    ref: RunRef | None = None
    waited_ms: int = 0


_current: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "otherone_metrics_run", default=None
)


def note_capacity_wait(waited_ms: int) -> None:
    """How long the current model call waited for fleet permits before it was admitted, in
    its workflow and in the activity (milliseconds)."""
    holder = _current.get()
    if holder is not None:
        holder.waited_ms = waited_ms


def note_run(ref: RunRef) -> None:
    """Name the current activity's run for its metrics (model and tool inputs carry only the
    key of their run's reference, resolved inside the activity)."""
    holder = _current.get()
    if holder is not None:
        holder.ref = ref


class OtheroneMetricsInterceptor(Interceptor):
    """Worker interceptor recording `METRICS` for our activities."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityMetrics(next)


class _ActivityMetrics(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        name = activity.info().activity_type
        if name not in (ACTIVITY_CALL_MODEL, ACTIVITY_RUN_TOOL):
            result = await super().execute_activity(input)
            _record_other(name, input.args[0] if input.args else None, result)
            return result
        holder = _Run()
        token = _current.set(holder)
        started = time.monotonic()
        argument = input.args[0] if input.args else None
        try:
            result = await super().execute_activity(input)
        except BaseException:
            _record_call(name, argument, holder, None, time.monotonic() - started)
            raise
        finally:
            _current.reset(token)
        _record_call(name, argument, holder, result, time.monotonic() - started)
        return result


def _record_call(name: str, argument: object, holder: _Run, result: object, seconds: float) -> None:
    agent = holder.ref.agent_id if holder.ref is not None else ""
    if name == ACTIVITY_CALL_MODEL:
        labels = {"agent": agent, "profile": str(getattr(argument, "model_profile_id", ""))}
        outcome = _model_outcome(result)
        _counter("otherone_model_calls").add(1, {**labels, "outcome": outcome})
        if outcome == "capacity_wait":
            return  # nothing was asked of the provider
        _histogram("otherone_model_call_seconds").record(seconds, labels)
        if isinstance(result, ModelTurn):
            _record_usage(result, labels)
        if holder.waited_ms and outcome == "ok":
            _histogram("otherone_capacity_wait_seconds").record(holder.waited_ms / 1000, labels)
        return
    call = getattr(argument, "call", None)
    labels = {"agent": agent, "tool": str(getattr(call, "name", ""))}
    outcome = "ok"
    if not isinstance(result, ToolOutcome):
        outcome = "error"
    elif result.capacity_wait is not None:
        outcome = "capacity_wait"
    elif result.error_kind is not None:
        outcome = "error"
    _counter("otherone_tool_calls").add(1, {**labels, "outcome": outcome})
    if outcome != "capacity_wait":
        _histogram("otherone_tool_call_seconds").record(seconds, labels)


def _model_outcome(result: object) -> str:
    if not isinstance(result, ModelTurn):
        return "error"
    return "capacity_wait" if result.capacity_wait is not None else "ok"


def _record_usage(turn: ModelTurn, labels: dict[str, str]) -> None:
    tokens = _counter("otherone_model_tokens")
    for kind, field in TOKEN_TYPES.items():
        value = getattr(turn, field)
        if value:
            tokens.add(int(value), {**labels, "type": kind})
    if turn.cost is not None and turn.cost > 0:
        micro = int((Decimal(turn.cost) * 1_000_000).to_integral_value())
        if micro > 0:
            _counter("otherone_model_cost_microusd").add(micro, labels)


def _record_other(name: str, argument: object, result: object) -> None:
    if name == ACTIVITY_FINISH_RUN and isinstance(argument, FinishRunInput):
        record = argument.record
        agent = argument.ref.agent_id
        status = record.status.value if record is not None else argument.status.value
        _counter("otherone_runs_finished").add(1, {"agent": agent, "status": status})
        if record is not None and record.usage.duration_millis:
            seconds = record.usage.duration_millis / 1000
            _histogram("otherone_run_seconds").record(seconds, {"agent": agent})
    elif name == ACTIVITY_RECORD_DECISION and isinstance(argument, RecordDecisionInput):
        request = argument.request
        waited = (datetime.now(UTC) - request.requested_at).total_seconds()
        labels = {
            "agent": request.agent_id,
            "tool": request.tool_name,
            "decision": argument.outcome.decision,
        }
        _histogram("otherone_approval_wait_seconds").record(max(waited, 0.0), labels)


def _counter(name: str) -> Any:
    return activity.metric_meter().create_counter(name, METRICS[name].help)


def _histogram(name: str) -> Any:
    return activity.metric_meter().create_histogram_float(name, METRICS[name].help)
