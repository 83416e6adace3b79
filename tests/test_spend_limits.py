"""Spend limits per partition and day, held in the store and enforced by every worker: a
partition that has spent its limit starts no run (refused `budget_exceeded` at its start) and
a run in progress stops at its next model call; the next UTC day starts afresh (the store's
clock is replaced, no waiting). Real dev server, worker and SQLite store; scripted models with
declared prices, so every figure is exact."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.errors import FailureCode
from otherone.runs import RunOutcome
from otherone.store import Store
from otherone.store.spending import CallSpend, to_dollars, to_picos
from otherone.tools import tool
from tests.harness import agent_env

#: Each model call: 1000 tokens in at $3 and 100 out at $15 per million = $0.0045.
CALL = {"input_tokens": 1000, "output_tokens": 100}


@tool
def note(text: str) -> str:
    """Keep a note."""
    return f"noted: {text}"


def _config(tools: list[Any] | None = None) -> RuntimeConfig:
    model = ModelProfile.model_validate(
        {
            "id": "priced",
            "provider": "scripted",
            "model": "test",
            "prices": {"input": "3", "output": "15"},
            "script": {
                "quick": [{"text": "done", **CALL}],
                "twostep": [
                    {"tool_calls": [{"name": "note", "arguments": {"text": "x"}}], **CALL},
                    {"text": "done", **CALL},
                ],
            },
        }
    )
    agents = [
        AgentDefinition(id="quick", description="Answers at once."),
        AgentDefinition(id="twostep", description="Notes, then answers.", tools=["note"]),
    ]
    return RuntimeConfig(agents=agents, models=[model], tools=tools or [note])


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def run_store(tmp_path: Path) -> Iterator[Store]:
    """The store of the runs' tests (the store tests below take the suite's `store`, on
    each backend)."""
    opened = Store.open(f"sqlite:///{tmp_path / 'spend.db'}")
    yield opened
    opened.close()


async def test_a_daily_limit_refuses_the_next_run_and_resets_the_next_day(
    client: Client, task_queue: str, tmp_path: Path, run_store: Store
) -> None:
    store = run_store
    clock = Clock(datetime(2026, 12, 7, 23, 0, tzinfo=UTC))
    store.spending.clock = clock
    store.spending.set_limit("local", "day", Decimal("0.005"))
    async with agent_env(client, task_queue, _config(), tmp_path, store=store) as env:

        async def run(agent: str) -> Any:
            return await env.agents.run(build_request(entry_agent=agent, input="go"))

        first, second, refused = await run("quick"), await run("quick"), await run("quick")
        clock.now += timedelta(hours=1)  # 2026-12-08, 00:00 UTC: a new day
        next_day = await run("quick")
    assert first.outcome is RunOutcome.COMPLETED and first.usage.cost == Decimal("0.0045")
    # $0.0045 spent is under $0.005: the second run starts, and its call makes it $0.009.
    assert second.outcome is RunOutcome.COMPLETED
    assert refused.outcome is RunOutcome.BUDGET_EXCEEDED
    assert refused.failure is not None and refused.failure.code is FailureCode.BUDGET_EXCEEDED
    assert refused.failure.message == (
        "spend limit per day of partition 'local' (0.005 USD) reached: "
        "0.009 USD spent on 2026-12-07 (UTC)"
    )
    assert refused.usage.model_calls == 0
    assert next_day.outcome is RunOutcome.COMPLETED
    by_day = store.spending.usage(group_by=("day",))
    assert [(row.day, row.calls, row.cost) for row in by_day] == [
        ("2026-12-07", 2, Decimal("0.009")),
        ("2026-12-08", 1, Decimal("0.0045")),
    ]


async def test_a_run_in_progress_stops_at_its_next_model_call(
    client: Client, task_queue: str, tmp_path: Path, run_store: Store
) -> None:
    """Another worker's spend (written straight into the store) reaches the limit while the
    run's tool runs: its next model call is refused, the run ends `budget_exceeded`."""
    store = run_store
    store.spending.clock = Clock(datetime(2026, 12, 7, 12, 0, tzinfo=UTC))
    store.spending.set_limit("local", "day", Decimal("0.01"))
    elsewhere = CallSpend("local", "other", "priced", cost=Decimal("0.0055"))

    @tool(name="note")
    def note_and_spend(text: str) -> str:
        """Keep a note (meanwhile another run spends)."""
        with store.engine.begin() as conn:
            store.spending.add(conn, elsewhere)
        return "noted"

    config = _config([note_and_spend])
    async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
        result = await env.agents.run(build_request(entry_agent="twostep", input="go"))
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    assert result.failure is not None
    assert "spend limit per day of partition 'local' (0.01 USD) reached: 0.01 USD" in (
        result.failure.message
    )
    # One call was made and paid; the refused one is counted as a call the run began (as a
    # failed call is), with no tokens and no cost.
    assert result.usage.tool_calls == 1 and result.usage.cost == Decimal("0.0045")
    assert result.usage.total_tokens == 1100


def test_limits_are_per_partition_and_period_and_can_be_removed(store: Store) -> None:
    spending = store.spending
    spending.set_limit("acme", "day", Decimal("2.50"))
    assert spending.limits("acme") == {"day": Decimal("2.5")} and spending.limits("other") == {}
    spending.set_limit("acme", "day", None)
    assert spending.limits("acme") == {}
    with pytest.raises(ValueError, match="period"):
        spending.set_limit("acme", "week", Decimal(1))


def test_amounts_are_kept_exactly_to_the_pico_dollar() -> None:
    assert to_picos(Decimal("0.0000003")) == 300_000
    assert to_dollars(to_picos(Decimal("12.345678901234"))) == Decimal("12.345678901234")
    assert to_dollars(0) == Decimal(0)


def test_usage_groups_by_partition_agent_model_and_day(store: Store) -> None:
    spending = store.spending
    clock = Clock(datetime(2026, 12, 7, tzinfo=UTC))
    spending.clock = clock
    calls = [
        CallSpend("a", "boss", "dear", input_tokens=10, cache_read_tokens=4, cost=Decimal("0.1")),
        CallSpend("a", "boss", "dear", input_tokens=5, cost=Decimal("0.2")),
        CallSpend("a", "helper", "cheap", output_tokens=7, cost=Decimal("0.01")),
        CallSpend("b", "boss", "dear", cost=Decimal("1")),
    ]
    with store.engine.begin() as conn:
        for call in calls:
            spending.add(conn, call)
        clock.now += timedelta(days=1)
        spending.add(conn, calls[0])
    rows = spending.usage(partition_key="a", group_by=("agent", "model"))
    assert [(r.agent_id, r.model_profile_id, r.calls, r.cost) for r in rows] == [
        ("boss", "dear", 3, Decimal("0.4")),
        ("helper", "cheap", 1, Decimal("0.01")),
    ]
    assert rows[0].input_tokens == 25 and rows[0].cache_read_tokens == 8
    assert [(r.partition_key, r.cost) for r in spending.usage(group_by=("partition",))] == [
        ("a", Decimal("0.41")),
        ("b", Decimal("1")),
    ]
    later = spending.usage(group_by=("day",), since=date(2026, 12, 8))
    assert [(r.day, r.cost) for r in later] == [("2026-12-08", Decimal("0.1"))]
    with pytest.raises(ValueError, match="group_by"):
        spending.usage(group_by=("tenant",))
