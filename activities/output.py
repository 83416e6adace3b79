"""Result contracts on a run's final answer: ``text``, ``auto`` (JSON when it parses), ``json``."""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import exceptions as schema_errors

from otherone.activities.bounded_patterns import (
    PATTERN_BUDGET_SECONDS,
    PatternTimeout,
    bounded_validator,
)
from otherone.result_contracts import schema_problem
from otherone.runs import AgentOutput, ResultContract

#: A whole answer wrapped in one Markdown code fence (models add them despite being told not to).
_FENCED = re.compile(r"\A\s*```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*?)\n?```\s*\Z", re.DOTALL)


def apply_result_contract(
    text: str, contract: ResultContract | None
) -> tuple[AgentOutput, str | None]:
    """The output under ``contract`` and, when it is violated, why (else None)."""
    if contract is None or contract.kind == "text":
        return AgentOutput(type="text", value=text), None
    try:
        value: Any = json.loads(_unfenced(text) if contract.kind == "json" else text)
    except json.JSONDecodeError as error:
        if contract.kind == "auto":
            return AgentOutput(type="text", value=text), None
        return AgentOutput(type="text", value=text), f"invalid JSON Agent output: {error}"
    if contract.kind == "json" and contract.json_schema is not None:
        problem = _schema_problem(value, contract.json_schema)
        if problem is not None:
            return AgentOutput(type="json", value=value), problem
    return AgentOutput(type="json", value=value), None


def _unfenced(text: str) -> str:
    """The JSON inside a single code fence that wraps the whole answer, else the answer."""
    fenced = _FENCED.match(text)
    return fenced.group("body") if fenced else text


def _schema_problem(value: Any, schema: dict[str, Any]) -> str | None:
    unusable = schema_problem(schema)
    if unusable is not None:
        return f"Agent result JSON schema is invalid: {unusable}"
    try:
        mismatch = schema_errors.best_match(bounded_validator(schema).iter_errors(value))
    except PatternTimeout as slow:
        return (
            f"Agent output could not be checked: the result schema's pattern {slow.pattern!r} "
            f"ran longer than {PATTERN_BUDGET_SECONDS:g}s on it (patterns are time-limited)"
        )
    except Exception as error:  # e.g. a reference the schema cannot resolve: not the model's fault
        return f"Agent result JSON schema cannot be applied: {type(error).__name__}: {error}"
    if mismatch is None:
        return None
    where = "/".join(str(part) for part in mismatch.absolute_path) or "(root)"
    return f"Agent output does not match the result schema at {where}: {mismatch.message}"
