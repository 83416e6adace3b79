"""A model call's image and file parts, checked against its profile and given their bytes
(read from the run's own partition) just before the provider is called."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from otherone.activities.message_parts import PartUnavailable, modalities_used, resolve_parts
from otherone.activities.providers.base import ModelRequest
from otherone.activities.shared import failure
from otherone.contracts import RunRef
from otherone.errors import FailureCode
from otherone.model_modalities import modality_problem

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
    if not any(isinstance(m.get("content"), list) for m in request.messages):
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
    found: list[str] = []
    for message in request.messages:
        content = message.get("content")
        if isinstance(content, list):
            found += [p["sha256"] for p in content if "sha256" in p and p["sha256"] not in found]
    return found
