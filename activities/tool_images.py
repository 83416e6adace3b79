"""Images a Python tool returns (an `ImagePart`, or a list of text and image parts): checked
like a message's parts, stored as artifacts of the run, and given to the model as its result's
JSON (``text`` and ``content`` with ``artifact_id`` references, the shape of an MCP tool's
images), so the next model call also receives the images themselves
(`otherone.activities.message_parts.tool_images_meta`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from otherone.part_storage import InvalidPartError, check_part
from otherone.parts import DEFAULT_MAX_PART_BYTES, ImagePart, TextPart
from otherone.runs import ArtifactRef
from otherone.tools import ToolError

#: Stores one image and returns its reference (``name`` is unique within the call).
ImageSaver = Callable[[str, bytes, str], Awaitable[ArtifactRef]]


async def tool_result_with_images(result: Any, save: ImageSaver) -> str:
    """The result's JSON, its images stored; a bad image is a recoverable tool error (the
    model is told)."""
    items = [result] if isinstance(result, ImagePart) else list(result)
    texts = [item.text for item in items if isinstance(item, TextPart)]
    content: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if not isinstance(item, ImagePart):
            continue
        if item.url is not None and not item.url.startswith("data:"):
            content.append({"type": "image", "url": item.url})
            continue
        try:
            checked = check_part(item, f"result.{index}", DEFAULT_MAX_PART_BYTES)
        except InvalidPartError as error:
            raise ToolError.recoverable(f"the tool returned a bad image: {error}") from None
        artifact = await save(f"image {index}", checked.content, checked.media_type)
        content.append(
            {
                "type": "image",
                "artifact_id": artifact.artifact_id,
                "mime_type": artifact.media_type,
                "size_bytes": artifact.size_bytes,
            }
        )
    mapped: dict[str, Any] = {"content": content}
    if texts:
        mapped = {"text": "\n".join(texts), **mapped}
    return json.dumps(mapped, ensure_ascii=False)
