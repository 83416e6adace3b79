"""Our tables, as SQLAlchemy Core metadata (the single source other modules import).

The database itself is created and changed only by the Alembic migrations in
`store/migrations/versions`; this module must describe the same schema as their head (a test
compares the two on SQLite and PostgreSQL). When a table changes here, add a migration.

Every table except ``otherone_snapshots`` (configuration, addressed by its content hash and
shared by all tenants) carries ``partition_key``: the partition is the tenant boundary and every
query filters by it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
    true,
)

metadata = MetaData()

#: Column sizes shared by every table, so a key fits wherever it is copied.
EVENT_KEY_LEN = 64
PARTITION_LEN = 128
SESSION_LEN = 256
RUN_ID_LEN = 300
CAPACITY_SCOPE_LEN = 400
TOOL_CALL_ID_LEN = 256
AGENT_ID_LEN = 128
NAME_LEN = 128
#: A Temporal run id (a UUID; room for a server that makes longer ones).
EXECUTION_ID_LEN = 64


def _created_at() -> Column[datetime]:
    return Column("created_at", DateTime(timezone=True), nullable=False)


snapshots = Table(
    "otherone_snapshots",
    metadata,
    Column("version", String(64), primary_key=True),
    Column("body", Text, nullable=False),
    _created_at(),
)

sessions = Table(
    "otherone_sessions",
    metadata,
    Column("partition_key", String(PARTITION_LEN), primary_key=True),
    Column("session_id", String(SESSION_LEN), primary_key=True),
    Column("internal", Boolean, nullable=False, default=False),
    _created_at(),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("lease_run_id", String(RUN_ID_LEN), nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
)

entries = Table(
    "otherone_entries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("session_id", String(SESSION_LEN), nullable=False),
    Column("entry_key", String(512), nullable=False),
    Column("run_id", String(RUN_ID_LEN), nullable=True),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("tool_calls", JSON, nullable=True),
    Column("tool_call_id", String(TOOL_CALL_ID_LEN), nullable=True),
    Column("tool_name", String(NAME_LEN), nullable=True),
    Column("error_kind", String(32), nullable=True),
    Column("usage", JSON, nullable=True),
    #: Estimated tokens of the entry (what compaction thresholds are computed from).
    Column("tokens", Integer, nullable=True),
    Column("meta", JSON, nullable=True),
    _created_at(),
    UniqueConstraint("partition_key", "session_id", "entry_key", name="uq_entry_key"),
    # Context building reads one session's entries after an id, in id order.
    Index("ix_otherone_entries_session", "partition_key", "session_id", "id"),
)

#: A forked session's share of another session's entries (`otherone.store.forks`): the
#: entries of ``source_session_id`` with ids up to ``up_to_entry_id`` are part of
#: ``session_id``'s transcript, read in place (never copied). A fork of a fork has a row per
#: session it shares from (migration 0014).
session_forks = Table(
    "otherone_session_forks",
    metadata,
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("session_id", String(SESSION_LEN), nullable=False),
    Column("source_session_id", String(SESSION_LEN), nullable=False),
    Column("up_to_entry_id", Integer, nullable=False),
    _created_at(),
    PrimaryKeyConstraint(
        "partition_key", "session_id", "source_session_id", name="pk_otherone_session_forks"
    ),
)

tool_results = Table(
    "otherone_tool_results",
    metadata,
    Column("partition_key", String(PARTITION_LEN), primary_key=True),
    Column("run_id", String(RUN_ID_LEN), primary_key=True),
    Column("tool_call_id", String(TOOL_CALL_ID_LEN), primary_key=True),
    Column("tool_name", String(NAME_LEN), nullable=False),
    Column("content", Text, nullable=False),
    Column("error_kind", String(32), nullable=True),
    _created_at(),
)

events = Table(
    "otherone_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # Nullable only for rows written before partitions were recorded (migration 0002).
    Column("partition_key", String(PARTITION_LEN), nullable=True),
    Column("root_run_id", String(RUN_ID_LEN), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("body", Text, nullable=False),
    _created_at(),
    #: Set on events stored at most once per tree (`otherone.store.records.EVENT_KEY`): those of
    #: prepare_run and finish_run, which Temporal may run again (migration 0005). NULL: others.
    Column("event_key", String(EVENT_KEY_LEN), nullable=True),
    UniqueConstraint("root_run_id", "sequence", name="uq_event_sequence"),
    # Retention (`Store.prune_events`): each tree's newest event without a table scan.
    Index("ix_otherone_events_root_created", "root_run_id", "created_at"),
    # Partial: only the few keyed events are indexed, not every delta of a model's answer.
    Index(
        "uq_otherone_events_key",
        "root_run_id",
        "event_key",
        unique=True,
        postgresql_where=text("event_key IS NOT NULL"),
        sqlite_where=text("event_key IS NOT NULL"),
    ),
)

compactions = Table(
    "otherone_compactions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("session_id", String(SESSION_LEN), nullable=False),
    Column("compaction_key", String(512), nullable=False),
    Column("summary", Text, nullable=False),
    #: Entries of the session with an id up to this one are replaced by ``summary``.
    Column("up_to_entry_id", Integer, nullable=False),
    Column("tokens", Integer, nullable=False),
    _created_at(),
    #: The summary call's usage (``input_tokens``, ``output_tokens``; migration 0006).
    Column("usage", JSON, nullable=True),
    UniqueConstraint("partition_key", "session_id", "compaction_key", name="uq_compaction_key"),
)

memory_points = Table(
    "otherone_memory_points",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    #: "shared" or "agent:<agent id>" (private_agent memory).
    Column("scope", String(300), nullable=False),
    Column("types", String(512), nullable=False),
    Column("storage", Text, nullable=False),
    Column("source_run_id", String(RUN_ID_LEN), nullable=True),
    Column("source_agent_id", String(AGENT_ID_LEN), nullable=True),
    Column("source_session_id", String(SESSION_LEN), nullable=True),
    Column("active", Boolean, nullable=False, default=True, server_default=true()),
    _created_at(),
    Index("ix_otherone_memory_points_scope", "partition_key", "scope"),
)

artifacts = Table(
    "otherone_artifacts",
    metadata,
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("artifact_id", String(64), nullable=False),
    Column("run_id", String(RUN_ID_LEN), nullable=False),
    Column("name", String(512), nullable=False),
    Column("media_type", String(NAME_LEN), nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Column("content", LargeBinary, nullable=False),
    _created_at(),
    PrimaryKeyConstraint("partition_key", "artifact_id", name="pk_otherone_artifacts"),
)

run_records = Table(
    "otherone_run_records",
    metadata,
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("run_id", String(RUN_ID_LEN), nullable=False),
    Column("root_run_id", String(RUN_ID_LEN), nullable=False),
    Column("parent_run_id", String(RUN_ID_LEN), nullable=True),
    Column("agent_call_id", String(TOOL_CALL_ID_LEN), nullable=True),
    Column("agent_id", String(AGENT_ID_LEN), nullable=False),
    Column("agent_version", Integer, nullable=True),
    Column("session_id", String(SESSION_LEN), nullable=True),
    Column("status", String(32), nullable=False),
    Column("depth", Integer, nullable=False),
    Column("iteration", Integer, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=True),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("usage", JSON, nullable=True),
    Column("failure", JSON, nullable=True),
    Column("output", JSON, nullable=True),
    Column("meta", JSON, nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    #: The run's handoffs (`RunRecord.handoffs`), oldest first; NULL: none (migration 0004).
    Column("handoffs", JSON, nullable=True),
    #: MCP servers granted to the agent that offered no tools (`RunRecord.mcp_unavailable`);
    #: NULL: none (migration 0008).
    Column("mcp_unavailable", JSON, nullable=True),
    #: The Temporal execution the record is of (`RunRecord.execution_id`): a later execution
    #: of the same id never writes over it (migration 0010). NULL: not known.
    Column("execution_id", String(EXECUTION_ID_LEN), nullable=True),
    #: The configuration snapshot the run's definitions were frozen in (`RunRecord`; a fork
    #: with the original definition runs in it). NULL: not known (migration 0014).
    Column("snapshot_version", String(64), nullable=True),
    #: The run and turn this root was forked from (`RunRecord.forked_from`); NULL: not a fork.
    Column("forked_from", JSON, nullable=True),
    PrimaryKeyConstraint("partition_key", "run_id", name="pk_otherone_run_records"),
    Index("ix_otherone_run_records_root", "partition_key", "root_run_id"),
    #: A run asked for by id alone (an unscoped client's result of a run Temporal no longer
    #: keeps: `AgentClient.result`) is found without a scan (migration 0009).
    Index("ix_otherone_run_records_run_id", "run_id"),
    #: The reconciler's pass (`Store.open_run_records`): records without an end, by the time
    #: they were last written, without reading the ended ones (migration 0011).
    Index("ix_otherone_run_records_open", "status", "updated_at"),
)

#: The request fingerprint of each root run started by idempotency key through `AgentClient`
#: (the run id is derived from partition and key), written once the start is known to be the
#: key's: a keyed start is answered from here, the original run or a conflict, also once
#: Temporal no longer keeps the run (namespace retention; migration 0009).
idempotency_keys = Table(
    "otherone_idempotency_keys",
    metadata,
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("run_id", String(RUN_ID_LEN), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    _created_at(),
    PrimaryKeyConstraint("partition_key", "run_id", name="pk_otherone_idempotency_keys"),
)

#: One row per capacity scope (`otherone.store.capacity`): updating it serialises the scope's
#: admissions across workers; a provider's pause (429 Retry-After) ends at ``paused_until``
#: (migration 0012).
capacity_scopes = Table(
    "otherone_capacity_scopes",
    metadata,
    Column("scope", String(CAPACITY_SCOPE_LEN), nullable=False),
    Column("paused_until", DateTime(timezone=True), nullable=True),
    #: Admissions decided (the column every admission updates to take the scope's lock).
    Column("decisions", Integer, nullable=False),
    PrimaryKeyConstraint("scope", name="pk_otherone_capacity_scopes"),
)

#: Calls holding a permit of a scope, waiting for one, or spent within a per-minute window
#: (`otherone.store.capacity`). Fleet bookkeeping across partitions (fairness compares them):
#: the partition key says whose call it is; no tenant data is kept (migration 0012).
capacity_holders = Table(
    "otherone_capacity_holders",
    metadata,
    Column("scope", String(CAPACITY_SCOPE_LEN), nullable=False),
    Column("holder", String(RUN_ID_LEN + 32), nullable=False),
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("workflow_id", String(RUN_ID_LEN), nullable=False),
    Column("state", String(16), nullable=False),
    Column("since", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("tokens", Integer, nullable=True),
    PrimaryKeyConstraint("scope", "holder", name="pk_otherone_capacity_holders"),
)

#: What each partition spent, per UTC day, agent and model profile (`otherone.store.spending`):
#: model calls, their tokens and their cost in pico-dollars (10^-12 USD, an exact integer on
#: every backend); one row updated by each model call. `otherone usage` reads it, and the
#: partition's spend limits are checked against it (migration 0013).
spend = Table(
    "otherone_spend",
    metadata,
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("day", String(10), nullable=False),
    Column("agent_id", String(AGENT_ID_LEN), nullable=False),
    Column("model_profile_id", String(NAME_LEN), nullable=False),
    Column("calls", BigInteger, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cache_read_tokens", BigInteger, nullable=False),
    Column("cache_write_tokens", BigInteger, nullable=False),
    Column("cost_picos", BigInteger, nullable=False),
    # Calls of a profile without prices (cost None, not 0): their cost is unknown, so a sum
    # over them is a lower bound, and `otherone usage` says so (migration 0014).
    Column("unpriced_calls", BigInteger, nullable=False, server_default="0"),
    PrimaryKeyConstraint(
        "partition_key", "day", "agent_id", "model_profile_id", name="pk_otherone_spend"
    ),
)

#: A partition's spend limit per period (``day``: a UTC day), in pico-dollars; enforced by
#: every worker against `spend` (migration 0013).
spend_limits = Table(
    "otherone_spend_limits",
    metadata,
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("period", String(16), nullable=False),
    Column("limit_picos", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("partition_key", "period", name="pk_otherone_spend_limits"),
)

#: Each partition's webhook signing secret (`otherone.store.webhook_secrets`): the current one,
#: and the one it replaced with when (still accepted by receivers for a grace period they choose).
webhook_secrets = Table(
    "otherone_webhook_secrets",
    metadata,
    Column("partition_key", String(PARTITION_LEN), nullable=False),
    Column("secret", String(128), nullable=False),
    Column("previous_secret", String(128), nullable=True),
    _created_at(),
    Column("rotated_at", DateTime(timezone=True), nullable=True),
    PrimaryKeyConstraint("partition_key", name="pk_otherone_webhook_secrets"),
)

#: Fleet-wide bookkeeping, not tenant data: read across partitions on purpose.
FLEET_TABLES = (capacity_scopes, capacity_holders)

#: Tables that hold tenant data (all but the shared configuration snapshots).
PARTITIONED_TABLES = (
    sessions,
    entries,
    session_forks,
    tool_results,
    events,
    compactions,
    memory_points,
    artifacts,
    run_records,
    idempotency_keys,
    spend,
    spend_limits,
    webhook_secrets,
)

__all__ = [
    "FLEET_TABLES",
    "PARTITIONED_TABLES",
    "artifacts",
    "capacity_holders",
    "capacity_scopes",
    "compactions",
    "entries",
    "events",
    "idempotency_keys",
    "memory_points",
    "metadata",
    "run_records",
    "session_forks",
    "sessions",
    "snapshots",
    "spend",
    "spend_limits",
    "tool_results",
    "webhook_secrets",
]
