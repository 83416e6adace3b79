"""The prepared statements of a turn (`otherone.store.prepared`), on SQLite and PostgreSQL.

Why: they run on the driver's cursor, past `Connection.execute`; they must hand the driver
exactly the parameters their SQL names, and a driver error must come out as it does through
Core: the same typed `DBAPIError`, a lost connection invalidated, the next call working (the
activities' outage handling, `is_outage`, depends on both).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy.exc
from sqlalchemy import Connection, insert, select, text
from sqlalchemy.dialects import postgresql, sqlite

from otherone.contracts import RunRef
from otherone.store import Store
from otherone.store.errors import is_outage
from otherone.store.prepared import Prepared
from otherone.store.schema import events
from otherone.store.statements import TurnStatements
from tests.store_fixtures import TestDatabases

REF = RunRef(
    run_id="root-1",
    root_run_id="root-1",
    agent_id="agent",
    partition_key="p",
    session_id="s",
    snapshot_version="v",
)
#: A value for every parameter any turn statement takes.
VALUES: dict[str, Any] = {
    "partition_key": "p",
    "session_id": "s",
    "entry_key": "k",
    "run_id": "r",
    "role": "user",
    "content": "c",
    "tool_calls": None,
    "tool_call_id": "t",
    "tool_name": "n",
    "error_kind": None,
    "usage": None,
    "tokens": 1,
    "meta": None,
    "created_at": datetime.now(UTC),
    "after_id": 0,
    "marker_id": 0,
    "root_run_id": "root-1",
    "sequence": 1,
    "body": "{}",
    "event_key": None,
    "namespace": 1,
    "root": "root-1",
    "channel": "c",
    **{f"tool_call_id_{index}": f"t{index}" for index in range(3)},
    **{f"event_key_{index}": f"k{index}" for index in range(2)},
}


def _statements(dialect: Any) -> list[Prepared]:
    turn = TurnStatements(dialect)
    found = [value for value in vars(turn).values() if isinstance(value, Prepared)]
    return [*found, turn.tool_results(3), turn.stored_event_keys(2)]


@pytest.mark.parametrize("dialect", [postgresql.psycopg.dialect(), sqlite.dialect()])
def test_the_driver_gets_exactly_the_parameters_the_sql_names(dialect: Any) -> None:
    for prepared in _statements(dialect):
        params = prepared.params(VALUES)
        if dialect.positional:
            assert isinstance(params, tuple)
            assert len(params) == prepared.sql.count("?"), prepared.sql
        else:
            assert isinstance(params, dict)
            # (Not SQLAlchemy's internal keys of anonymous binds, such as '%(1234 param)s'.)
            assert set(params) == set(re.findall(r"%\((\w+)\)s", prepared.sql)), prepared.sql


def _event_row(sequence: int) -> dict[str, Any]:
    return {
        "partition_key": "p",
        "root_run_id": "root-1",
        "sequence": sequence,
        "body": "{}",
        "created_at": datetime.now(UTC),
        "event_key": None,
    }


def test_a_refused_statement_raises_what_core_raises(store: Store) -> None:
    insert_event = store._turn.insert_event
    with store.engine.begin() as conn:
        insert_event.run_many(conn, [_event_row(1)])
    with pytest.raises(sqlalchemy.exc.IntegrityError) as prepared, store.engine.begin() as conn:
        insert_event.run_many(conn, [_event_row(1)])
    with pytest.raises(sqlalchemy.exc.IntegrityError) as core, store.engine.begin() as conn:
        conn.execute(insert(events), [_event_row(1)])
    assert type(prepared.value.orig) is type(core.value.orig)
    assert not is_outage(prepared.value)  # a refusal fails the run, it is not waited for
    assert store.append_events(REF, [{"type": "x"}]) == [2]  # the store goes on


def _terminated(store: Store, conn: Connection) -> None:
    """End ``conn``'s server process (as a database restart or failover would), waiting until
    it is gone."""
    pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    with store.engine.connect() as admin:
        stopped = admin.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})
        assert stopped.scalar() is True


def test_a_connection_lost_mid_transaction_is_invalidated_as_through_core(store: Store) -> None:
    if store.engine.dialect.name != "postgresql":
        pytest.skip("a server connection to lose: PostgreSQL only")
    last_sequence = store._turn.last_sequence
    with store.engine.connect() as conn:
        assert last_sequence.rows(conn, {"root_run_id": "root-1"}) == [(None,)]
        _terminated(store, conn)
        with pytest.raises(sqlalchemy.exc.DBAPIError) as prepared:
            last_sequence.rows(conn, {"root_run_id": "root-1"})
    with store.engine.connect() as conn:
        conn.execute(select(events.c.id).limit(1))
        _terminated(store, conn)
        with pytest.raises(sqlalchemy.exc.DBAPIError) as core:
            conn.execute(select(events.c.id).limit(1))
    assert type(prepared.value) is type(core.value)
    assert type(prepared.value.orig) is type(core.value.orig)
    assert prepared.value.connection_invalidated and core.value.connection_invalidated
    assert is_outage(prepared.value)  # what activities wait out (`ActivityContext.io`)
    # The pool let go of the dead connection: the next prepared call works.
    assert store.append_events(REF, [{"type": "x"}]) == [1]
    assert [record.event["type"] for record in store.read_events("root-1")] == ["x"]


def test_a_read_only_database_is_an_outage_to_wait_out(postgres_databases: TestDatabases) -> None:
    """A hot standby (or a primary demoted in a failover behind the same address) refuses
    writes with SQLSTATE 25006, which psycopg raises as an `InternalError`: it was a refusal,
    so every run in flight failed for good within seconds; it is an outage, waited out."""
    with postgres_databases.database(migrated=True) as url:
        store = Store.open(url, migrate=False)
        try:
            with store.engine.connect() as conn:
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                with pytest.raises(sqlalchemy.exc.DBAPIError) as refused:
                    conn.execute(insert(events), [_event_row(1)])
        finally:
            store.close()
    assert getattr(refused.value.orig, "sqlstate", None) == "25006"
    assert is_outage(refused.value)
