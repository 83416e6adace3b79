"""Typed results: ``await agents.run(request, output_type=Invoice)`` returns a validated `Invoice`.

The type's JSON Schema becomes the request's result contract (``kind="json"``), so the run checks
every final answer against it (and lets the model retry, see `RuntimePolicy.output_retries`);
the client then validates the output with pydantic, which is the final word: a value the JSON
Schema let through but pydantic refuses (a custom validator, say) raises `OutputValidationError`.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import PydanticUserError, TypeAdapter, ValidationError

from otherone.errors import InvalidRequestError, OutputValidationError, RunFailedError
from otherone.runs import AgentRunRequest, AgentRunResult, ResultContract, RunOutcome

OutputT = TypeVar("OutputT")


def output_adapter(output_type: type[OutputT]) -> TypeAdapter[OutputT]:
    """A pydantic adapter of ``output_type`` (a `BaseModel` subclass, or any type pydantic can
    validate and describe in JSON Schema, e.g. ``list[Invoice]``)."""
    try:
        adapter = TypeAdapter(output_type)
        adapter.json_schema()
    except (PydanticUserError, TypeError) as error:
        raise InvalidRequestError(
            f"{output_type!r} has no JSON Schema: {error}", field="output_type"
        ) from None
    return adapter


def typed_request(request: AgentRunRequest, adapter: TypeAdapter[Any]) -> AgentRunRequest:
    """``request`` with the output type's contract. A request that already has a different
    contract is refused: two sources for one contract would be a guess."""
    contract = ResultContract(kind="json", json_schema=adapter.json_schema())
    if request.result_contract is None:
        return request.model_copy(update={"result_contract": contract})
    if request.result_contract != contract:
        raise InvalidRequestError(
            "differs from the JSON Schema of output_type: give one or the other",
            field="result_contract",
        )
    return request


def validated_output(result: AgentRunResult, output_type: type[OutputT]) -> OutputT:
    """The output of a completed run as ``output_type``: `RunFailedError` when the run did not
    complete, `OutputValidationError` (run id, raw output) when pydantic refuses the value."""
    return output_as(result, output_adapter(output_type))


def output_as(result: AgentRunResult, adapter: TypeAdapter[OutputT]) -> OutputT:
    """`validated_output` with an adapter made once (`output_adapter`)."""
    if result.outcome is not RunOutcome.COMPLETED:
        raise RunFailedError(result)
    output = result.output
    if output is None:
        raise OutputValidationError(result.run_id, None, "the run has no output")
    if output.is_reference:
        problem = "the output is stored as an artifact: give the AgentClient a store to read it"
        raise OutputValidationError(result.run_id, None, problem)
    if output.type != "json":
        raise OutputValidationError(result.run_id, output.value, "the output is text, not JSON")
    try:
        return adapter.validate_json(json.dumps(output.value))
    except ValidationError as error:
        raise OutputValidationError(result.run_id, output.value, _problems(error)) from None


def _problems(error: ValidationError, limit: int = 5) -> str:
    """``path: message`` of the first few problems."""
    found = [
        f"{'.'.join(str(part) for part in item['loc']) or '(root)'}: {item['msg']}"
        for item in error.errors(include_url=False)[:limit]
    ]
    more = error.error_count() - len(found)
    return "; ".join(found) + (f" (and {more} more)" if more > 0 else "")


__all__ = ["OutputT", "output_adapter", "output_as", "typed_request", "validated_output"]
