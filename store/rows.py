"""Row conversion for `otherone.store.database.Store`: the column values written for entries,
tool results and run records, and the records built from the rows read back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import RowMapping

from otherone.runs import RunRecord
from otherone.store.records import (
    Artifact,
    Compaction,
    EntryRow,
    SessionInfo,
    aware,
    aware_or_none,
    estimate_entry_tokens,
    utc,
)
from otherone.store.schema import compactions


def utc_now() -> datetime:
    """The time written into rows (UTC)."""
    return datetime.now(UTC)


def entry_values(partition_key: str, session_id: str, row: EntryRow) -> dict[str, Any]:
    return {
        "partition_key": partition_key,
        "session_id": session_id,
        "entry_key": row.entry_key,
        "run_id": row.run_id,
        "role": row.role,
        "content": row.content,
        "tool_calls": row.tool_calls,
        "tool_call_id": row.tool_call_id,
        "tool_name": row.tool_name,
        "error_kind": row.error_kind,
        "usage": row.usage,
        "tokens": row.tokens if row.tokens is not None else estimate_entry_tokens(row),
        "meta": row.meta,
        "created_at": utc_now(),
    }


def tool_result_values(
    partition_key: str,
    run_id: str,
    tool_call_id: str,
    tool_name: str,
    content: str,
    error_kind: str | None,
) -> dict[str, Any]:
    return {
        "partition_key": partition_key,
        "run_id": run_id,
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "content": content,
        "error_kind": error_kind,
        "created_at": utc_now(),
    }


def entry_from_values(values: Sequence[Any]) -> EntryRow:
    """An entry from a row of `otherone.store.statements.ENTRY_COLUMNS`."""
    (id_, entry_key, role, content, tool_calls, tool_call_id, tool_name, error_kind, usage,
     run_id, tokens, meta, _created_at) = values  # fmt: skip
    return EntryRow(
        entry_key=entry_key,
        role=role,
        content=content,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        error_kind=error_kind,
        usage=usage,
        run_id=run_id,
        id=id_,
        tokens=tokens,
        meta=meta,
    )


def entry_from_mapping(mapping: RowMapping) -> EntryRow:
    return EntryRow(
        entry_key=mapping["entry_key"],
        role=mapping["role"],
        content=mapping["content"],
        tool_calls=mapping["tool_calls"],
        tool_call_id=mapping["tool_call_id"],
        tool_name=mapping["tool_name"],
        error_kind=mapping["error_kind"],
        usage=mapping["usage"],
        run_id=mapping["run_id"],
        id=mapping["id"],
        tokens=mapping["tokens"],
        meta=mapping["meta"],
    )


def session_info_from_mapping(mapping: RowMapping) -> SessionInfo:
    return SessionInfo(
        partition_key=mapping["partition_key"],
        session_id=mapping["session_id"],
        internal=bool(mapping["internal"]),
        created_at=aware(mapping["created_at"]),
        updated_at=aware(mapping["updated_at"]),
        lease_run_id=mapping["lease_run_id"],
        lease_until=aware_or_none(mapping["lease_until"]),
    )


def compaction_from_values(values: Sequence[Any]) -> Compaction:
    """A compaction from a row of all its table's columns, in order."""
    return compaction_from_mapping(dict(zip(compactions.c.keys(), values, strict=True)))


def compaction_from_mapping(mapping: Mapping[Any, Any]) -> Compaction:
    return Compaction(
        id=mapping["id"],
        partition_key=mapping["partition_key"],
        session_id=mapping["session_id"],
        compaction_key=mapping["compaction_key"],
        summary=mapping["summary"],
        up_to_entry_id=mapping["up_to_entry_id"],
        tokens=mapping["tokens"],
        created_at=aware(mapping["created_at"]),
        usage=mapping.get("usage"),
    )


def artifact_from_mapping(mapping: RowMapping) -> Artifact:
    return Artifact(
        partition_key=mapping["partition_key"],
        artifact_id=mapping["artifact_id"],
        run_id=mapping["run_id"],
        name=mapping["name"],
        media_type=mapping["media_type"],
        size_bytes=mapping["size_bytes"],
        content=bytes(mapping["content"]),
        created_at=aware(mapping["created_at"]),
    )


def run_record_values(record: RunRecord) -> dict[str, Any]:
    def as_json(model: Any) -> Any:
        return None if model is None else model.model_dump(mode="json")

    return {
        "partition_key": record.partition_key,
        "run_id": record.run_id,
        "root_run_id": record.root_run_id,
        "parent_run_id": record.parent_run_id,
        "agent_call_id": record.agent_call_id,
        "agent_id": record.agent_id,
        "agent_version": record.agent_definition_version,
        "session_id": record.session_id,
        "status": record.status.value,
        "depth": record.depth,
        "iteration": record.iteration,
        "started_at": None if record.started_at is None else utc(record.started_at),
        "finished_at": None if record.finished_at is None else utc(record.finished_at),
        "usage": as_json(record.usage),
        "failure": as_json(record.failure),
        "output": as_json(record.output),
        "meta": dict(record.metadata),
        "updated_at": utc_now(),
        "handoffs": [step.model_dump(mode="json") for step in record.handoffs] or None,
        "mcp_unavailable": dict(record.mcp_unavailable) or None,
        "execution_id": record.execution_id,
        "snapshot_version": record.snapshot_version,
        "forked_from": as_json(record.forked_from),
    }


def run_record_from_mapping(mapping: RowMapping) -> RunRecord:
    return RunRecord.model_validate(
        {
            "run_id": mapping["run_id"],
            "root_run_id": mapping["root_run_id"],
            "parent_run_id": mapping["parent_run_id"],
            "agent_call_id": mapping["agent_call_id"],
            "agent_id": mapping["agent_id"],
            "agent_definition_version": mapping["agent_version"],
            "session_id": mapping["session_id"],
            "partition_key": mapping["partition_key"],
            "status": mapping["status"],
            "depth": mapping["depth"],
            "iteration": mapping["iteration"],
            "started_at": aware_or_none(mapping["started_at"]),
            "finished_at": aware_or_none(mapping["finished_at"]),
            "usage": mapping["usage"] or {},
            "failure": mapping["failure"],
            "output": mapping["output"],
            "metadata": mapping["meta"] or {},
            "handoffs": mapping["handoffs"] or (),
            "mcp_unavailable": mapping["mcp_unavailable"] or {},
            "execution_id": mapping["execution_id"],
            "snapshot_version": mapping["snapshot_version"],
            "forked_from": mapping["forked_from"],
        }
    )
