"""Result contracts on a run's final answer: ``text``, ``auto`` (JSON when it parses), ``json``."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import exceptions as schema_errors
from jsonschema import validators

from otherone.runs import AgentOutput, ResultContract


def apply_result_contract(
    text: str, contract: ResultContract | None
) -> tuple[AgentOutput, str | None]:
    """The output under ``contract`` and, when it is violated, why (else None)."""
    if contract is None or contract.kind == "text":
        return AgentOutput(type="text", value=text), None
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as error:
        if contract.kind == "auto":
            return AgentOutput(type="text", value=text), None
        return AgentOutput(type="text", value=text), f"invalid JSON Agent output: {error}"
    if contract.kind == "json" and contract.json_schema is not None:
        problem = _schema_problem(value, contract.json_schema)
        if problem is not None:
            return AgentOutput(type="json", value=value), problem
    return AgentOutput(type="json", value=value), None


def _schema_problem(value: Any, schema: dict[str, Any]) -> str | None:
    validator_class = validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except schema_errors.SchemaError as error:
        return f"Agent result JSON schema is invalid: {error.message}"
    mismatch = schema_errors.best_match(validator_class(schema).iter_errors(value))
    if mismatch is None:
        return None
    where = "/".join(str(part) for part in mismatch.absolute_path) or "(root)"
    return f"Agent output does not match the result schema at {where}: {mismatch.message}"
