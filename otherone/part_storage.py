"""Parts enter: checked, and their bytes stored once as artifacts, before anything starts.

Every image or file part with bytes (inline ``data``, a ``data:`` URL, a ``path``) is read,
checked (not empty, at most ``max_bytes``, a media type its own first bytes show, one that
fits the part's kind) and stored in the request's partition under its SHA-256: the same bytes
sent twice are one artifact. The part that travels on carries a `PartRef` only. Every part is
checked before the first is stored, so a refused request writes nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from otherone.errors import InvalidRequestError
from otherone.parts import (
    DEFAULT_MAX_PART_BYTES,
    FILE_MEDIA_TYPES,
    IMAGE_MEDIA_TYPES,
    BinaryPart,
    FilePart,
    Part,
    PartRef,
    QueuedMessage,
    TextPart,
    sniff_media_type,
)
from otherone.runs import AgentRunRequest, InputMessage

if TYPE_CHECKING:
    from otherone.store import Store

#: The ``run_id`` column of an artifact stored where a request entered (no run yet owns it:
#: content-addressed, it may be shared by many runs of its partition).
ENTRY_ARTIFACT_RUN = "(entry)"


class InvalidPartError(InvalidRequestError):
    """A part of a message was refused where it entered; ``field`` names it (e.g.
    ``input.0.content.1.data``)."""


@dataclass(frozen=True)
class CheckedPart:
    """A part whose bytes were read and checked, ready to be stored."""

    part: BinaryPart
    content: bytes
    media_type: str
    filename: str | None


def has_unstored_parts(request: AgentRunRequest) -> bool:
    """True when some part still carries bytes (or a path): it must go through `store_parts`."""
    return any(_unstored(message) for message in _messages(request))


def _messages(request: AgentRunRequest) -> tuple[InputMessage, ...]:
    return () if isinstance(request.input, str) else request.input


def _unstored(message: InputMessage) -> bool:
    if isinstance(message.content, str):
        return False
    return any(not isinstance(p, TextPart) and not p.is_stored for p in message.content)


def path_part_field(messages: Sequence[InputMessage | QueuedMessage], field: str) -> str | None:
    """Where a part names a ``path`` (None: none does). A server refuses those: a path is
    read by the process that stores the part, and a server must not read its own files for
    whoever sends a request."""
    for index, message in enumerate(messages):
        content = message.content if isinstance(message, InputMessage) else message
        if isinstance(content, str):
            continue
        for number, part in enumerate(content):
            if not isinstance(part, TextPart) and part.path is not None:
                inside = ".content" if isinstance(message, InputMessage) else ""
                return f"{field}.{index}{inside}.{number}.path"
    return None


def store_request_parts(
    store: Store | None, request: AgentRunRequest, *, max_bytes: int = DEFAULT_MAX_PART_BYTES
) -> AgentRunRequest:
    """``request`` with every part's bytes stored (`PartRef`s in their place); unchanged when
    it has none. Refuses (`InvalidPartError`) before storing anything."""
    if not has_unstored_parts(request):
        return request
    partition = request.runtime_context.partition_key
    messages = list(_messages(request))
    stored = [
        _stored_content(store, partition, message.content, f"input.{index}.content", max_bytes)
        if not isinstance(message.content, str)
        else message.content
        for index, message in enumerate(messages)
    ]
    return request.model_copy(
        update={
            "input": tuple(
                message.model_copy(update={"content": content})
                for message, content in zip(messages, stored, strict=True)
            )
        }
    )


def store_parts(
    store: Store | None,
    partition_key: str,
    parts: Sequence[Part],
    field: str,
    *,
    max_bytes: int = DEFAULT_MAX_PART_BYTES,
) -> tuple[Part, ...]:
    """``parts`` with their bytes stored in ``partition_key``; ``field`` names them in errors."""
    return _stored_content(store, partition_key, tuple(parts), field, max_bytes)


def _stored_content(
    store: Store | None,
    partition_key: str,
    parts: tuple[Part, ...],
    field: str,
    max_bytes: int,
) -> tuple[Part, ...]:
    checked: dict[int, CheckedPart] = {}
    for index, part in enumerate(parts):
        if isinstance(part, TextPart) or part.is_stored:
            continue
        checked[index] = check_part(part, f"{field}.{index}", max_bytes)
    if checked and store is None:
        raise InvalidPartError(
            "images and files are stored where they enter: this client needs a store",
            field=f"{field}.{min(checked)}",
        )
    result: list[Part] = []
    for index, part in enumerate(parts):
        found = checked.get(index)
        if found is None:
            result.append(part)
            continue
        assert store is not None
        result.append(_store_one(store, partition_key, found))
    return tuple(result)


def check_part(part: BinaryPart, field: str, max_bytes: int) -> CheckedPart:
    """Read and check one part with bytes; `InvalidPartError` names the field at fault."""
    content, source = _read(part, field, max_bytes)
    if not content:
        raise InvalidPartError("must not be empty (0 bytes)", field=f"{field}.{source}")
    if len(content) > max_bytes:
        raise InvalidPartError(
            f"is too big: more than {max_bytes} bytes (the most a part may have)",
            field=f"{field}.{source}",
        )
    media_type = _media_type(part, content, f"{field}.{source}")
    filename = _filename(part, field)
    return CheckedPart(part=part, content=content, media_type=media_type, filename=filename)


def _read(part: BinaryPart, field: str, max_bytes: int) -> tuple[bytes, str]:
    """The part's bytes and the field they came from (``data``, ``url`` or ``path``)."""
    if part.path is not None:
        return _read_path(part.path, f"{field}.path", max_bytes), "path"
    if part.url is not None:  # a data: URL (an http(s) one is stored already)
        header, comma, payload = part.url.partition(",")
        if not comma or not header.endswith(";base64"):
            raise InvalidPartError(
                "a data: URL must be base64 (data:<type>;base64,<data>)", field=f"{field}.url"
            )
        return _decode(payload, f"{field}.url"), "url"
    assert part.data is not None
    return _decode(part.data, f"{field}.data"), "data"


def _read_path(path: str, field: str, max_bytes: int) -> bytes:
    try:
        with Path(path).open("rb") as file:
            content = file.read(max_bytes + 1)  # no more than the limit needs to be read
    except OSError as error:
        raise InvalidPartError(
            f"cannot read {path!r}: {error.strerror or error}", field=field
        ) from None
    return content


def _decode(data: str, field: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidPartError("must be base64", field=field) from None


def _media_type(part: BinaryPart, content: bytes, field: str) -> str:
    """What the bytes show, when it is a type this kind of part takes (and agrees with a
    declared type): an extension or a declared type alone is never trusted."""
    sniffed = sniff_media_type(content)
    allowed = IMAGE_MEDIA_TYPES if part.type == "image" else FILE_MEDIA_TYPES
    kinds = ", ".join(sorted(allowed))
    if sniffed is None or sniffed not in allowed:
        shown = sniffed or "an unknown type"
        raise InvalidPartError(
            f"unsupported media type: the bytes are {shown} ({part.type} parts take {kinds})",
            field=field,
        )
    declared = _declared_type(part)
    if declared is not None and declared != sniffed:
        raise InvalidPartError(
            f"media type {declared!r} was given, but the bytes are {sniffed}", field=field
        )
    return sniffed


def _declared_type(part: BinaryPart) -> str | None:
    if part.media_type is not None:
        return part.media_type.split(";")[0].strip().lower()
    if part.url is not None and part.url.startswith("data:"):
        declared = part.url[5:].split(",")[0].split(";")[0].strip().lower()
        return declared or None
    return None


def _filename(part: BinaryPart, field: str) -> str | None:
    if not isinstance(part, FilePart):
        return None
    name = part.filename or (Path(part.path).name if part.path else None)
    if name is not None and "\x00" in name:
        raise InvalidPartError("must not contain a NUL character", field=f"{field}.filename")
    return name


def _store_one(store: Store, partition_key: str, checked: CheckedPart) -> Part:
    digest = hashlib.sha256(checked.content).hexdigest()
    store.put_artifact(
        partition_key,
        artifact_id=digest,
        run_id=ENTRY_ARTIFACT_RUN,
        name=checked.filename or f"{checked.part.type} {digest[:12]}",
        media_type=checked.media_type,
        content=checked.content,
    )
    ref = PartRef(sha256=digest, media_type=checked.media_type, size_bytes=len(checked.content))
    update: dict[str, object] = {"data": None, "path": None, "url": None, "stored": ref}
    update["media_type"] = None  # the ref has it
    if isinstance(checked.part, FilePart):
        update["filename"] = checked.filename
    return checked.part.model_copy(update=update)


__all__ = [
    "ENTRY_ARTIFACT_RUN",
    "CheckedPart",
    "InvalidPartError",
    "check_part",
    "has_unstored_parts",
    "path_part_field",
    "store_parts",
    "store_request_parts",
]
