"""Multi-part user messages (the seed's ``MessageContent::MultiPart``): text, images, files.

A part is given inline (``data``: base64, or a ``data:`` URL), by ``path`` (read on the client)
or by an http(s) ``url`` (passed to the provider as it is, never fetched by us). Bytes never
travel in Temporal payloads: where a request enters (`otherone.part_storage`), inline and path
parts are checked (not empty, at most `DEFAULT_MAX_PART_BYTES`, a media type their own bytes
show) and stored once as artifacts of the request's partition, content-addressed by SHA-256
(the same image sent twice is stored once); the message then carries a `PartRef` only.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    TypeAdapter,
    field_validator,
    model_serializer,
    model_validator,
)

#: Largest part accepted by default (20 MiB): what providers take per image/PDF, roughly.
#: `AgentClient(max_part_bytes=...)` changes it.
DEFAULT_MAX_PART_BYTES = 20 * 1024 * 1024
#: Key of a transcript entry's ``meta`` holding its parts (as `Part` dumps them to JSON).
PARTS_KEY = "parts"
#: Media types of image parts, by what their first bytes show (`sniff_media_type`).
IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: Media types of file parts.
FILE_MEDIA_TYPES = frozenset({"application/pdf"})

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PartRef(_Part):
    """A stored part: its artifact in the run's partition (the id is the content's SHA-256)."""

    sha256: Sha256
    media_type: str
    size_bytes: Annotated[int, Field(gt=0)]

    @property
    def artifact_id(self) -> str:
        return self.sha256


class _TypedPart(_Part):
    """A part of the ``type`` union: its ``type`` is written even where defaults are left out
    (our compact Temporal payloads), since it is what a reader tells the parts apart by."""

    @model_serializer(mode="wrap")
    def _with_type(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {"type": type(self).model_fields["type"].default, **dumped}


class TextPart(_TypedPart):
    type: Literal["text"] = "text"
    text: str


class _BinaryPart(_TypedPart):
    """One of ``data`` (base64 or a data URL), ``path``, ``url`` (http/https) or ``stored``."""

    data: str | None = None
    path: str | None = None
    url: str | None = None
    #: The media type; detected from the bytes when not given (and checked against them).
    media_type: str | None = None
    stored: PartRef | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        sources = ("data", "path", "url", "stored")
        given = [name for name in sources if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of data, path, url or stored")
        return self

    @field_validator("url")
    @classmethod
    def _http_or_data(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://", "data:")):
            raise ValueError("must be an http(s) URL or a data: URL")
        return url

    @field_validator("path")
    @classmethod
    def _path_storable(cls, path: str | None) -> str | None:
        if path is not None and "\x00" in path:
            raise ValueError("must not contain a NUL character")
        return path

    @property
    def is_stored(self) -> bool:
        """True once no bytes are carried: stored, or an http(s) URL the provider fetches."""
        return self.stored is not None or (
            self.url is not None and not self.url.startswith("data:")
        )

    @classmethod
    def from_bytes(cls, content: bytes, media_type: str | None = None) -> Self:
        return cls(data=base64.b64encode(content).decode("ascii"), media_type=media_type)

    @classmethod
    def from_path(cls, path: str | Path, media_type: str | None = None) -> Self:
        return cls(path=str(path), media_type=media_type)

    @classmethod
    def from_url(cls, url: str, media_type: str | None = None) -> Self:
        return cls(url=url, media_type=media_type)


class ImagePart(_BinaryPart):
    type: Literal["image"] = "image"


class FilePart(_BinaryPart):
    """A document (PDF)."""

    type: Literal["file"] = "file"
    #: The name shown to the model (a path's own name when not given).
    filename: Annotated[str, StringConstraints(min_length=1, max_length=255)] | None = None

    @field_validator("filename")
    @classmethod
    def _filename_storable(cls, filename: str | None) -> str | None:
        if filename is not None and "\x00" in filename:
            raise ValueError("must not contain a NUL character")
        return filename


Part = Annotated[TextPart | ImagePart | FilePart, Field(discriminator="type")]
BinaryPart = ImagePart | FilePart
#: Validates one part given as JSON (``{"type": "image", "path": ...}``).
PART_ADAPTER: TypeAdapter[Part] = TypeAdapter(Part)
#: A user message sent to a running run (`UserMessages`): text, or parts.
QueuedMessage = str | tuple[Part, ...]
#: What `AgentClient.send_message` takes for one message: text, or a sequence of parts.
MessageToSend = str | Sequence[TextPart | ImagePart | FilePart]


#: Tokens an image counts for in a context's size estimate (compaction): about what the
#: providers charge for a one-megapixel image (Anthropic: width x height / 750, so ~1,400;
#: OpenAI: 765 for a high-detail 1024x1024 tile set). A PDF counts `FILE_TOKENS_PER_100_KIB`
#: per 100 KiB begun (its pages are read as text and images).
IMAGE_TOKEN_ESTIMATE = 1600
FILE_TOKENS_PER_100_KIB = 1600


def estimate_part_tokens(part: dict[str, Any]) -> int:
    """The documented token estimate of one stored part (as `Part` dumps it to JSON); text
    parts are counted with the entry's text."""
    kind = part.get("type")
    if kind == "image":
        return IMAGE_TOKEN_ESTIMATE
    if kind == "file":
        size = int((part.get("stored") or {}).get("size_bytes") or 0)
        return FILE_TOKENS_PER_100_KIB * max(1, -(-size // (100 * 1024)))
    return 0


def stored_part_labels(meta: dict[str, Any] | None) -> list[str]:
    """`part_label` of each image or file part in a transcript entry's ``meta``."""
    labels: list[str] = []
    for dumped in (meta or {}).get(PARTS_KEY) or ():
        part = PART_ADAPTER.validate_python(dumped)
        if not isinstance(part, TextPart):
            labels.append(part_label(part))
    return labels


def returns_images(result: Any) -> bool:
    """Whether a tool's return value is an `ImagePart`, or a list of `TextPart` and
    `ImagePart` holding an image: its images are stored and shown to the model
    (`otherone.activities.tool_images`)."""
    if isinstance(result, ImagePart):
        return True
    return (
        isinstance(result, list | tuple)
        and any(isinstance(item, ImagePart) for item in result)
        and all(isinstance(item, TextPart | ImagePart) for item in result)
    )


def sniff_media_type(content: bytes) -> str | None:
    """The media type the first bytes show (PNG, JPEG, GIF, WebP, PDF), or None."""
    if content.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if content.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if content.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "image/webp"
    if content.startswith(b"%PDF-"):
        return "application/pdf"
    return None


def parts_text(parts: tuple[Part, ...]) -> str:
    """The text of ``parts``, what is shown where text only is (summaries, excerpts)."""
    return "\n".join(part.text for part in parts if isinstance(part, TextPart))


def part_label(part: BinaryPart) -> str:
    """A short mention of a part, for text-only views: ``[image image/png 5242880 bytes
    sha256:ab12...]`` or ``[image https://...]``."""
    if part.stored is not None:
        ref = part.stored
        return f"[{part.type} {ref.media_type} {ref.size_bytes} bytes sha256:{ref.sha256[:12]}]"
    return f"[{part.type} {part.url or part.path or 'inline'}]"


__all__ = [
    "DEFAULT_MAX_PART_BYTES",
    "PARTS_KEY",
    "PART_ADAPTER",
    "BinaryPart",
    "FilePart",
    "ImagePart",
    "MessageToSend",
    "Part",
    "PartRef",
    "QueuedMessage",
    "TextPart",
    "estimate_part_tokens",
    "part_label",
    "parts_text",
    "returns_images",
    "sniff_media_type",
    "stored_part_labels",
]
