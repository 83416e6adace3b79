"""The built-in memory tools, ``memory.recall`` and ``memory.store``, as the seed defines them.

They are ordinary `ToolSpec`s (built with ``tool(..., allow_reserved=True)``, so their schemas
come from the same derivation as user tools) bound to the worker's `MemoryStore`, and they run
through the same ``run_tool`` activity path: same `ToolContext`, same error kinds, same result
storage. Which agent may use them is decided by its memory policy alone (the snapshot's
``tool_names_for``); the policy also travels in ``ToolContext.metadata["memory_policy"]``, as in
the seed, and the tools check it again and derive the memory scope from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Field

from otherone.config import MEMORY_RECALL_TOOL, MEMORY_STORE_TOOL
from otherone.definitions import MemoryPolicy
from otherone.store.memory import (
    SHARED_SCOPE,
    MemoryStore,
    agent_scope,
    contains_sensitive_memory,
    memory_point_id,
)
from otherone.tools import ToolContext, ToolError, ToolSpec, tool

__all__ = [
    "MEMORY_POLICY_METADATA_KEY",
    "MEMORY_RECALL_DESCRIPTION",
    "MEMORY_STORE_DESCRIPTION",
    "MemoryTools",
    "memory_scope",
]

#: The `ToolContext.metadata` key carrying the calling agent's memory policy (the seed's).
MEMORY_POLICY_METADATA_KEY = "memory_policy"
MEMORY_RECALL_DESCRIPTION = "Recall scoped long-term memories by semantic type."
MEMORY_STORE_DESCRIPTION = "Store one durable, non-sensitive long-term memory."
#: Limits of one memory: ``types`` fits its column; a fact needs no more than 16 KiB.
MAX_TYPES_CHARS = 512
MAX_STORAGE_CHARS = 16 * 1024
MEMORY_TOOL_TIMEOUT_SECONDS = 30.0
_WRITABLE = frozenset({MemoryPolicy.READ_WRITE_SHARED, MemoryPolicy.PRIVATE_AGENT})


def memory_policy(context: ToolContext) -> MemoryPolicy:
    """The caller's policy from the context; anything unrecognised counts as disabled."""
    value = context.metadata.get(MEMORY_POLICY_METADATA_KEY)
    try:
        return MemoryPolicy(value) if isinstance(value, str) else MemoryPolicy.DISABLED
    except ValueError:
        return MemoryPolicy.DISABLED


def memory_scope(context: ToolContext, policy: MemoryPolicy) -> str:
    """``private_agent`` memory is the agent's own; every other policy uses the shared scope."""
    return agent_scope(context.agent_id) if policy is MemoryPolicy.PRIVATE_AGENT else SHARED_SCOPE


class MemoryTools:
    """``memory.recall`` and ``memory.store`` bound to one memory store."""

    def __init__(self, memory: MemoryStore) -> None:
        self.memory = memory
        self.specs: dict[str, ToolSpec] = {
            MEMORY_RECALL_TOOL: tool(
                self.recall,
                name=MEMORY_RECALL_TOOL,
                description=MEMORY_RECALL_DESCRIPTION,
                timeout_seconds=MEMORY_TOOL_TIMEOUT_SECONDS,
                allow_reserved=True,
            ),
            MEMORY_STORE_TOOL: tool(
                self.store,
                name=MEMORY_STORE_TOOL,
                description=MEMORY_STORE_DESCRIPTION,
                timeout_seconds=MEMORY_TOOL_TIMEOUT_SECONDS,
                allow_reserved=True,
            ),
        }

    def get(self, name: str) -> ToolSpec | None:
        return self.specs.get(name)

    def definitions(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """Model-facing definitions of the memory tools among ``names`` (others are skipped)."""
        return [self.specs[name].definition() for name in names if name in self.specs]

    def recall(
        self,
        memory_types: Annotated[list[str], Field(min_length=1, max_length=8)],
        context: ToolContext,
    ) -> dict[str, list[str]]:
        """Memories of the caller's scope whose types match one of ``memory_types``."""
        policy = memory_policy(context)
        if policy is MemoryPolicy.DISABLED:
            raise ToolError.permission_denied("long-term memory is disabled for this agent")
        scope = memory_scope(context, policy)
        return {"memories": self.memory.recall(context.partition_key, scope, memory_types)}

    def store(self, storage: str, types: str, context: ToolContext) -> dict[str, Any]:
        """Store one memory with its provenance; secrets are refused, retries write once."""
        policy = memory_policy(context)
        if policy not in _WRITABLE:
            raise ToolError.permission_denied("long-term memory is read-only for this agent")
        storage, types = storage.strip(), types.strip()
        _check_memory(storage, types)
        point_id = self.memory.store(
            context.partition_key,
            memory_scope(context, policy),
            point_id=memory_point_id(context.partition_key, context.idempotency_key),
            types=types,
            storage=storage,
            source_run_id=context.run_id,
            source_agent_id=context.agent_id,
            source_session_id=context.session_id,
        )
        return {"stored": True, "point_id": point_id}


def _check_memory(storage: str, types: str) -> None:
    """The seed's checks (both required, no secrets) plus size limits."""
    if not storage or not types:
        raise ToolError.invalid_arguments("storage and types are required")
    if len(types) > MAX_TYPES_CHARS:
        raise ToolError.invalid_arguments(f"types must be at most {MAX_TYPES_CHARS} characters")
    if len(storage) > MAX_STORAGE_CHARS:
        raise ToolError.invalid_arguments(f"storage must be at most {MAX_STORAGE_CHARS} characters")
    if contains_sensitive_memory(storage) or contains_sensitive_memory(types):
        raise ToolError.permission_denied("sensitive values must not be stored in long-term memory")
