"""Payloads too big for Temporal's history travel as artifacts: stored once, passed by reference.

Temporal refuses payloads over 2 MB and slows down well before; everything our activities
return to a workflow is kept under the runtime policy's `inline_payload_bytes` (256 KiB by
default). Tool results never travel inline at all (the workflow holds their ids); a run's final
output does up to the threshold and becomes an `ArtifactRef` above it.
"""

from __future__ import annotations

import hashlib

from otherone.contracts import ModelTurn, RunRef
from otherone.runs import AgentOutput, ArtifactRef
from otherone.store import Store

MEDIA_TYPE_FOR_OUTPUT = {"text": "text/plain; charset=utf-8", "json": "application/json"}


def artifact_id(run_id: str, name: str) -> str:
    """A stable id (an activity retry writes the same row again, which is a no-op)."""
    digest = hashlib.sha256(f"{run_id}\x00{name}".encode()).hexdigest()
    return f"art-{digest[:40]}"


def needs_offload(turn: ModelTurn, limit: int) -> bool:
    """Would this turn, returned inline, carry more than ``limit`` bytes of text?"""
    size = len(turn.content.encode())
    if turn.output is not None and not turn.output.is_reference:
        size += len(turn.output.encoded())
    return size > limit


def offload_turn(store: Store, ref: RunRef, turn: ModelTurn, number: int) -> ModelTurn:
    """The turn as the workflow needs it: the final output stored as an artifact and referenced,
    the text dropped (it is in the transcript; the workflow decides on `output`)."""
    output = turn.output
    if output is not None and not output.is_reference:
        output = store_output(store, ref, f"turn {number} output", output)
    return turn.model_copy(update={"content": "", "output": output})


def store_output(store: Store, ref: RunRef, name: str, output: AgentOutput) -> AgentOutput:
    artifact = store_blob(store, ref, name, output.encoded(), MEDIA_TYPE_FOR_OUTPUT[output.type])
    return output.model_copy(update={"value": None, "artifact": artifact})


def store_blob(
    store: Store, ref: RunRef, name: str, content: bytes, media_type: str
) -> ArtifactRef:
    """Store a blob once under an id derived from the run and ``name``."""
    artifact = ArtifactRef(
        artifact_id=artifact_id(ref.run_id, name),
        partition_key=ref.partition_key,
        name=name,
        media_type=media_type,
        size_bytes=len(content),
    )
    store.put_artifact(
        ref.partition_key,
        artifact_id=artifact.artifact_id,
        run_id=ref.run_id,
        name=name,
        media_type=media_type,
        content=content,
    )
    return artifact
