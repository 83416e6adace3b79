"""Guardrails in the run's loop: each one an activity, its verdict decided here.

Where they run (`turns`, `tool_steps`): input guardrails on the user messages a turn takes (a
root's input, queued messages) before its model call; output guardrails on a final answer that
met the result contract; tool guardrails on a call's arguments right before the tool would run
(after a person's approval and edits). Guardrails of one place run one after the other in
their declared order (the runtime policy's, then the agent's) and the first trip stops the
rest: nothing after a trip runs. Every verdict is an event (`guardrail_passed`,
`guardrail_tripped`, `guardrail_failed`), decided here and stored by the run's next activity.
"""

from __future__ import annotations

import json
from datetime import timedelta

from pydantic import JsonValue
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import (
        ACTIVITY_RUN_GUARDRAIL,
        GuardrailCallInput,
        GuardrailSettings,
        GuardrailVerdict,
        PendingEntry,
        RunPlan,
        RunRef,
        ToolCallSpec,
        ToolOutcome,
    )
    from otherone.errors import FailureCode
    from otherone.guardrails import GuardrailCheck
    from otherone.runs import AgentFailure, AgentOutput
    from otherone.tools import ToolErrorKind
    from otherone.workflows.outcomes import DecidedEvents, Ending, failure_from_activity_error

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.activity_options import HEARTBEAT_TIMEOUT, reraise_cancellation

#: Longest reason kept in an event or a failure message.
MAX_REASON_CHARS = 2000


class GuardrailBroken(Exception):
    """A guardrail could not decide (kept raising, timed out, wrong result, unknown on the
    worker): the run ends with ``ending`` (``guardrail_failed``)."""

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.failure.message if ending.failure else "guardrail failed")
        self.ending = ending


async def first_trip(
    plan: RunPlan,
    guards: tuple[GuardrailSettings, ...],
    check: GuardrailCheck,
    decided: DecidedEvents,
    output: AgentOutput | None = None,
    tool_result_of: str | None = None,
) -> GuardrailVerdict | None:
    """Run ``guards`` in order over ``check``; the first tripped verdict, or None when all
    passed. Raises `GuardrailBroken` when one cannot decide, `CancelledError` when cancelled.
    ``output`` / ``tool_result_of``: what the activity reads back as the check's text."""
    call = GuardrailCallInput(name="", check=check, output=output, tool_result_of=tool_result_of)
    for guard in guards:
        verdict = await _run_one(plan, guard, call.model_copy(update={"name": guard.name}), decided)
        decided.add(verdict_event(verdict, check))
        if verdict.tripped:
            return verdict
    return None


async def _run_one(
    plan: RunPlan, guard: GuardrailSettings, call: GuardrailCallInput, decided: DecidedEvents
) -> GuardrailVerdict:
    check = call.check
    try:
        verdict: GuardrailVerdict = await workflow.execute_activity(
            ACTIVITY_RUN_GUARDRAIL,
            call,
            result_type=GuardrailVerdict,
            task_queue=plan.tool_task_queue,  # user code, where the tools run
            start_to_close_timeout=timedelta(seconds=guard.timeout_seconds),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1), maximum_attempts=guard.max_attempts
            ),
            summary=f"guardrail {guard.name} ({check.kind})",
        )
    except ActivityError as error:
        reraise_cancellation(error)
        cause = failure_from_activity_error(error, default=FailureCode.GUARDRAIL_FAILED).message
        message = f"{check.kind} guardrail '{guard.name}' failed: {cause}"
        decided.add(
            {
                "type": "guardrail_failed",
                "guardrail": guard.name,
                "kind": check.kind,
                "turn": check.turn,
                "error": _bounded(message),
            }
        )
        failure = AgentFailure(code=FailureCode.GUARDRAIL_FAILED, message=_bounded(message))
        raise GuardrailBroken(Ending.failed(failure)) from None
    return verdict


def verdict_event(verdict: GuardrailVerdict, check: GuardrailCheck) -> dict[str, JsonValue]:
    """`guardrail_passed` / `guardrail_tripped`: which guardrail, where, and why."""
    event: dict[str, JsonValue] = {
        "type": "guardrail_tripped" if verdict.tripped else "guardrail_passed",
        "guardrail": verdict.name,
        "kind": verdict.kind,
        "turn": check.turn,
    }
    if check.tool_call_id is not None:
        event["tool_call_id"] = check.tool_call_id
        event["tool"] = check.tool_name
    if verdict.tripped:
        event["reason"] = _bounded(verdict.reason)
        if verdict.data is not None:
            event["data"] = verdict.data
    return event


def tripped_failure(verdict: GuardrailVerdict) -> Ending:
    """The run's end for a trip that fails it (``guardrail_tripped``)."""
    message = f"{verdict.kind} guardrail '{verdict.name}' tripped: {_bounded(verdict.reason)}"
    return Ending.failed(AgentFailure(code=FailureCode.GUARDRAIL_TRIPPED, message=message))


# --------------------------------------------------------------------------- the checks


def is_user_input(entry: PendingEntry, *, root: bool) -> bool:
    """A user message the run takes now: a root's input, or one queued by a signal."""
    return entry.role == "user" and (entry.queued or (root and ":input:" in entry.key))


def input_check(ref: RunRef, plan: RunPlan, turn: int, texts: list[str]) -> GuardrailCheck:
    return GuardrailCheck(
        kind="input",
        run_id=ref.run_id,
        agent_id=plan.agent_id,
        turn=turn,
        partition_key=ref.partition_key,
        text="\n".join(texts),
    )


def output_check(
    ref: RunRef, plan: RunPlan, turn: int, output: AgentOutput
) -> tuple[GuardrailCheck, AgentOutput | None]:
    """The check of a final answer; an answer only referenced goes along for the activity to
    read back (its value is not in the workflow)."""
    check = GuardrailCheck(
        kind="output",
        run_id=ref.run_id,
        agent_id=plan.agent_id,
        turn=turn,
        partition_key=ref.partition_key,
    )
    if output.is_reference:
        return check, output
    text = output.value if isinstance(output.value, str) else json.dumps(output.value)
    return check.model_copy(update={"text": text, "output": output.value}), None


def tool_check(ref: RunRef, plan: RunPlan, turn: int, call: ToolCallSpec) -> GuardrailCheck:
    """The check of a tool call's arguments (None when they are not a JSON object: the tool
    would refuse them anyway, and the guardrail still sees their text)."""
    try:
        parsed = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        parsed = None
    return GuardrailCheck(
        kind="tool",
        run_id=ref.run_id,
        agent_id=plan.agent_id,
        turn=turn,
        partition_key=ref.partition_key,
        text=call.arguments,
        tool_name=call.name,
        tool_call_id=call.id,
        arguments=parsed if isinstance(parsed, dict) else None,
    )


def result_check(
    ref: RunRef, plan: RunPlan, turn: int, call: ToolCallSpec, content: str | None
) -> GuardrailCheck:
    """The check of a tool call's result (``content`` when it came back inline; else the
    activity reads the stored result)."""
    check = tool_check(ref, plan, turn, call)
    return check.model_copy(update={"kind": "tool_result", "text": content or ""})


def withheld(outcome: ToolOutcome, message: str, name: str, reason: str) -> ToolOutcome:
    """The outcome the model sees instead of a result a guardrail withheld (the tool ran; its
    stored result stays in the store, out of the session)."""
    if outcome.content is not None:  # inline: its entry carries the refusal (and its events)
        content = json.dumps({"error": message, "guardrail": name, "reason": _bounded(reason)})
        return outcome.model_copy(
            update={"content": content, "error_kind": ToolErrorKind.PERMISSION_DENIED}
        )
    return outcome.model_copy(
        update={"error_kind": ToolErrorKind.PERMISSION_DENIED, "error": message, "result_bytes": 0}
    )


async def guard_call(
    plan: RunPlan, ref: RunRef, turn: int, decided: DecidedEvents, call: ToolCallSpec
) -> PendingEntry | Ending | None:
    """A call's tool guardrails, right before it would run: None when they all pass, else the
    refusal the model sees or the run's end (as the plan says)."""
    guards = plan.guardrails.tools.get(call.name, ()) if plan.guardrails else ()
    if not guards:
        return None
    assert plan.guardrails is not None
    try:
        tripped = await first_trip(plan, guards, tool_check(ref, plan, turn, call), decided)
    except GuardrailBroken as broken:
        return broken.ending
    if tripped is None:
        return None
    if plan.guardrails.on_tool_trip == "fail":
        return tripped_failure(tripped)
    return refused_entry(call, tripped)


async def guard_result(
    plan: RunPlan,
    ref: RunRef,
    turn: int,
    decided: DecidedEvents,
    call: ToolCallSpec,
    outcome: ToolOutcome,
) -> tuple[ToolOutcome, Ending | None]:
    """A call's result guardrails, after it ran and before the model sees it: the outcome (or
    one withholding the result), and the run's end when a trip fails it or one cannot decide."""
    guards = plan.guardrails.tool_results.get(call.name, ()) if plan.guardrails else ()
    if not guards or outcome.error_kind is not None or outcome.oversized:
        return outcome, None
    assert plan.guardrails is not None
    check = result_check(ref, plan, turn, call, outcome.content)
    stored = None if outcome.content is not None else call.id
    try:
        tripped = await first_trip(plan, guards, check, decided, tool_result_of=stored)
    except GuardrailBroken as broken:
        message = "a result guardrail could not decide; the result is withheld"
        return withheld(outcome, message, "", ""), broken.ending
    if tripped is None:
        return outcome, None
    message = f"guardrail '{tripped.name}' withheld this call's result: {_bounded(tripped.reason)}"
    ending = tripped_failure(tripped) if plan.guardrails.on_tool_trip == "fail" else None
    return withheld(outcome, message, tripped.name, tripped.reason), ending


def refused_entry(call: ToolCallSpec, verdict: GuardrailVerdict) -> PendingEntry:
    """The structured refusal the model sees instead of a tool result (nothing ran; the key is
    set with the turn's entries)."""
    content: dict[str, JsonValue] = {
        "error": f"guardrail '{verdict.name}' refused this call; nothing was executed",
        "guardrail": verdict.name,
        "reason": _bounded(verdict.reason),
    }
    return PendingEntry(
        key="",
        role="tool",
        content=json.dumps(content),
        tool_call_id=call.id,
        tool_name=call.name,
        error_kind=ToolErrorKind.PERMISSION_DENIED,
    )


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS] + "…"
