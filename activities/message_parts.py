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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from otherone.parts import PARTS_KEY, Part

#: Modalities a part needs of a model profile (`ModelProfile.input_modalities`).
MODALITY_OF = {"image": "image", "file": "file"}


class PartUnavailable(Exception):
    """A referenced part is not in the run's partition (another tenant's, or deleted)."""


def parts_meta(parts: Sequence[Part]) -> dict[str, Any] | None:
    """An entry's ``meta`` for ``parts`` (None without parts)."""
    if not parts:
        return None
    return {PARTS_KEY: [part.model_dump(mode="json", exclude_none=True) for part in parts]}


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
        if not isinstance(content, list) or not any("sha256" in p for p in content):
            resolved.append(message)
            continue
        parts = [_with_data(part, read, cache) for part in content]
        resolved.append({**message, "content": parts})
    return resolved


def _with_data(
    part: dict[str, Any], read: Callable[[str], bytes | None], cache: dict[str, str]
) -> dict[str, Any]:
    digest = part.get("sha256")
    if digest is None:
        return part
    if digest not in cache:
        content = read(digest)
        if content is None:
            raise PartUnavailable(
                f"{part['type']} part sha256:{digest[:12]} is not stored in this run's partition"
            )
        cache[digest] = base64.b64encode(content).decode("ascii")
    data = {key: value for key, value in part.items() if key not in ("sha256", "size_bytes")}
    return {**data, "data": cache[digest]}


def data_url(part: Mapping[str, Any]) -> str:
    """A resolved part as a ``data:`` URL, or its own URL."""
    if "data" in part:
        return f"data:{part['media_type']};base64,{part['data']}"
    return str(part["url"])
