"""Checking result contracts where they enter, and telling a model what its answer must be.

A contract's JSON Schema is checked when a request enters (`AgentClient.start` and
`call_agent`, the HTTP API, the CLI; `prepare_run` / `prepare_call` for runs started by other
clients), so a broken schema is refused at once, naming the field, instead of failing the run at
its end. `jsonschema` is imported on first use: the CLI and workflow code never load it.
"""

from __future__ import annotations

import json
from typing import Any

from otherone.errors import InvalidRequestError
from otherone.runs import ResultContract


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not a usable JSON Schema (None: it is): its meta-schema refuses it, it
    refers to a schema outside itself (nothing is fetched while a run checks an answer), or it
    is nested deeper than the checks go (a few KB of nested ``items``: it was a 500 and a
    2,000-line traceback)."""
    try:
        return _problem(schema)
    except RecursionError:
        return "nested too deeply to be checked"


def _problem(schema: dict[str, Any]) -> str | None:
    from jsonschema import exceptions as schema_errors
    from jsonschema import validators

    validator_class = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except schema_errors.SchemaError as error:
        where = "/".join(str(part) for part in error.absolute_path)
        return f"not a valid JSON Schema{f' at {where}' if where else ''}: {error.message}"
    if _untimed_patterns(schema):
        # Its patterns would be matched by jsonschema itself, with no time limit
        # (`otherone.activities.bounded_patterns` limits the others).
        return (
            "'unevaluatedProperties' next to 'patternProperties' is not supported in result "
            "contracts"
        )
    external = _external_ref(schema)
    if external is not None:
        return f"refers to '{external}': only references inside the schema ('#...') are allowed"
    missing = _unresolvable_ref(schema)
    if missing is not None:
        return f"refers to '{missing}', which is not in the schema"
    looping = _ref_loop(schema)
    if looping is not None:
        return (
            f"'$ref' '{looping}' leads back to itself without going into the answer (checking "
            "any answer would never end)"
        )
    return None


#: Keywords whose subschemas apply to the same part of the answer as their parent.
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_SCHEMAS = ("not", "if", "then", "else")


def _ref_loop(schema: dict[str, Any]) -> str | None:
    """A ``$ref`` from which references (and ``allOf``-like keywords, which check the same
    value) lead back to it before any keyword goes into the value (``properties``, ``items``,
    ...): jsonschema would follow it until the interpreter's recursion limit, on every answer.
    Recursion through ``properties`` or ``items`` is fine (answers are finite)."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    if not _refs(schema) or _has_nested_id(schema, root=True):
        return None
    resource = Resource.from_contents(schema, default_specification=DRAFT202012)
    resolver = Registry().with_resource("", resource).resolver()

    def in_place(node: dict[str, Any]) -> list[tuple[Any, str | None]]:
        found: list[tuple[Any, str | None]] = []
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.append((resolver.lookup(ref).contents, ref))
        for key in _IN_PLACE_LISTS:
            children = node.get(key)
            if isinstance(children, list):
                found.extend((child, None) for child in children)
        found.extend((node[key], None) for key in _IN_PLACE_SCHEMAS if key in node)
        return [(child, ref) for child, ref in found if isinstance(child, dict)]

    visiting: set[int] = set()
    done: set[int] = set()

    def loop_from(node: dict[str, Any], via: str | None) -> str | None:
        if id(node) in done:
            return None
        if id(node) in visiting:
            return via or "#"
        visiting.add(id(node))
        for child, ref in in_place(node):
            looped = loop_from(child, ref or via)
            if looped is not None:
                return looped
        visiting.discard(id(node))
        done.add(id(node))
        return None

    return next((ref for node in _subschemas(schema) if (ref := loop_from(node, None))), None)


def _subschemas(value: Any) -> list[dict[str, Any]]:
    """Every object in ``value`` (each may be a schema a check starts from)."""
    if isinstance(value, dict):
        return [value, *(node for child in value.values() for node in _subschemas(child))]
    if isinstance(value, list):
        return [node for child in value for node in _subschemas(child)]
    return []


def _unresolvable_ref(schema: dict[str, Any]) -> str | None:
    """The first internal ``$ref`` that points at nothing (found while checking answers, it
    would fail every answer, and the model would be asked to retry for the schema's mistake).
    Schemas with nested ``$id``s (other bases for their references) are left to validation."""
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    refs = _refs(schema)
    if not refs or _has_nested_id(schema, root=True):
        return None
    resource = Resource.from_contents(schema, default_specification=DRAFT202012)
    resolver = Registry().with_resource("", resource).resolver()
    for ref in refs:
        try:
            resolver.lookup(ref)
        except Unresolvable:
            return ref
    return None


def _untimed_patterns(schema: Any) -> bool:
    """Whether some subschema has ``unevaluatedProperties`` next to ``patternProperties``."""
    if isinstance(schema, dict):
        if "unevaluatedProperties" in schema and "patternProperties" in schema:
            return True
        return any(_untimed_patterns(child) for child in schema.values())
    if isinstance(schema, list):
        return any(_untimed_patterns(child) for child in schema)
    return False


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        ref = value.get("$ref")
        found = [ref] if isinstance(ref, str) else []
        return found + [r for child in value.values() for r in _refs(child)]
    if isinstance(value, list):
        return [r for child in value for r in _refs(child)]
    return []


def _has_nested_id(value: Any, *, root: bool = False) -> bool:
    if isinstance(value, dict):
        if not root and isinstance(value.get("$id"), str):
            return True
        return any(_has_nested_id(child) for child in value.values())
    if isinstance(value, list):
        return any(_has_nested_id(child) for child in value)
    return False


def _external_ref(schema: dict[str, Any]) -> str | None:
    """The first ``$ref`` that points outside the document, if any."""
    return next((ref for ref in _refs(schema) if not ref.startswith("#")), None)


def contract_problem(contract: ResultContract | None) -> str | None:
    """``schema: why`` when the contract's schema is unusable, else None."""
    if contract is None or contract.json_schema is None:
        return None
    problem = schema_problem(contract.json_schema)
    return None if problem is None else f"schema: {problem}"


def check_contract(contract: ResultContract | None, field: str = "result_contract") -> None:
    """`InvalidRequestError` naming ``<field>.schema`` when the contract's schema is unusable."""
    problem = contract_problem(contract)
    if problem is not None:
        name, _, message = problem.partition(": ")
        raise InvalidRequestError(message, field=f"{field}.{name}")


def contract_instructions(contract: ResultContract | None) -> str:
    """What the system prompt says about the final answer ("" when any text will do), so that
    a first answer can already fit the contract."""
    if contract is None or contract.kind != "json":
        return ""
    text = (
        "\n\nYour final answer (the reply without tool calls) must be a single JSON value and "
        "nothing else: no prose around it, no Markdown code fence."
    )
    if contract.json_schema is not None:
        schema = json.dumps(contract.json_schema, ensure_ascii=False, separators=(",", ":"))
        text += f" It must be valid for this JSON Schema:\n{schema}"
    return text


__all__ = ["check_contract", "contract_instructions", "contract_problem", "schema_problem"]
