"""Cost of whole run trees (real dev server, workers and SQLite store; scripted models with
declared prices and fixed token counts, so every figure is known exactly), and the tree-wide
`cost_budget`, enforced by allowance like `token_budget`."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from rich.console import Console
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig

from otherone.client.agent_client import AgentClient, build_request
from otherone.client.records_view import print_run_tree, total_cost
from otherone.config import RuntimeConfig
from otherone.definitions import (
    AgentDefinition,
    ModelPrices,
    ModelProfile,
    RunLimitOverrides,
    RuntimeLimits,
    TreeBudget,
)
from otherone.errors import FailureCode
from otherone.runs import RunOutcome, RunStatus
from otherone.store import Store
from otherone.worker.app import build_worker
from otherone.workflows.budgets import BudgetLedger
from otherone.workflows.outcomes import RunEnded
from tests.harness import agent_env
from tests.test_compaction import fetch, reader_config
from tests.test_handoff import chain_config, lookup, run_chain


def _call(agent: str, call_id: str, tokens: tuple[int, int]) -> dict[str, Any]:
    call = {"name": "agent.call", "id": call_id, "arguments": {"agent": agent, "task": "go"}}
    return {"tool_calls": [call], "input_tokens": tokens[0], "output_tokens": tokens[1]}


def _say(text: str, tokens: tuple[int, int]) -> dict[str, Any]:
    return {"text": text, "input_tokens": tokens[0], "output_tokens": tokens[1]}


def _profile(profile_id: str, prices: dict[str, str], script: dict[str, Any]) -> ModelProfile:
    return ModelProfile.model_validate(
        {
            "id": profile_id,
            "provider": "scripted",
            "model": "test",
            "prices": prices,
            "script": script,
        }
    )


def _two_profile_config(limits: RuntimeLimits | None = None) -> RuntimeConfig:
    """``boss`` on a dear profile asks ``helper``, on a cheap one, twice."""
    dear = _profile(
        "dear",
        {"input": "3", "output": "15"},
        {
            "boss": [
                _call("helper", "h1", (1000, 100)),
                _call("helper", "h2", (1000, 100)),
                _say("done", (2000, 50)),
            ]
        },
    )
    cheap = _profile(
        "cheap", {"input": "0.25", "output": "1.25"}, {"helper": [_say("note", (400, 80))] * 2}
    )
    agents = [
        AgentDefinition(id="boss", description="Plans.", model="dear", callable_agents=["helper"]),
        AgentDefinition(id="helper", description="Helps.", model="cheap"),
    ]
    return RuntimeConfig(agents=agents, models=[dear, cheap], limits=limits)


# boss: 4000 in x $3 + 250 out x $15 = $0.01575; each helper: 400 x $0.25 + 80 x $1.25 = $0.0002.
BOSS_COST = Decimal("0.01575")
HELPER_COST = Decimal("0.0002")


async def test_the_cost_of_a_tree_on_two_profiles_is_exact(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with agent_env(client, task_queue, _two_profile_config(), tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="boss", input="go"))
        tree = await env.agents.list_run_tree(result.run_id)
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.usage.cost == BOSS_COST
    assert [record.usage.cost for record in tree] == [BOSS_COST, HELPER_COST, HELPER_COST]
    assert total_cost(record.usage for record in tree) == Decimal("0.01615")
    out = io.StringIO()
    print_run_tree(Console(file=out, width=200), tree)
    assert "$0.01575" in out.getvalue() and "$0.0002" in out.getvalue()
    assert "$0.01615" in out.getvalue().splitlines()[-1]  # the tree's total line


async def test_a_cost_budget_stops_a_tree_midway_across_two_workers(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """$0.005 for the tree: the boss's first call ($0.00450) leaves $0.0005, half of which
    funds the first helper, whose call ($0.0002) fits; the boss's second call passes the
    budget and ends the tree `budget_exceeded` naming the limit, before a second helper.

    Two workers, as two processes would be (each its own Temporal runtime and connection):
    one runs the workflows (and tools), the other every model call, so each call is priced on
    one worker and charged to the tree's budget on the other."""
    config = _two_profile_config(RuntimeLimits(cost_budget=Decimal("0.005")))
    store = Store.open(f"sqlite:///{tmp_path / 'shared.db'}")
    other = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=client.data_converter,
        runtime=Runtime(telemetry=TelemetryConfig()),
    )
    queues = {"model_task_queue": f"{task_queue}-model", "tool_task_queue": f"{task_queue}-tools"}
    try:
        async with (
            build_worker(
                client, config, store, task_queue=task_queue, roles=["workflows", "tools"], **queues
            ),
            build_worker(other, config, store, task_queue=task_queue, roles=["model"], **queues),
        ):
            agents = AgentClient(client, task_queue=task_queue, store=store)
            result = await agents.run(build_request(entry_agent="boss", input="go"))
            tree = await agents.list_run_tree(result.run_id)
    finally:
        store.close()
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    assert result.failure is not None and result.failure.code is FailureCode.BUDGET_EXCEEDED
    assert result.failure.message == "cost_budget (0.005 USD) exceeded for the run tree"
    assert [record.status for record in tree] == [RunStatus.BUDGET_EXCEEDED, RunStatus.COMPLETED]
    assert result.usage.model_calls == 2
    assert result.usage.cost == Decimal("0.0090")


async def test_a_request_can_tighten_the_cost_budget(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """No runtime budget; the request's $0.004 stops the boss at its first call."""
    async with agent_env(client, task_queue, _two_profile_config(), tmp_path) as env:
        request = build_request(entry_agent="boss", input="go", limits={"cost_budget": "0.004"})
        result = await env.agents.run(request)
    assert result.outcome is RunOutcome.BUDGET_EXCEEDED
    assert result.failure is not None and "cost_budget (0.004 USD)" in result.failure.message
    assert result.usage.model_calls == 1


def test_cost_budget_overrides_only_tighten_and_bad_values_name_the_field() -> None:
    limits = RuntimeLimits(cost_budget=Decimal("1"))
    assert limits.tightened(RunLimitOverrides(cost_budget=Decimal("0.5"))).cost_budget == Decimal(
        "0.5"
    )
    with pytest.raises(ValueError, match=r"limits\.cost_budget"):
        limits.tightened(RunLimitOverrides(cost_budget=Decimal("2")))
    for bad in (-1, True, "much"):
        with pytest.raises(ValidationError, match="cost_budget"):
            RuntimeLimits.model_validate({"cost_budget": bad})


def test_children_get_a_share_of_the_cost_and_give_back_what_they_did_not_spend() -> None:
    limits = RuntimeLimits(cost_budget=Decimal("0.01"))
    ledger = BudgetLedger(TreeBudget.for_root(limits), limits)
    ledger.spend_cost(Decimal("0.004"))
    share = ledger.allot(2)
    assert share.cost == Decimal("0.002")  # a third of $0.006: two children and this run
    assert ledger.left().cost == Decimal("0.004")
    ledger.refund(share.model_copy(update={"cost": Decimal("0.0015")}))
    assert ledger.left().cost == Decimal("0.0055")
    with pytest.raises(RunEnded):
        ledger.spend_cost(Decimal("0.0056"))
    thirds = BudgetLedger(TreeBudget.for_root(RuntimeLimits(cost_budget=Decimal("1"))), limits)
    assert thirds.allot(2).cost == Decimal("0.333333333333")  # rounded down, never over


async def test_compaction_summaries_are_priced_and_counted_in_the_partitions_spend(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A long session compacted on the way: the summary calls cost too (one priced profile,
    so the run's cost is its tokens at its prices), and the store's spend rows count every
    call, summaries included, at the same total."""
    config = reader_config()
    model = config.models["scripted"].model_copy(
        update={"prices": ModelPrices(input=Decimal(3), output=Decimal(15))}
    )
    priced = RuntimeConfig(
        agents=list(config.agents.values()), models=[model], tools=[fetch], limits=config.limits
    )
    async with agent_env(client, task_queue, priced, tmp_path) as env:
        request = build_request(
            entry_agent="reader", input="read", session={"context_window": 1000}
        )
        result = await env.agents.run(request)
        spent = env.store.spending.usage(group_by=())
    usage = result.usage
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert usage.model_calls > 13  # summaries were made
    assert usage.input_tokens is not None and usage.output_tokens is not None
    expected = (usage.input_tokens * 3 + usage.output_tokens * 15) / Decimal(1_000_000)
    assert usage.cost == expected
    assert [(row.calls, row.cost) for row in spent] == [(usage.model_calls, expected)]


async def test_handoff_summaries_are_priced_and_counted_in_the_partitions_spend(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """triage → billing → expert with `summary` context: the two summary calls cost as the
    turns do (one priced profile), in the run's cost and, per handing agent, in the spend."""
    config = chain_config("summary")
    model = config.models["scripted"].model_copy(
        update={"prices": ModelPrices(input=Decimal(3), output=Decimal(15))}
    )
    priced = RuntimeConfig(
        agents=list(config.agents.values()), models=[model], tools=[lookup], limits=config.limits
    )
    async with agent_env(client, task_queue, priced, tmp_path) as env:
        result = await run_chain(env, "cost-chain")
        rows = env.store.spending.usage(group_by=("agent",))
    usage = result.usage
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert usage.input_tokens is not None and usage.output_tokens is not None
    assert usage.cost == (usage.input_tokens * 3 + usage.output_tokens * 15) / Decimal(1_000_000)
    calls = {row.agent_id: row.calls for row in rows}
    # greeter 1; triage: its turn and its summary; billing likewise; expert 2 turns.
    assert calls == {"greeter": 1, "triage": 2, "billing": 2, "expert": 2}
    chain = sum((row.cost for row in rows if row.agent_id != "greeter"), Decimal(0))
    assert chain == usage.cost
