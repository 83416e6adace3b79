"""`GET /v1/usage` (a token sees its own partition only) and `otherone usage` /
`otherone spend-limit`: what model calls used and cost, from the store's spend rows. Real
API server, worker, dev server and SQLite store; the CLI as a process."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from temporalio.client import Client

from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.store import Store
from otherone.store.spending import CallSpend
from tests.api_env import api_env
from tests.processes import cli_env, otherone
from tests.test_api import assert_problem, result

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"


def _config() -> RuntimeConfig:
    model = ModelProfile.model_validate(
        {
            "id": "priced",
            "provider": "scripted",
            "model": "test",
            "prices": {"input": "3", "output": "15", "cache_read": "0.3"},
            "script": {"asker": [{"text": "hi", "input_tokens": 1000, "output_tokens": 100}]},
        }
    )
    return RuntimeConfig(agents=[AgentDefinition(id="asker", description="a")], models=[model])


def _spend(store: Store, *calls: CallSpend) -> None:
    with store.engine.begin() as conn:
        for call in calls:
            store.spending.add(conn, call)


async def test_a_token_sees_only_its_partitions_usage(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    tokens = {ALICE: "tenant-a", BOB: "tenant-b"}
    async with api_env(client, task_queue, _config(), tmp_path, tokens=tokens) as api:
        as_alice = {"Authorization": f"Bearer {ALICE}"}
        as_bob = {"Authorization": f"Bearer {BOB}"}
        started = await api.http.post(
            "/v1/runs", json={"entry_agent": "asker", "input": "hello"}, headers=as_alice
        )
        assert started.status_code == 201, started.text
        assert (await result(api, started.json()["run_id"], **as_alice))["outcome"] == "completed"
        _spend(api.env.store, CallSpend("tenant-b", "other", "priced", cost=Decimal("7")))
        alice = (await api.http.get("/v1/usage", headers=as_alice)).json()
        by_day = await api.http.get("/v1/usage?by=day", headers=as_alice)
        bob = (await api.http.get("/v1/usage?by=partition", headers=as_bob)).json()
        peeking = await api.http.get("/v1/usage?partition=tenant-b", headers=as_alice)
        bad = await api.http.get("/v1/usage?by=tenant", headers=as_alice)
        missing = await api.http.get("/v1/usage")
    row = {
        "agent_id": "asker",
        "model_profile_id": "priced",
        "day": api.env.store.spending.today(),  # the store's day (a run may cross midnight)
        "calls": 1,
        "input_tokens": 1000,
        "output_tokens": 100,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cost": "0.0045",
        "unpriced_calls": 0,
    }
    assert alice["rows"] == [row]
    assert alice["total"]["cost"] == "0.0045" and alice["total"]["calls"] == 1
    only_day = {
        key: value for key, value in row.items() if key not in ("agent_id", "model_profile_id")
    }
    assert by_day.json()["rows"] == [only_day]
    assert bob["rows"] == [
        {
            "partition_key": "tenant-b",
            "calls": 1,
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "cost": "7",
            "unpriced_calls": 0,
        }
    ]
    assert_problem(peeking, 422, "invalid_request", "partition")
    assert_problem(bad, 422, "invalid_request", "by")
    assert_problem(missing, 401, "unauthorized")


async def test_without_tokens_the_operator_sees_every_partition(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with api_env(client, task_queue, _config(), tmp_path) as api:
        _spend(
            api.env.store,
            CallSpend("tenant-a", "x", "priced", cost=Decimal("0.5"), cache_read_tokens=9),
            CallSpend("tenant-b", "y", "priced", cost=Decimal("0.25")),
        )
        every = (await api.http.get("/v1/usage?by=partition")).json()
        one = (await api.http.get("/v1/usage?by=partition&partition=tenant-b")).json()
    assert [(row["partition_key"], row["cost"]) for row in every["rows"]] == [
        ("tenant-a", "0.5"),
        ("tenant-b", "0.25"),
    ]
    assert every["total"]["cost"] == "0.75" and every["total"]["cache_read_tokens"] == 9
    assert [row["partition_key"] for row in one["rows"]] == ["tenant-b"]


async def test_calls_of_an_unpriced_profile_are_counted_apart_not_as_free(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A profile without prices (a model the bundled table does not know) has calls whose cost
    is unknown: the API counts them in `unpriced_calls`, and the CLI says "unpriced" (or how
    many calls a cost leaves out) where a 0 would read as free."""
    unpriced = ModelProfile.model_validate(
        {
            "id": "homegrown",
            "provider": "scripted",
            "model": "in-house-7b",
            "script": {"asker": [{"text": "hi", "input_tokens": 50, "output_tokens": 5}]},
        }
    )
    config = RuntimeConfig(agents=[AgentDefinition(id="asker", description="a")], models=[unpriced])
    async with api_env(client, task_queue, config, tmp_path) as api:
        started = await api.http.post("/v1/runs", json={"entry_agent": "asker", "input": "hi"})
        assert started.status_code == 201, started.text
        assert (await result(api, started.json()["run_id"]))["outcome"] == "completed"
        answer = (await api.http.get("/v1/usage?by=model")).json()
    assert answer["rows"] == [
        {
            "model_profile_id": "homegrown",
            "calls": 1,
            "input_tokens": 50,
            "output_tokens": 5,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "cost": "0",
            "unpriced_calls": 1,
        }
    ]
    env = cli_env("127.0.0.1:1", None, tmp_path)  # the same store: the run's call is in it
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    try:
        _spend(
            store,
            CallSpend("local", "asker", "homegrown", calls=2, unpriced_calls=2),
            CallSpend("local", "boss", "dear", cost=Decimal("0.12")),
            CallSpend("local", "boss", "homegrown", unpriced_calls=1),
        )
    finally:
        store.close()
    by_agent = await otherone("usage", "--by", "agent", env=env)
    assert by_agent.code == 0, by_agent.describe()
    lines = {line.split()[0]: line for line in by_agent.stdout.splitlines()[1:]}
    assert lines["asker"].rstrip().endswith("unpriced"), by_agent.stdout
    assert lines["boss"].rstrip().endswith("0.12 + 1 unpriced"), by_agent.stdout
    assert lines["total"].rstrip().endswith("0.12 + 4 unpriced"), by_agent.stdout


async def test_the_cli_prints_usage_and_sets_a_partitions_spend_limit(tmp_path: Path) -> None:
    env = cli_env("127.0.0.1:1", None, tmp_path)
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    try:
        store.spending.clock = lambda: datetime(2026, 12, 7, 9, tzinfo=UTC)
        _spend(
            store,
            CallSpend("acme", "boss", "dear", input_tokens=10, cost=Decimal("0.1")),
            CallSpend("acme", "helper", "cheap", input_tokens=5, cost=Decimal("0.02")),
            CallSpend("globex", "boss", "dear", cost=Decimal("3")),
        )
    finally:
        store.close()
    acme = {**env, "OTHERONE_PARTITION": "acme"}
    as_json = await otherone("usage", "--json", "--by", "agent", env=acme)
    table = await otherone("usage", env=acme)
    every = await otherone("usage", "--all-partitions", "--by", "day", "--json", env=acme)
    bad = await otherone("usage", "--by", "tenant", env=acme)
    set_limit = await otherone("spend-limit", "--per-day", "2.50", env=acme)
    shown = await otherone("spend-limit", env=acme)
    not_money = await otherone("spend-limit", "--per-day", "lots", env=acme)
    cleared = await otherone("spend-limit", "--clear", env=acme)
    rows: list[dict[str, Any]] = json.loads(as_json.stdout)
    assert as_json.code == 0, as_json.describe()
    assert [(row["agent_id"], row["cost"], row["input_tokens"]) for row in rows] == [
        ("boss", "0.1", 10),
        ("helper", "0.02", 5),
    ]
    assert table.code == 0 and "0.12" in table.stdout and "2026-12-07" in table.stdout
    assert [(row["partition_key"], row["cost"]) for row in json.loads(every.stdout)] == [
        ("acme", "0.12"),
        ("globex", "3"),
    ]
    assert bad.code == 2 and "--by: unknown grouping 'tenant'" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert set_limit.code == 0 and "partition 'acme': 2.5 USD per day" in set_limit.stdout
    assert "2.5 USD per day" in shown.stdout
    assert not_money.code == 2 and "--per-day: not an amount of US dollars" in not_money.stderr
    assert cleared.code == 0 and "partition 'acme': no spend limit" in cleared.stdout
