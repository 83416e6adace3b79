"""One call's data: the arguments a model sent, its validation errors, the JSON result."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

from otherone.tools.errors import ToolError

_MAX_REPORTED_PROBLEMS = 10


def parse_arguments(name: str, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """A tool call's arguments as an object: a mapping, or the raw JSON text a model produced
    (blank or ``null`` means none); anything else is `ToolError` (``invalid_arguments``)."""
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ToolError.invalid_arguments(
            f"invalid arguments for tool {name!r}: not valid JSON ({exc})"
        ) from None
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise ToolError.invalid_arguments(
            f"invalid arguments for tool {name!r}: expected a JSON object, "
            f"got {type(parsed).__name__}"
        )
    return parsed


def _describe_validation_error(name: str, error: ValidationError) -> str:
    """One line per problem, each naming the field path, so the model can fix its call."""
    problems = []
    for item in error.errors(include_url=False)[:_MAX_REPORTED_PROBLEMS]:
        location = ".".join(str(part) for part in item["loc"]) or "(arguments)"
        problems.append(f"{location}: {item['msg']}")
    more = error.error_count() - len(problems)
    if more > 0:
        problems.append(f"... and {more} more")
    return f"invalid arguments for tool {name!r}: " + "; ".join(problems)


@cache
def _result_adapter() -> TypeAdapter[Any]:
    """Built lazily: keeps import cheap and side-effect free."""
    return TypeAdapter(Any)


def _to_json(name: str, result: Any) -> Any:
    """Plain JSON data for Temporal's payload converter (models, dataclasses, enums, dates...).

    A result that cannot be serialised is a bug in the tool that retrying will not fix: FATAL.
    """
    try:
        data = _result_adapter().dump_python(result, mode="json")
        json.dumps(data, allow_nan=False)
    except Exception as exc:
        raise ToolError.fatal(
            f"tool {name!r} returned a result that is not JSON-serialisable "
            f"({type(result).__name__}): {exc}"
        ) from exc
    return data
