"""Custom Temporal search attributes used by Otherone.

Why this module exists: search attributes must be registered on the server *before* any
workflow upserts them (an unregistered or built-in attribute fails the workflow task forever
with ``BadSearchAttributes``). Keeping the typed keys, the list to register and the dev-server
flags in one place means the workflows that upsert them, the dev server, the test fixtures and
the docker-compose admin job cannot drift apart.

Only *custom* attributes belong here. Built-ins such as ``RootWorkflowId``, ``ParentWorkflowId``
or ``RootRunId`` are filled in by the server and must never be registered or upserted.
"""

from __future__ import annotations

from typing import Any, Final

from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

__all__ = [
    "AGENT_ID",
    "CALL_ID",
    "CUSTOM_SEARCH_ATTRIBUTES",
    "DEPTH",
    "FORKED_FROM",
    "PARTITION",
    "SESSION_ID",
    "STATUS",
    "dev_server_args",
    "type_name",
]

AGENT_ID: Final[SearchAttributeKey[str]] = SearchAttributeKey.for_keyword("OtheroneAgentId")
"""Which agent definition a run executes; lets the UI/CLI list all runs of one agent."""

DEPTH: Final[SearchAttributeKey[int]] = SearchAttributeKey.for_int("OtheroneDepth")
"""Nesting depth of a run in its delegation tree (0 = root); bounds/inspects recursion."""

PARTITION: Final[SearchAttributeKey[str]] = SearchAttributeKey.for_keyword("OtheronePartition")
"""Tenant/partition key so one namespace can be shared and queried per partition."""

SESSION_ID: Final[SearchAttributeKey[str]] = SearchAttributeKey.for_keyword("OtheroneSessionId")
"""Conversation/session the run belongs to; groups runs across continue-as-new and children."""

CALL_ID: Final[SearchAttributeKey[str]] = SearchAttributeKey.for_keyword("OtheroneCallId")
"""The agent call (tool call id) that started a child run; empty for roots."""

STATUS: Final[SearchAttributeKey[str]] = SearchAttributeKey.for_keyword("OtheroneStatus")
"""Agent-level status (finer than Temporal's execution status, e.g. waiting for a human)."""

FORKED_FROM: Final[SearchAttributeKey[str]] = SearchAttributeKey.for_keyword("OtheroneForkedFrom")
"""The run a forked root was forked from (``otherone fork``); unset for runs that are not forks."""

CUSTOM_SEARCH_ATTRIBUTES: Final[list[SearchAttributeKey[Any]]] = [
    AGENT_ID,
    DEPTH,
    PARTITION,
    SESSION_ID,
    CALL_ID,
    STATUS,
    FORKED_FROM,
]
"""Every custom attribute Otherone upserts; exactly the set the server must have registered."""

_TYPE_NAMES: Final[dict[SearchAttributeIndexedValueType, str]] = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


def type_name(key: SearchAttributeKey[Any]) -> str:
    """Return the type name the ``temporal`` CLI expects (``Keyword``, ``Int``, ...).

    The SDK only exposes this mapping privately, so we keep our own stable copy.
    """
    return _TYPE_NAMES[key.indexed_value_type]


def dev_server_args() -> list[str]:
    """Return ``--search-attribute Name=Type`` flags for ``temporal server start-dev``.

    The dev server registers these at start-up (idempotently, also on a persisted SQLite file),
    which is simpler and faster than calling the operator API afterwards.
    """
    args: list[str] = []
    for key in CUSTOM_SEARCH_ATTRIBUTES:
        args += ["--search-attribute", f"{key.name}={type_name(key)}"]
    return args
