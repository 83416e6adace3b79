"""A model call's image and file parts, checked against its profile and given their bytes
(read from the run's own partition) just before the provider is called."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from otherone.activities.message_parts import (
    TOOL_IMAGES_KEY,
    PartUnavailable,
    modalities_used,
    resolve_parts,
    stored_id,
)
from otherone.activities.providers.base import ModelRequest
from otherone.activities.shared import failure
from otherone.contracts import RunRef
from otherone.errors import FailureCode
from otherone.model_modalities import input_modalities, modality_problem

if TYPE_CHECKING:
    from otherone.activities.shared import ActivityContext


async def with_part_bytes(
    context: ActivityContext, request: ModelRequest, ref: RunRef
) -> ModelRequest:
    """``request`` with its parts' bytes; a part the profile does not take fails the call
    (`invalid_request`, naming the modality, before any provider call), as does a part not
    stored in the run's partition (a reference to another tenant's artifact reads nothing)."""
    problem = modality_problem(request.profile, modalities_used(request.messages))
    if problem is not None:
        raise failure(FailureCode.INVALID_REQUEST, problem)
    if "image" not in input_modalities(request.profile):  # a tool's images: its text says so
        request = dataclasses.replace(request, messages=without_tool_images(request.messages))
    if not _digests(request):
        return request
    contents: dict[str, bytes | None] = {}
    for digest in _digests(request):
        artifact = await context.io(context.store.get_artifact, ref.partition_key, digest)
        contents[digest] = None if artifact is None else artifact.content
    try:
        messages = resolve_parts(request.messages, contents.get)
    except PartUnavailable as error:
        raise failure(FailureCode.INVALID_REQUEST, str(error)) from None
    return dataclasses.replace(request, messages=messages)


def _digests(request: ModelRequest) -> list[str]:
    """The artifact ids the messages' stored parts and tool images need, once each."""
    found: list[str] = []
    for message in request.messages:
        content = message.get("content")
        parts = [*(content if isinstance(content, list) else ()), *message.get(TOOL_IMAGES_KEY, ())]
        for part in parts:
            digest = stored_id(part)
            if digest is not None and digest not in found:
                found.append(digest)
    return found


def without_tool_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {key: value for key, value in m.items() if key != TOOL_IMAGES_KEY}
        if TOOL_IMAGES_KEY in m
        else m
        for m in messages
    ]
