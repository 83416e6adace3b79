"""`OtheroneActivityInterceptor`: a span per attempt of each ``otherone.*`` activity, the model
and tool calls' by the GenAI conventions, and the ``invoke_agent`` / agent-call spans each run
and call emits when it is done (`otherone.worker.genai_spans`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue
from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from otherone.config import AGENT_CALL_TOOL, AGENT_SPAWN_TOOL, HANDOFF_TOOL, RuntimeConfig
from otherone.contracts import (
    ACTIVITY_CALL_MODEL,
    ACTIVITY_FINISH_RUN,
    ACTIVITY_HAND_OFF,
    ACTIVITY_PREPARE_CALL,
    ACTIVITY_PREPARE_RUN,
    ACTIVITY_RUN_GUARDRAIL,
    ACTIVITY_RUN_TOOL,
    FinishRunInput,
    GuardrailVerdict,
    ModelTurn,
    PrepareCallInput,
    RunPlan,
    RunRef,
    ToolOutcome,
)
from otherone.runs import RunRecord, RunStatus
from otherone.worker import genai_spans
from otherone.worker.activity_metrics import note_run

TRACER_NAME = "otherone"
ACTIVITY_PREFIX = "otherone."

#: Span names of our activities that the GenAI conventions do not name (model calls are
#: ``chat {model}``, tool calls and handoffs ``execute_tool {tool}``); any other
#: ``otherone.*`` activity gets its name without the prefix, underscores as spaces
#: (``otherone.compact_session`` -> ``compact session``).
SPAN_NAMES: Mapping[str, str] = {
    ACTIVITY_PREPARE_RUN: "run prepare",
    ACTIVITY_PREPARE_CALL: "agent call check",
    ACTIVITY_FINISH_RUN: "run finish",
    ACTIVITY_RUN_GUARDRAIL: "guardrail",
}
#: Activities whose spans are GenAI operations (children of their run's ``invoke_agent``).
GENAI_ACTIVITIES = frozenset({ACTIVITY_CALL_MODEL, ACTIVITY_RUN_TOOL, ACTIVITY_HAND_OFF})


class OtheroneActivityInterceptor(Interceptor):
    """Worker interceptor: a span per attempt of each ``otherone.*`` activity.

    ``tracer`` defaults to the global provider's; ``config`` (the worker's runtime config) lets
    model spans name the provider and model of a model profile. ``capture_content`` puts
    prompts, answers and tool arguments and results on the spans (redacted, bounded); default:
    as ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says.
    """

    def __init__(
        self,
        tracer: Tracer | None = None,
        config: RuntimeConfig | None = None,
        capture_content: bool | None = None,
    ) -> None:
        self.tracer = tracer or trace.get_tracer(TRACER_NAME, schema_url=genai_spans.SCHEMA_URL)
        self.config = config
        self.capture_content = (
            genai_spans.content_capture_enabled() if capture_content is None else capture_content
        )
        self._emitter: SdkTracer | None = None

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivitySpans(next, self)

    def emitter(self) -> SdkTracer | None:
        """The tracer of the spans given derived ids (None: the tracer is not the SDK's)."""
        if self._emitter is None:
            self._emitter = genai_spans.chosen_ids_tracer(self.tracer)
        return self._emitter

    def model_attributes(self, profile_id: str) -> dict[str, AttributeValue]:
        profile = self.config.models.get(profile_id) if self.config is not None else None
        if profile is None:
            return {}
        return {
            "gen_ai.provider.name": genai_spans.provider_name(profile.provider),
            "gen_ai.request.model": profile.model,
        }


def _span_name(name: str, attributes: Mapping[str, AttributeValue]) -> str:
    if name == ACTIVITY_CALL_MODEL:
        model = attributes.get("gen_ai.request.model") or attributes.get(
            "otherone.model_profile_id", ""
        )
        return f"chat {model}".rstrip()
    if name in (ACTIVITY_RUN_TOOL, ACTIVITY_HAND_OFF):
        return f"execute_tool {attributes.get('gen_ai.tool.name', '')}".rstrip()
    return SPAN_NAMES.get(name, name.removeprefix(ACTIVITY_PREFIX).replace("_", " "))


class _ActivitySpans(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, root: OtheroneActivityInterceptor):
        super().__init__(next)
        self.root = root

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        name = info.activity_type
        if not name.startswith(ACTIVITY_PREFIX):
            return await super().execute_activity(input)
        run_id = info.workflow_id or ""  # a run's workflow id is its run id
        attributes: dict[str, AttributeValue] = {
            "otherone.activity": name,
            "otherone.activity.attempt": info.attempt,
            "otherone.attempt": info.attempt,
            "temporal.workflow_id": run_id,
            "temporal.activity_id": info.activity_id,
        }
        if info.attempt > 1:  # the attempts before failed: each has its own span
            attributes["otherone.retry_of_attempt"] = info.attempt - 1
        argument = input.args[0] if input.args else None
        if isinstance(argument, BaseModel):
            attributes.update(self._input_attributes(name, argument))
        context, links = None, None
        temporal = trace.get_current_span().get_span_context().is_valid
        if name in GENAI_ACTIVITIES or not temporal:
            # nested in the run's invoke_agent span (all of ours, without Temporal's spans)
            context = genai_spans.parent_context(genai_spans.agent_span_id(run_id), run_id)
            links = genai_spans.temporal_link()
        started_ns = time.time_ns()
        # before our span starts: Temporal's, in which a root's invoke_agent span is
        workflow_parent = genai_spans.workflow_parent()
        with (
            genai_spans.capturing(self.root.capture_content),
            self.root.tracer.start_as_current_span(
                _span_name(name, attributes),
                context=context,
                # a model call leaves the process (the conventions' kind for it)
                kind=SpanKind.CLIENT if name == ACTIVITY_CALL_MODEL else SpanKind.INTERNAL,
                attributes=attributes,
                links=links,
                record_exception=True,
                set_status_on_exception=True,
            ) as span,
        ):
            try:
                result = await super().execute_activity(input)
            except BaseException as error:
                span.set_attribute("error.type", _error_type(error))
                raise
            _result_attributes(span, result)
            self._emit_done(name, argument, result, started_ns, workflow_parent)
            return result

    def _input_attributes(self, name: str, argument: BaseModel) -> dict[str, AttributeValue]:
        ref = getattr(argument, "ref", None) or getattr(argument, "caller", None)
        attributes = _lineage(ref) if isinstance(ref, RunRef) else {}
        if name == ACTIVITY_CALL_MODEL:
            profile_id = str(getattr(argument, "model_profile_id", ""))
            attributes["gen_ai.operation.name"] = "chat"
            attributes["otherone.model_profile_id"] = profile_id
            attributes["otherone.profile"] = profile_id
            attributes["otherone.turn"] = int(getattr(argument, "turn", 0))
            attributes.update(self.root.model_attributes(profile_id))
            fallback_from = getattr(argument, "fallback_from", None)
            if fallback_from:  # this profile answers a turn the run's model could not
                attributes["otherone.model_fallback_from"] = str(fallback_from)
        elif name == ACTIVITY_RUN_TOOL:
            attributes.update(self._tool_attributes(getattr(argument, "call", None)))
        elif name == ACTIVITY_HAND_OFF:
            step = getattr(argument, "step", None)
            attributes.update(_tool(HANDOFF_TOOL, str(getattr(step, "call_id", ""))))
            attributes["otherone.handoff.from_agent"] = str(getattr(step, "from_agent", ""))
            attributes["otherone.handoff.to_agent"] = str(getattr(step, "to_agent", ""))
        elif name == ACTIVITY_PREPARE_CALL:
            request = getattr(argument, "request", None)
            attributes["otherone.agent_call.target"] = str(getattr(request, "target", ""))
            attributes["otherone.agent_call.id"] = str(getattr(argument, "call_id", ""))
        elif name == ACTIVITY_RUN_GUARDRAIL:
            check = getattr(argument, "check", None)
            attributes["otherone.guardrail.name"] = str(getattr(argument, "name", ""))
            attributes["otherone.guardrail.kind"] = str(getattr(check, "kind", ""))
            attributes["otherone.run_id"] = str(getattr(check, "run_id", ""))
            attributes["otherone.agent_id"] = str(getattr(check, "agent_id", ""))
        elif name == ACTIVITY_FINISH_RUN:
            attributes["otherone.run.status"] = str(getattr(argument, "status", ""))
        return attributes

    def _tool_attributes(self, call: object) -> dict[str, AttributeValue]:
        tool_name, call_id = str(getattr(call, "name", "")), str(getattr(call, "id", ""))
        attributes = _tool(tool_name, call_id)
        # kept from before the conventions' names (dashboards may use them)
        attributes["otherone.tool.name"] = tool_name
        attributes["otherone.tool.call_id"] = call_id
        if self.root.capture_content:
            arguments = getattr(call, "arguments", "")
            attributes["gen_ai.tool.call.arguments"] = genai_spans.bounded_text(arguments)
        return attributes

    def _emit_done(
        self,
        name: str,
        argument: object,
        result: object,
        started_ns: int,
        workflow_parent: Context | None,
    ) -> None:
        """The spans an activity emits once it succeeded: a run's ``invoke_agent`` (at its
        finish), an agent call's ``execute_tool`` (once the call was checked)."""
        emitter = self.root.emitter()
        if emitter is None:
            return
        if name == ACTIVITY_FINISH_RUN and isinstance(argument, FinishRunInput):
            record = result if isinstance(result, RunRecord) else argument.record
            if record is not None:
                _emit_run(emitter, argument.ref, record, workflow_parent)
        elif name == ACTIVITY_PREPARE_CALL and isinstance(argument, PrepareCallInput):
            caller = argument.caller
            genai_spans.call_span(
                emitter,
                caller_run_id=caller.run_id,
                root_run_id=caller.root_run_id,
                call_id=argument.call_id,
                tool_name=AGENT_SPAWN_TOOL if argument.spawned else AGENT_CALL_TOOL,
                attributes={
                    **_lineage(caller),
                    "otherone.agent_call.target": argument.request.target,
                    "otherone.agent_call.child_run_id": argument.child_run_id or "",
                },
                started_ns=started_ns,
            )


def _tool(tool_name: str, call_id: str) -> dict[str, AttributeValue]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
    }


def _error_type(error: BaseException) -> str:
    if isinstance(error, ApplicationError) and error.type:
        return error.type
    return type(error).__name__


def _emit_run(
    emitter: SdkTracer, ref: RunRef, record: RunRecord, workflow_parent: Context | None
) -> None:
    first_agent = record.handoffs[0].from_agent if record.handoffs else record.agent_id
    usage = record.usage
    attributes: dict[str, AttributeValue] = {
        **_lineage(ref),
        **_agent(first_agent, ref.session_id or record.session_id or ""),
        "gen_ai.operation.name": "invoke_agent",
        "otherone.run.status": record.status.value,
        "otherone.model_calls": usage.model_calls,
        "otherone.tool_calls": usage.tool_calls,
        "otherone.agent_calls": usage.agent_calls,
    }
    attributes.update(_usage_attributes(usage))
    if record.handoffs:
        attributes["otherone.handoffs"] = [
            f"{step.from_agent}->{step.to_agent}" for step in record.handoffs
        ]
        attributes["otherone.agent_id"] = record.agent_id  # the agent it ended with
    failed = record.status is not RunStatus.COMPLETED
    genai_spans.run_span(
        emitter,
        run_id=ref.run_id,
        root_run_id=ref.root_run_id,
        parent_run_id=ref.parent_run_id,
        agent_call_id=ref.agent_call_id,
        attributes=attributes,
        started_at=record.started_at,
        finished_at=record.finished_at,
        error=(record.failure.code.value if record.failure else record.status.value)
        if failed
        else None,
        root_parent=workflow_parent,
    )


def _agent(agent_id: str, session_id: str) -> dict[str, AttributeValue]:
    return {
        "gen_ai.agent.id": agent_id,
        "gen_ai.agent.name": agent_id,
        "gen_ai.conversation.id": session_id,
    }


def _usage_attributes(usage: object) -> dict[str, AttributeValue]:
    """Token usage and cost by the conventions' names (set only when known)."""
    named = {
        "gen_ai.usage.input_tokens": getattr(usage, "input_tokens", None),
        "gen_ai.usage.output_tokens": getattr(usage, "output_tokens", None),
        "gen_ai.usage.cache_read.input_tokens": getattr(usage, "cache_read_tokens", None),
        "gen_ai.usage.cache_creation.input_tokens": getattr(usage, "cache_write_tokens", None),
        "otherone.usage.total_tokens": getattr(usage, "total_tokens", None),
    }
    attributes: dict[str, AttributeValue] = {k: v for k, v in named.items() if v is not None}
    cost = getattr(usage, "cost", None)
    if cost is not None:
        attributes["otherone.cost_usd"] = float(cost)
    return attributes


def annotate_run(ref: RunRef) -> None:
    """Name the run on the current activity's span and metrics. Model and tool inputs carry only
    the key of the run's reference, resolved inside the activity after the span began
    (`otherone.activities.run_refs`), so the span gets the lineage then."""
    note_run(ref)
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attributes(_lineage(ref))
    if isinstance(span, ReadableSpan) and span.name.startswith(("chat", "execute_tool")):
        span.set_attributes(_agent(ref.agent_id, ref.session_id))


def _lineage(ref: RunRef) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "otherone.run_id": ref.run_id,
        "otherone.root_run_id": ref.root_run_id,
        "otherone.agent_id": ref.agent_id,
        "otherone.depth": ref.depth,
        "otherone.session_id": ref.session_id,
        "otherone.partition": ref.partition_key,
    }
    if ref.parent_run_id is not None:
        attributes["otherone.parent_run_id"] = ref.parent_run_id
    return attributes


def _result_attributes(span: Span, result: object) -> None:
    if isinstance(result, ModelTurn):
        span.set_attributes(_usage_attributes(result))
        if result.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
        span.set_attribute("otherone.tool_calls", len(result.tool_calls))
        if result.capacity_wait is not None:
            span.set_attribute("otherone.capacity_wait", True)
    elif isinstance(result, ToolOutcome):
        span.set_attribute("otherone.tool.result_bytes", result.result_bytes)
        if result.error_kind is not None:
            span.set_attribute("otherone.tool.error_kind", str(result.error_kind))
            span.set_attribute("error.type", str(result.error_kind))
            span.set_status(Status(StatusCode.ERROR, result.error or str(result.error_kind)))
    elif isinstance(result, GuardrailVerdict):
        span.set_attribute("otherone.guardrail.tripped", result.tripped)
        if result.tripped:
            span.set_attribute("otherone.guardrail.reason", result.reason[:500])
    elif isinstance(result, RunPlan):
        span.set_attribute("otherone.model_profile_id", result.model_profile_id)
        span.set_attribute("otherone.agent_version", result.agent_version)


__all__ = [
    "SPAN_NAMES",
    "TRACER_NAME",
    "OtheroneActivityInterceptor",
    "annotate_run",
]
