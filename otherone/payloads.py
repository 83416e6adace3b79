"""The payload converter: pydantic JSON, with the runtime's own activity payloads compacted.

Every activity input and result is written into the workflow's history (the scheduling command
and the completion event), once per model turn and per tool call: their size is most of a run's
history. Fields left at their default (``None``, ``0``, ``False``, empty) are left out of
these payloads; reading one fills them in again, so the value read is the value written. Old
payloads (with every field) read the same. Other payloads (run inputs and results, signals,
updates, queries: read by clients in other languages too) keep every field.
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)


def compact_types() -> tuple[type[BaseModel], ...]:
    """The types whose payloads are compacted (`otherone.contracts.COMPACT_PAYLOAD_TYPES`).

    Looked up, not imported: while no module has loaded the contracts, no value can be one of
    them, and a client that only reads records (`otherone show`) never builds them (issue 16).
    """
    contracts = sys.modules.get("otherone.contracts")
    if contracts is None:
        return ()
    types: tuple[type[BaseModel], ...] = contracts.COMPACT_PAYLOAD_TYPES
    return types


class CompactJSONPayloadConverter(PydanticJSONPlainPayloadConverter):
    """`PydanticJSONPlainPayloadConverter`, leaving defaults out of `compact_types`."""

    def to_payload(self, value: Any) -> Payload | None:
        if isinstance(value, compact_types()):
            data = value.model_dump_json(exclude_defaults=True).encode()
            return Payload(metadata={"encoding": self.encoding.encode()}, data=data)
        return super().to_payload(value)


#: One JSON converter for every `CompactPayloadConverter`: the SDK builds a new payload
#: converter for each serialization context (several per workflow activation and activity),
#: and a fresh pydantic converter would rebuild its type-adapter cache every time (profiled:
#: ~3% of a worker's CPU per turn). It holds no per-context state, and its cache is
#: thread-safe (`functools.lru_cache`).
_JSON_CONVERTER = CompactJSONPayloadConverter()
_CONVERTERS = tuple(
    _JSON_CONVERTER if isinstance(c, JSONPlainPayloadConverter) else c
    for c in DefaultPayloadConverter.default_encoding_payload_converters
)


class CompactPayloadConverter(CompositePayloadConverter):
    """Temporal's default converters, JSON done by `CompactJSONPayloadConverter`."""

    def __init__(self) -> None:
        super().__init__(*_CONVERTERS)


compact_data_converter = DataConverter(payload_converter_class=CompactPayloadConverter)
