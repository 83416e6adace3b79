"""MCP tool calls as the model sees them: arguments checked first, results mapped to JSON.

Arguments are validated against the input schema frozen in the run's snapshot before the server
is called, so a model that sends bad arguments gets the validation error as its tool result
(and the server never sees them). A result becomes one JSON object: ``text`` (the text blocks),
``structured_content`` (when the server sent it), and ``content`` for everything else: images,
audio and binary resources are stored as artifacts and referenced (``artifact_id``), text
resources and resource links are inlined. ``isError`` results go to the model as tool errors.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import Any

import jsonschema
import referencing.exceptions
from mcp import types as mcp_types

from otherone.activities.bounded_patterns import PatternTimeout, bounded_validator
from otherone.runs import ArtifactRef
from otherone.tools import ToolError, parse_arguments

__all__ = ["BlobSaver", "decode_blob", "map_result", "validate_arguments"]

#: Stores one binary block and returns its reference (``name`` is unique within the call).
BlobSaver = Callable[[str, bytes, str], Awaitable[ArtifactRef]]

_MAX_REPORTED_PROBLEMS = 10


def validate_arguments(tool: str, schema: dict[str, Any], arguments: str) -> dict[str, Any]:
    """The arguments as an object valid for ``schema``, else ToolError(INVALID_ARGUMENTS).

    The schema is the server's, not ours: its regular expressions run under a time budget
    (`bounded_validator`; one like ``^(a|aa)+$`` takes exponential time on a model's argument,
    and Python's `re` held the interpreter meanwhile, stalling every run of the worker); one
    that runs past it leaves the arguments to the server, as does a schema that cannot be used
    (broken, or a ``$ref`` that resolves nowhere)."""
    data = parse_arguments(tool, arguments)
    validator_class = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        return data  # the server's schema is broken: let the server judge the arguments
    try:
        errors = sorted(
            bounded_validator(schema).iter_errors(data), key=lambda error: list(error.path)
        )
    except (jsonschema.exceptions.SchemaError, referencing.exceptions.Unresolvable):
        return data  # e.g. a reference to another document: not fetched, the server judges
    except PatternTimeout:
        return data  # a pattern too slow to run here: the server checks its own
    if errors:
        problems = [
            f"{'.'.join(str(part) for part in error.path) or '(arguments)'}: {error.message}"
            for error in errors[:_MAX_REPORTED_PROBLEMS]
        ]
        if len(errors) > _MAX_REPORTED_PROBLEMS:
            problems.append(f"... and {len(errors) - _MAX_REPORTED_PROBLEMS} more")
        raise ToolError.invalid_arguments(
            f"invalid arguments for tool '{tool}': " + "; ".join(problems)
        )
    return data


async def map_result(
    result: mcp_types.CallToolResult, save_blob: BlobSaver
) -> tuple[dict[str, Any], bool]:
    """The JSON the model gets, and whether the server flagged the result as an error."""
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    for index, block in enumerate(result.content):
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        else:
            others.append(await _block(index, block, save_blob))
    mapped: dict[str, Any] = {}
    text = "\n".join(texts)
    structured = result.structured_content
    if text and not (structured is not None and _same_json(text, structured)):
        mapped["text"] = text
    if structured is not None:
        mapped["structured_content"] = structured
    if others:
        mapped["content"] = others
    return mapped, bool(result.is_error)


async def _block(index: int, block: Any, save_blob: BlobSaver) -> dict[str, Any]:
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        artifact = await save_blob(
            f"{block.type} {index}", decode_blob(block.data), block.mime_type
        )
        return {"type": block.type, **_reference(artifact)}
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return {
                "type": "resource",
                "uri": resource.uri,
                "mime_type": resource.mime_type,
                "text": resource.text,
            }
        media_type = resource.mime_type or "application/octet-stream"
        artifact = await save_blob(f"resource {index}", decode_blob(resource.blob), media_type)
        return {"type": "resource", "uri": resource.uri, **_reference(artifact)}
    if isinstance(block, mcp_types.ResourceLink):
        link = {"type": "resource_link", "uri": block.uri, "name": block.name}
        if block.mime_type:
            link["mime_type"] = block.mime_type
        if block.description:
            link["description"] = block.description
        return link
    return {"type": str(getattr(block, "type", "unknown"))}


def _reference(artifact: ArtifactRef) -> dict[str, Any]:
    return {
        "artifact_id": artifact.artifact_id,
        "mime_type": artifact.media_type,
        "size_bytes": artifact.size_bytes,
    }


def decode_blob(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return data.encode()  # not base64 after all: keep what the server sent


def _same_json(text: str, structured: Any) -> bool:
    """The text block that merely repeats the structured content (the spec's compatibility
    copy) is left out: the model would read the same data twice (and a large result would
    count twice against `max_result_bytes`). Servers built with FastMCP wrap a value that is
    not an object as ``{"result": value}`` and send the bare value as the text."""
    candidates = [structured]
    if isinstance(structured, dict) and set(structured) == {"result"}:
        candidates.append(structured["result"])
    if any(text == candidate for candidate in candidates):
        return True
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return False
    return any(parsed == candidate for candidate in candidates)


def error_message(mapped: dict[str, Any]) -> str:
    """What an ``isError`` result says, for the model's tool error."""
    text = mapped.get("text")
    if isinstance(text, str) and text.strip():
        return text
    return json.dumps(mapped, ensure_ascii=False) if mapped else "the tool reported an error"
