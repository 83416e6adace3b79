"""Guardrails in a run: which ones its plan names, what one guardrail activity is asked, and
the verdict it answers (`otherone.guardrails`, `otherone.workflows.guardrail_steps`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from otherone.contracts.refs import _Contract
from otherone.guardrail_policy import InputMode, OutputTrip, ToolTrip
from otherone.guardrails.spec import GuardrailCheck
from otherone.runs import AgentOutput

#: The error type of a guardrail activity that cannot decide (unknown on the worker, a wrong
#: result type): not retried, the run fails with ``guardrail_failed``.
GUARDRAIL_BROKEN = "guardrail_broken"


class GuardrailSettings(_Contract):
    """How the workflow runs one guardrail (its activity's timeout and attempts)."""

    name: str
    timeout_seconds: float
    max_attempts: int


class GuardrailPlan(_Contract):
    """A run's guardrails, resolved once by `prepare_run` (runtime policy's, then the agent's)."""

    input: tuple[GuardrailSettings, ...] = ()
    output: tuple[GuardrailSettings, ...] = ()
    #: Per tool name the run may call: the guardrails on its arguments.
    tools: dict[str, tuple[GuardrailSettings, ...]] = Field(default_factory=dict)
    #: Per tool name the run may call: the guardrails on its results.
    tool_results: dict[str, tuple[GuardrailSettings, ...]] = Field(default_factory=dict)
    input_mode: InputMode = "before"
    on_output_trip: OutputTrip = "fail"
    on_tool_trip: ToolTrip = "refuse"


class GuardrailCallInput(_Contract):
    """Activity input: run guardrail ``name`` over ``check``. An output that travels as an
    artifact reference (``output``) is read back from the store by the activity."""

    name: str
    check: GuardrailCheck
    output: AgentOutput | None = None
    #: A tool call whose stored result is the check's text (read back by the activity: results
    #: over the inline limit never pass through the workflow).
    tool_result_of: str | None = None


class GuardrailVerdict(_Contract):
    """Activity result: the guardrail's verdict (what the workflow decides on)."""

    name: str
    kind: Literal["input", "output", "tool", "tool_result"]
    tripped: bool = False
    reason: str = ""
    data: JsonValue = None


__all__ = [
    "GUARDRAIL_BROKEN",
    "GuardrailCallInput",
    "GuardrailPlan",
    "GuardrailSettings",
    "GuardrailVerdict",
]
