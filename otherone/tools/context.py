"""What a tool may know about the call it serves (`ToolContext`, injected by annotation)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator


class ToolContext(BaseModel):
    """What a tool may know about the call it serves; injected into a ``ToolContext`` parameter.

    ``idempotency_key`` is stable across Temporal retries of the same call (it defaults to
    ``f"{run_id}:{tool_call_id}"``), so a tool with side effects can de-duplicate them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_call_id: str
    tool_name: str
    run_id: str
    root_run_id: str
    agent_id: str
    session_id: str
    partition_key: str
    idempotency_key: str = ""
    attempt: int = Field(default=1, ge=1)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _default_idempotency_key(cls, data: Any) -> Any:
        """Derive the key from run and call ids so every caller computes the same one."""
        if isinstance(data, Mapping) and not data.get("idempotency_key"):
            data = {**data, "idempotency_key": f"{data.get('run_id')}:{data.get('tool_call_id')}"}
        return data
