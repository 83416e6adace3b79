"""Guardrails: checks on a run's input, its final answer and its tool calls.

A guardrail is a Python function (sync or async) over a `GuardrailCheck` returning a
`GuardrailResult` (passed, or tripped with a reason and optional data), registered on the
worker like a tool (``RuntimeConfig(guardrails=[...])``, ``[runtime] guardrails`` in TOML)
and named per agent, per tool and in the runtime policy (`otherone.guardrail_policy`). Each
call runs as an activity (timeouts, retries); the run's workflow decides on its verdict
(`otherone.workflows.guardrail_steps`). Built-in ones are in `otherone.guardrails.builtin`.
"""

from __future__ import annotations

from otherone.guardrail_policy import GuardrailPolicy
from otherone.guardrails.decorator import guardrail
from otherone.guardrails.registry import GuardrailRegistry, load_guardrail
from otherone.guardrails.spec import (
    GuardrailCheck,
    GuardrailDefinitionError,
    GuardrailKind,
    GuardrailResult,
    GuardrailResultError,
    GuardrailSpec,
)

__all__ = [
    "GuardrailCheck",
    "GuardrailDefinitionError",
    "GuardrailKind",
    "GuardrailPolicy",
    "GuardrailRegistry",
    "GuardrailResult",
    "GuardrailResultError",
    "GuardrailSpec",
    "guardrail",
    "load_guardrail",
]
