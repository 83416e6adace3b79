"""`run_guardrail`: one guardrail over one check, on the worker that registered it.

The verdict goes back to the workflow, which decides what a trip does and announces it (its
`guardrail_passed` / `guardrail_tripped` events are decided there, so a retried attempt never
announces twice). A guardrail that raises is retried by Temporal (its ``max_attempts``); one
that cannot decide at all (not registered here, a wrong result type) fails at once.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from otherone.activities.shared import ActivityContext
from otherone.contracts import GUARDRAIL_BROKEN, GuardrailCallInput, GuardrailVerdict
from otherone.guardrails import GuardrailCheck, GuardrailResultError


async def run_guardrail(context: ActivityContext, input: GuardrailCallInput) -> GuardrailVerdict:
    spec = context.config.guardrails.get(input.name)
    if spec is None:
        raise ApplicationError(
            f"guardrail '{input.name}' is not registered on this worker",
            type=GUARDRAIL_BROKEN,
            non_retryable=True,
        )
    check = await _with_output(context, input)
    try:
        result = await spec.evaluate(check)
    except GuardrailResultError as wrong:
        _count(input.name, check.kind, "error")
        raise ApplicationError(str(wrong), type=GUARDRAIL_BROKEN, non_retryable=True) from None
    except Exception as error:
        _count(input.name, check.kind, "error")
        # Retried (the activity's retry policy); the message names the guardrail.
        raise ApplicationError(
            f"guardrail '{input.name}' raised {type(error).__name__}: {error}",
            type="guardrail_raised",
        ) from None
    _count(input.name, check.kind, "tripped" if result.tripped else "passed")
    return GuardrailVerdict(
        name=input.name,
        kind=check.kind,
        tripped=result.tripped,
        reason=result.reason,
        data=result.data,
    )


async def _with_output(context: ActivityContext, input: GuardrailCallInput) -> GuardrailCheck:
    """The check, with an answer that travels as an artifact reference, or a tool result the
    tool activity stored, read back first."""
    if input.tool_result_of is not None:
        check = input.check
        stored = await context.io(
            context.store.get_tool_results,
            check.partition_key,
            check.run_id,
            [input.tool_result_of],
        )
        return check.model_copy(update={"text": stored.get(input.tool_result_of, "")})
    output = input.output
    if output is None:
        return input.check
    if output.is_reference:
        output = await context.io(context.store.resolve_output, output)
    return input.check.model_copy(update={"output": output.value, "text": output.text})


def _count(name: str, kind: str, verdict: str) -> None:
    """Prometheus (with ``OTHERONE_METRICS_PORT``, through Temporal's runtime): verdicts per
    guardrail (``passed``, ``tripped``, ``error``: an attempt that raised or answered wrongly)."""
    counter = activity.metric_meter().create_counter(
        "otherone_guardrail_verdicts", "Guardrail verdicts by guardrail, kind and verdict"
    )
    counter.add(1, {"guardrail": name, "kind": kind, "verdict": verdict})
