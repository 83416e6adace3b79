"""The arguments model of a tool and the JSON schema the model is shown, built from it."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic.fields import FieldInfo

from otherone.tools.errors import ToolDefinitionError

# JSON-schema keys whose value maps *names* to schemas: their keys are never schema keywords.
_SCHEMA_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
# JSON-schema keys whose value is data, not a schema: never rewritten.
_SCHEMA_DATA_KEYS = frozenset({"default", "const", "enum", "examples", "required"})


def _build_arguments_model(
    name: str, parameters: list[inspect.Parameter], docs: Mapping[str, str]
) -> type[BaseModel]:
    """One pydantic model for all parameters: it both produces the schema and validates calls.

    Fields get neutral internal names and the parameter name as alias, so parameters such as
    ``json``, ``schema`` or ``_private`` cannot clash with ``BaseModel`` attributes.
    """
    fields: dict[str, Any] = {}
    for index, parameter in enumerate(parameters):
        _check_schema_able(name, parameter)
        fields[f"arg{index}"] = (parameter.annotation, _field_info(parameter, docs))
    try:
        return create_model(f"{name}.arguments", __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {name!r}: cannot build its arguments model: {exc}"
        ) from exc


def _field_info(parameter: inspect.Parameter, docs: Mapping[str, str]) -> FieldInfo:
    """Alias, default and (unless ``Annotated`` already gives one) the docstring description."""
    default = ... if parameter.default is parameter.empty else parameter.default
    description = docs.get(parameter.name)
    if description and not _has_annotated_description(parameter.annotation):
        info: FieldInfo = Field(default, alias=parameter.name, description=description)
        return info
    info = Field(default, alias=parameter.name)
    return info


def _has_annotated_description(annotation: Any) -> bool:
    """Whether ``Annotated[..., Field(description=...)]`` already describes the parameter."""
    if get_origin(annotation) is not Annotated:
        return False
    return any(isinstance(meta, FieldInfo) and meta.description for meta in get_args(annotation))


def _check_schema_able(name: str, parameter: inspect.Parameter) -> None:
    """Fail at definition time, naming the parameter, if its type has no JSON schema."""
    try:
        TypeAdapter(parameter.annotation).json_schema()
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {name!r}: parameter {parameter.name!r} has type {parameter.annotation!r}, "
            f"which cannot be described as JSON schema: {exc}"
        ) from exc


def _parameters_schema(name: str, model: type[BaseModel]) -> dict[str, Any]:
    """The model-facing schema: an object with properties, required and no extra properties."""
    try:
        raw = _strip_titles(model.model_json_schema(by_alias=True))
    except Exception as exc:
        raise ToolDefinitionError(f"tool {name!r}: cannot produce a JSON schema: {exc}") from exc
    schema: dict[str, Any] = {
        "type": "object",
        "properties": raw.get("properties", {}),
        "required": raw.get("required", []),
        "additionalProperties": False,
    }
    if "$defs" in raw:
        schema["$defs"] = raw["$defs"]
    return schema


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's generated ``title`` keywords: noise for a model, and tokens on every call.

    Property names and data (defaults, enums) are left alone even when they are spelled "title".
    """
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_NAME_MAPS and isinstance(value, dict):
            cleaned[key] = {member: _strip_titles(sub) for member, sub in value.items()}
        elif key in _SCHEMA_DATA_KEYS:
            cleaned[key] = value
        else:
            cleaned[key] = _strip_titles(value)
    return cleaned
