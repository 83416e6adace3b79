"""The seed's output budget (`budget.add_output_bytes`): `RuntimeLimits.max_output_bytes` bounds
the UTF-8 bytes of the final answers of a whole run tree; the answer that passes it ends its run
`budget_exceeded`. Real dev server and store for the runs; the limit's validation without."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import Client

from otherone.client.agent_client import AgentClient, build_request
from otherone.client.request_checks import check_against_config
from otherone.definitions import (
    AgentDefinition,
    RunLimitOverrides,
    RuntimeLimits,
    RuntimePolicy,
    TreeBudget,
)
from otherone.errors import ConfigurationError, FailureCode, InvalidRequestError
from otherone.runs import AgentOutput, ArtifactRef, RunOutcome, RunStatus
from otherone.toml_config import load_config
from otherone.workflows.budgets import BudgetLedger, Claimants, output_size
from otherone.workflows.outcomes import RunEnded
from tests.api_env import api_env
from tests.harness import agent_env, scripted_config

#: 20 characters, 40 UTF-8 bytes: a budget counting characters would let the "over" tree pass.
WORKER_ANSWER = "é" * 20


def _agent(agent_id: str, **fields: Any) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"id": agent_id, "description": f"{agent_id} agent", **fields}
    )


def _ask_worker(call_id: str) -> dict[str, Any]:
    call = {"name": "agent.call", "id": call_id, "arguments": {"agent": "worker", "task": "w"}}
    return {"tool_calls": [call]}


def _tree_config(**answers: str) -> Any:
    """Coordinators (one per answer) that each ask `worker` once, then answer."""
    script: dict[str, list[Any]] = {
        name: [_ask_worker(f"{name}-1"), answer] for name, answer in answers.items()
    }
    script["worker"] = [WORKER_ANSWER]
    agents = [_agent(name, callable_agents=["worker"]) for name in answers]
    return scripted_config(
        script,
        agents=[*agents, _agent("worker")],
        limits=RuntimeLimits(max_output_bytes=1000),
        # A fresh history after every turn: the remaining budget must cross continue-as-new.
        policy=RuntimePolicy(continue_as_new_after_turns=1),
    )


# --------------------------------------------------------------------------- the limit itself


@pytest.mark.parametrize("value", [0, -1, 1.5, "100", True])
def test_bad_values_are_refused_naming_the_field(value: Any) -> None:
    with pytest.raises(ValidationError, match="max_output_bytes"):
        RuntimeLimits.model_validate({"max_output_bytes": value})
    with pytest.raises(ValidationError, match="max_output_bytes"):
        RunLimitOverrides.model_validate({"max_output_bytes": value})
    with pytest.raises(InvalidRequestError) as refused:
        build_request(entry_agent="a", input="hi", limits={"max_output_bytes": value})
    assert refused.value.field == "limits.max_output_bytes"


def test_unlimited_by_default_as_in_the_seed() -> None:
    assert RuntimeLimits().max_output_bytes is None
    assert TreeBudget.for_root(RuntimeLimits()).output_bytes is None
    assert TreeBudget.for_root(RuntimeLimits(max_output_bytes=7)).output_bytes == 7


def test_toml_limits_take_it_and_refuse_zero_naming_it(tmp_path: Path) -> None:
    body = (
        "[limits]\nmax_output_bytes = {value}\n"
        '[models.demo]\nprovider = "scripted"\nmodel = "demo-1"\n'
        '[agents.assistant]\ndescription = "d"\nmodel = "demo"\n'
    )
    good = tmp_path / "good.toml"
    good.write_text(body.format(value=4096))
    assert load_config(good).limits.max_output_bytes == 4096
    bad = tmp_path / "bad.toml"
    bad.write_text(body.format(value=0))
    with pytest.raises(ConfigurationError) as refused:
        load_config(bad)
    assert (refused.value.table, refused.value.field) == ("limits", "max_output_bytes")


def test_overrides_can_only_tighten_it() -> None:
    limits = RuntimeLimits(max_output_bytes=100)
    assert limits.tightened(RunLimitOverrides(max_output_bytes=60)).max_output_bytes == 60
    with pytest.raises(ValueError, match=r"limits\.max_output_bytes.*only tighten"):
        limits.tightened(RunLimitOverrides(max_output_bytes=101))
    # From unlimited, any limit tightens.
    assert RuntimeLimits().tightened(RunLimitOverrides(max_output_bytes=5)).max_output_bytes == 5
    config = scripted_config({"a": ["hi"]}, limits=limits)
    loose = build_request(entry_agent="a", input="hi", limits={"max_output_bytes": 101})
    with pytest.raises(InvalidRequestError) as refused:
        check_against_config(loose, config)
    assert refused.value.field == "limits.max_output_bytes"


# --------------------------------------------------------------------------- the ledger


def test_answers_count_utf8_bytes_and_typed_results_their_json_text() -> None:
    assert output_size(AgentOutput(type="text", value="héllo")) == 6
    typed = AgentOutput(type="json", value={"k": "é"})
    assert output_size(typed) == len(json.dumps({"k": "é"}, ensure_ascii=False).encode()) == 11
    artifact = ArtifactRef(
        artifact_id="art-1", partition_key="local", name="n", media_type="text/plain", size_bytes=9
    )
    assert output_size(AgentOutput(type="text", artifact=artifact)) == 9


def test_a_chain_answers_as_the_shared_count_would_and_parallel_children_split() -> None:
    limits = RuntimeLimits(max_output_bytes=100)
    parent = BudgetLedger(TreeBudget.for_root(limits), limits)
    child = parent.allot(Claimants(1).left)
    assert child.output_bytes == 100  # the parent answers only after it, with what is left
    parent.refund(child.model_copy(update={"output_bytes": 30}))
    parent.spend_output_bytes(AgentOutput(value="p" * 30))
    with pytest.raises(RunEnded) as ended:
        parent.spend_output_bytes(AgentOutput(value="p"))
    failure = ended.value.ending.failure
    assert failure is not None and failure.code is FailureCode.BUDGET_EXCEEDED
    assert failure.message == "max_output_bytes (100) exceeded for the run tree"

    parallel = BudgetLedger(TreeBudget.for_root(limits), limits)
    turn = Claimants(2)
    first = parallel.allot(turn.left)
    turn.settle()
    second = parallel.allot(turn.left)
    assert (first.output_bytes, second.output_bytes, parallel.left().output_bytes) == (50, 50, 0)
    # A trusted call (the caller's loop goes on meanwhile) leaves the caller a share.
    trusted = BudgetLedger(TreeBudget.for_root(limits), limits)
    assert trusted.allot(1, caller_goes_on=True).output_bytes == 50


def test_budgets_written_before_it_stay_unlimited() -> None:
    old = TreeBudget.model_validate(
        {"runs": 3, "model_calls": 5, "tool_calls": 5, "agent_calls": 2}
    )
    limits = RuntimeLimits(max_output_bytes=1)  # a plan of the new build, a budget of the old
    ledger = BudgetLedger(old, limits)
    ledger.spend_output_bytes(AgentOutput(value="x" * 1000))
    assert ledger.allot(1).output_bytes is None


# --------------------------------------------------------------------------- runs


async def test_the_answer_that_passes_the_tree_limit_ends_its_run_budget_exceeded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Worker 40 bytes + coordinator 60 = the request's limit of 100: completed; 61: the
    coordinator's answer passes it and the root ends budget_exceeded (its child completed)."""
    config = _tree_config(under="u" * 60, over="o" * 61)
    limit = {"max_output_bytes": 100}  # tightens the runtime's 1000
    async with agent_env(client, task_queue, config, tmp_path) as env:
        under = await env.agents.run(build_request(entry_agent="under", input="go", limits=limit))
        over = await env.agents.run(build_request(entry_agent="over", input="go", limits=limit))
        over_tree = await env.agents.list_run_tree(over.root_run_id)
        over_entries = env.store.load_entries("local", over.session_id)
        history = await client.get_workflow_handle(over.run_id).fetch_history()
    assert under.outcome is RunOutcome.COMPLETED and under.text == "u" * 60
    assert over.outcome is RunOutcome.BUDGET_EXCEEDED
    assert over.failure is not None and over.failure.code is FailureCode.BUDGET_EXCEEDED
    assert over.failure.message == "max_output_bytes (100) exceeded for the run tree"
    assert [record.status for record in over_tree] == [
        RunStatus.BUDGET_EXCEEDED,
        RunStatus.COMPLETED,
    ]
    # The answer stays in the session, as in the seed: only the run's result is refused.
    assert over_entries[-1].role == "assistant" and over_entries[-1].content == "o" * 61
    # The budget left after the child crossed continue-as-new into the history that answered.
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id


async def test_without_the_override_the_runtime_limit_holds(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _tree_config(over="o" * 61)
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="over", input="go"))
    assert result.outcome is RunOutcome.COMPLETED  # 101 bytes of 1000


async def test_a_child_whose_answer_passes_the_limit_fails_and_so_does_its_caller(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The child's answer alone passes the limit: the child ends budget_exceeded, its caller
    gets that as the call's result, and the tree has nothing left for the caller's answer."""
    config = _tree_config(boss="done")
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(
            build_request(entry_agent="boss", input="go", limits={"max_output_bytes": 39})
        )
        tree = await env.agents.list_run_tree(result.root_run_id)
        [call_result] = [
            json.loads(entry.content)
            for entry in env.store.load_entries("local", result.session_id)
            if entry.role == "tool"
        ]
    assert [record.status for record in tree] == [
        RunStatus.BUDGET_EXCEEDED,
        RunStatus.BUDGET_EXCEEDED,
    ]
    assert call_result["outcome"] == "budget_exceeded"
    assert call_result["failure"]["code"] == "budget_exceeded"
    assert "max_output_bytes (39)" in call_result["failure"]["message"]
    assert result.failure is not None and "max_output_bytes (39)" in result.failure.message


async def test_a_loosening_override_fails_the_run_naming_the_field_without_a_config(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A client that does not know the workers' configuration cannot refuse it: the run does."""
    config = _tree_config(boss="done")
    async with agent_env(client, task_queue, config, tmp_path):
        plain = AgentClient(client, task_queue=task_queue)
        request = build_request(entry_agent="worker", input="go", limits={"max_output_bytes": 1001})
        result = await plain.run(request)
    assert result.outcome is RunOutcome.FAILED
    assert result.failure is not None
    assert result.failure.code is FailureCode.INVALID_CONFIGURATION
    assert "limits.max_output_bytes" in result.failure.message


async def test_the_http_api_takes_it_in_a_request_and_refuses_bad_ones_naming_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = _tree_config(over="o" * 61)
    async with api_env(client, task_queue, config, tmp_path) as api:
        for value in (0, -1, 2.5, "64", 1001):  # 1001: above the workers' 1000
            body = {"entry_agent": "over", "input": "go", "limits": {"max_output_bytes": value}}
            refused = await api.http.post("/v1/runs", json=body)
            assert refused.status_code == 422, refused.text
            assert refused.json()["field"] == "limits.max_output_bytes", refused.text
        body = {"entry_agent": "over", "input": "go", "limits": {"max_output_bytes": 100}}
        started = await api.http.post("/v1/runs", json=body)
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        answer = await api.http.get(f"/v1/runs/{run_id}/result?wait=60")
    assert answer.status_code == 200, answer.text
    assert answer.json()["outcome"] == "budget_exceeded"
    assert "max_output_bytes (100)" in answer.json()["failure"]["message"]
