"""The payload converter: pydantic JSON, with the runtime's own activity payloads compacted.

Every activity input and result is written into the workflow's history (the scheduling command
and the completion event), once per model turn and per tool call: their size is most of a run's
history. Fields left at their default (``None``, ``0``, ``False``, empty) are left out of
these payloads; reading one fills them in again, so the value read is the value written. Old
payloads (with every field) read the same. Other payloads (run inputs and results, signals,
updates, queries: read by clients in other languages too) keep every field.

Every payload and failure this process writes is redacted of the secrets it resolved
(`otherone.redaction`): an activity's result or error is where a server's echo of a key would
otherwise enter the workflow's history.
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadConverter,
)

from otherone.redaction import redact, redact_keeping_json


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
        payload: Payload | None
        if isinstance(value, compact_types()):
            data = value.model_dump_json(exclude_defaults=True).encode()
            payload = Payload(metadata={"encoding": self.encoding.encode()}, data=data)
        else:
            payload = super().to_payload(value)
        if payload is not None:
            payload.data = _redacted(payload.data)
        return payload


def _redacted(data: bytes) -> bytes:
    """JSON payload bytes without any piece of a secret (still JSON)."""
    text = data.decode("utf-8", errors="surrogateescape")
    shown = redact_keeping_json(text)
    return data if shown is text else shown.encode("utf-8", errors="surrogateescape")


def _redact_failure(failure: Failure) -> None:
    """A failure's message and stack trace, and its causes', redacted in place."""
    current: Failure | None = failure
    while current is not None:
        current.message = redact(current.message)
        current.stack_trace = redact(current.stack_trace)
        current = current.cause if current.HasField("cause") else None


class RedactingFailureConverter(DefaultFailureConverter):
    """Temporal's failure converter; messages and stack traces redacted."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        super().to_failure(exception, payload_converter, failure)
        _redact_failure(failure)


class RedactingEncodedFailureConverter(DefaultFailureConverterWithEncodedAttributes):
    """The encoded-attributes failure converter (with a payload codec), redacted likewise."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        super().to_failure(exception, payload_converter, failure)
        _redact_failure(failure)


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


compact_data_converter = DataConverter(
    payload_converter_class=CompactPayloadConverter,
    failure_converter_class=RedactingFailureConverter,
)
