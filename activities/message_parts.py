"""Parts of transcript entries: kept in an entry's ``meta`` as references, turned into neutral
message parts, and resolved to bytes just before a model call (in the activity, never in the
workflow).

Neutral parts (what providers translate to their wire shapes):

* ``{"type": "text", "text": ...}``
* ``{"type": "image", "media_type": ..., "data": <base64>}`` or ``{"type": "image", "url": ...}``
* ``{"type": "file", "media_type": ..., "data": <base64>, "filename": ...}`` or with ``url``

Before resolution a stored part has ``sha256`` and ``size_bytes`` instead of ``data``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from otherone.parts import IMAGE_MEDIA_TYPES, PARTS_KEY, Part

#: Modalities a part needs of a model profile (`ModelProfile.input_modalities`).
MODALITY_OF = {"image": "image", "file": "file"}


#: Key of a tool entry's ``meta`` (and of its neutral message) holding the images its result
#: returned (an MCP tool's image content, stored as artifacts): the next model call sees them.
TOOL_IMAGES_KEY = "images"


class PartUnavailable(Exception):
    """A referenced part is not in the run's partition (another tenant's, or deleted)."""


def parts_meta(parts: Sequence[Part]) -> dict[str, Any] | None:
    """An entry's ``meta`` for ``parts`` (None without parts)."""
    if not parts:
        return None
    return {PARTS_KEY: [part.model_dump(mode="json", exclude_none=True) for part in parts]}


def tool_images_meta(content: str) -> dict[str, Any] | None:
    """An entry's ``meta`` for a tool result whose JSON holds images (MCP ``content`` blocks of
    type ``image`` stored as artifacts, `otherone.activities.mcp_results`); None otherwise."""
    if '"artifact_id"' not in content:  # most results: no parsing
        return None
    try:
        body = json.loads(content)
    except json.JSONDecodeError:
        return None
    blocks = body.get("content") if isinstance(body, dict) else None
    images = [
        {
            "type": "image",
            "artifact_id": block["artifact_id"],
            "media_type": block["mime_type"],
            "size_bytes": block.get("size_bytes"),
        }
        for block in blocks or ()
        if isinstance(block, dict)
        and block.get("type") == "image"
        and block.get("mime_type") in IMAGE_MEDIA_TYPES
        and isinstance(block.get("artifact_id"), str)
    ]
    return {TOOL_IMAGES_KEY: images} if images else None


def neutral_parts(meta: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The neutral content parts of an entry's ``meta`` (None: a text entry)."""
    stored = (meta or {}).get(PARTS_KEY)
    if not stored:
        return None
    return [_neutral(part) for part in stored]


def _neutral(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part.get("text", "")}
    neutral: dict[str, Any] = {"type": kind}
    ref = part.get("stored")
    if ref is not None:
        neutral.update(
            media_type=ref["media_type"], sha256=ref["sha256"], size_bytes=ref["size_bytes"]
        )
    else:
        neutral["url"] = part.get("url")
        if part.get("media_type"):
            neutral["media_type"] = part["media_type"]
    if kind == "file":
        neutral["filename"] = part.get("filename") or "document.pdf"
    return neutral


def modalities_used(messages: Sequence[dict[str, Any]]) -> set[str]:
    """The modalities (besides text) the messages' parts need."""
    used: set[str] = set()
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            used.update(MODALITY_OF[p["type"]] for p in content if p.get("type") in MODALITY_OF)
    return used


def resolve_parts(
    messages: list[dict[str, Any]], read: Callable[[str], bytes | None]
) -> list[dict[str, Any]]:
    """``messages`` with every stored part's bytes in ``data`` (base64); ``read(sha256)`` reads
    an artifact of the run's own partition (None: not there -> `PartUnavailable`). Messages
    with parts are copied; the others are returned as they are."""
    resolved: list[dict[str, Any]] = []
    cache: dict[str, str] = {}
    for message in messages:
        content = message.get("content")
        copy = dict(message)
        if isinstance(content, list) and any(stored_id(p) for p in content):
            copy["content"] = [_with_data(part, read, cache) for part in content]
        if message.get(TOOL_IMAGES_KEY):
            copy[TOOL_IMAGES_KEY] = [_with_data(p, read, cache) for p in message[TOOL_IMAGES_KEY]]
        resolved.append(copy)
    return resolved


def stored_id(part: Mapping[str, Any]) -> str | None:
    """The artifact id of a stored part (an input part's SHA-256, a tool image's id)."""
    found = part.get("sha256") or part.get("artifact_id")
    return found if isinstance(found, str) else None


def _with_data(
    part: dict[str, Any], read: Callable[[str], bytes | None], cache: dict[str, str]
) -> dict[str, Any]:
    digest = stored_id(part)
    if digest is None:
        return part
    if digest not in cache:
        content = read(digest)
        if content is None:
            raise PartUnavailable(
                f"{part['type']} part {digest[:16]} is not stored in this run's partition"
            )
        cache[digest] = base64.b64encode(content).decode("ascii")
    dropped = ("sha256", "artifact_id", "size_bytes")
    data = {key: value for key, value in part.items() if key not in dropped}
    return {**data, "data": cache[digest]}


def data_url(part: Mapping[str, Any]) -> str:
    """A resolved part as a ``data:`` URL, or its own URL."""
    if "data" in part:
        return f"data:{part['media_type']};base64,{part['data']}"
    return str(part["url"])
