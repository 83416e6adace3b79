"""Typed results for roots (issue 20): result contracts on root requests, output retries, and
``AgentClient.run(request, output_type=Model)`` returning a validated pydantic value.

Real dev server, worker and SQLite store; the model is scripted (our own seam), and a recording
provider shows what the model was told (the schema up front, the problem on a retry).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Annotated, Any, assert_type
from uuid import uuid4

import pytest
from pydantic import AfterValidator, BaseModel
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.activities.bounded_patterns import PATTERN_BUDGET_SECONDS
from otherone.activities.output import apply_result_contract
from otherone.activities.providers.base import ModelRequest
from otherone.client.agent_client import build_request, root_run_id
from otherone.contracts import WORKFLOW_NAME, RunInput
from otherone.definitions import AgentDefinition
from otherone.errors import (
    FailureCode,
    IdempotencyConflictError,
    InvalidRequestError,
    OutputValidationError,
    RunFailedError,
    RunNotFoundError,
)
from otherone.result_contracts import schema_problem
from otherone.runs import (
    AgentCallRequest,
    AgentRunRequest,
    AgentRunResult,
    ResultContract,
    RunOutcome,
)
from otherone.store import Store
from tests.api_env import api_env
from tests.harness import AgentEnv, agent_env, scripted_config
from tests.processes import REPO_ROOT, address_of, cli_env, otherone
from tests.providers import RecordingProvider

pytestmark = pytest.mark.timeout(120)


class Line(BaseModel):
    item: str
    amount: float


class Invoice(BaseModel):
    number: str
    total: float
    lines: list[Line]


def _even(value: int) -> int:
    if value % 2:
        raise ValueError("must be even")
    return value


class EvenCount(BaseModel):
    """A rule JSON Schema cannot express: only pydantic on the client sees it."""

    count: Annotated[int, AfterValidator(_even)]


class Plain:
    """Not a type pydantic can validate or describe."""


INVOICE = {"number": "INV-7", "total": 42.5, "lines": [{"item": "tea", "amount": 42.5}]}
BAD_TOTAL = {"number": "INV-7", "total": "lots", "lines": []}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _config(script: dict[str, list[Any]], **callable_agents: list[str]) -> Any:
    agents = [
        AgentDefinition.model_validate(
            {
                "id": name,
                "description": f"{name} agent",
                "callable_agents": callable_agents.get(name, []),
            }
        )
        for name in script
    ]
    return scripted_config(script, agents=agents)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _last_user_message(request: ModelRequest) -> str:
    users = [message for message in request.messages if message["role"] == "user"]
    return str(users[-1]["content"])


def _event_types(env: AgentEnv, run_id: str) -> list[dict[str, Any]]:
    return [record.event for record in env.store.read_events(run_id, after=0)]


async def test_root_returns_a_validated_pydantic_model(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = _config(
        {
            "invoicer": [_text(INVOICE)],
            "lister": ["```json\n" + json.dumps([INVOICE, INVOICE]) + "\n```"],
        }
    )
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(entry_agent="invoicer", input="Bill the tea.")
        invoice = await env.agents.run(request, output_type=Invoice)
        listed = await env.agents.run(
            build_request(entry_agent="lister", input="Two bills."), output_type=list[Invoice]
        )
        handle = await env.agents.start(
            build_request(entry_agent="invoicer", input="Again."), output_type=Invoice
        )
        again = await handle.output()
        record = await handle.record()
    assert_type(invoice, Invoice)
    assert_type(listed, list[Invoice])
    assert_type(again, Invoice)
    assert invoice == Invoice.model_validate(INVOICE) == again
    assert listed == [invoice, invoice]  # a whole answer in one code fence is accepted
    assert record.output is not None and record.output.type == "json"
    # The schema is in the system prompt, so that the first answer can already fit it.
    system = str(provider.calls("invoicer")[0].messages[0]["content"])
    assert "single JSON value" in system and '"total"' in system and '"lines"' in system


async def test_a_violation_is_fed_back_and_the_model_answers_again(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    script = {"invoicer": ["Sure! The total is 42.5.", _text(BAD_TOTAL), _text(INVOICE)]}
    async with agent_env(
        client, task_queue, _config(script), tmp_path, providers={"scripted": provider}
    ) as env:
        handle = await env.agents.start(
            build_request(entry_agent="invoicer", input="Bill the tea."), output_type=Invoice
        )
        invoice = await handle.output()
        result = await handle.result()
        events = _event_types(env, handle.run_id)
    assert invoice.number == "INV-7"
    assert result.usage.model_calls == 3  # each retry is a turn of its own
    calls = provider.calls("invoicer")
    assert "Problem: invalid JSON Agent output" in _last_user_message(calls[1])
    assert "retry 1 of 2" in _last_user_message(calls[1])
    feedback = _last_user_message(calls[2])
    assert "at total" in feedback and "retry 2 of 2" in feedback
    rejected = [event for event in events if event["type"] == "output_rejected"]
    assert [(event["turn"], event["retry"], event["retries"]) for event in rejected] == [
        (1, 1, 2),
        (2, 2, 2),
    ]


async def test_retries_run_out_and_the_run_fails_invalid_agent_output(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = {"invoicer": ["not json", _text(BAD_TOTAL), _text(INVOICE)]}
    async with agent_env(client, task_queue, _config(script), tmp_path) as env:
        request = build_request(entry_agent="invoicer", input="Bill.", output_retries=1)
        with pytest.raises(RunFailedError) as raised:
            await env.agents.run(request, output_type=Invoice)
        record = await env.agents.get_run(raised.value.run_id)
    error = raised.value
    assert error.code is FailureCode.INVALID_AGENT_OUTPUT
    result = error.result
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.INVALID_AGENT_OUTPUT
    # The last problem, and how many retries were tried.
    assert (
        "at total" in result.failure.message and "after 1 output retries" in result.failure.message
    )
    assert result.usage.model_calls == 2
    assert record.failure is not None and record.failure.code is FailureCode.INVALID_AGENT_OUTPUT


async def test_pydantic_on_the_client_is_the_final_word(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with agent_env(
        client, task_queue, _config({"counter": ['{"count": 3}']}), tmp_path
    ) as env:
        with pytest.raises(OutputValidationError) as raised:
            await env.agents.run(
                build_request(entry_agent="counter", input="Count."), output_type=EvenCount
            )
        result = await env.agents.result(raised.value.run_id)
    assert result.outcome is RunOutcome.COMPLETED  # the JSON Schema let it through
    assert raised.value.output == {"count": 3}
    assert "count: Value error, must be even" in raised.value.problem
    assert raised.value.run_id in str(raised.value)


async def test_child_contracts_retry_the_same_way(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    provider.gate("root", 1)  # the root stays in its model call while the trusted call runs
    script = {"root": ["never"], "worker": ["{'n': 1}", '{"n": 1}']}
    async with agent_env(
        client,
        task_queue,
        _config(script, root=["worker"]),
        tmp_path,
        providers={"scripted": provider},
    ) as env:
        handle = await env.agents.start(build_request(entry_agent="root", input="wait"))
        await provider.started.wait()
        contract = ResultContract(kind="json", json_schema=SCHEMA)
        request = AgentCallRequest(target="worker", task="answer", result_contract=contract)
        result = await env.agents.call_agent(handle.run_id, "typed", request)
        await handle.cancel()
        await handle.result()
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.output is not None and result.output.value == {"n": 1}
    assert result.usage.model_calls == 2
    system = str(provider.calls("worker")[0].messages[0]["content"])
    assert '"required":["n"]' in system


async def test_a_broken_schema_is_refused_where_the_request_enters(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    broken = ResultContract(kind="json", json_schema={"type": "objekt"})
    async with agent_env(client, task_queue, _config({"invoicer": ["{}"]}), tmp_path) as env:
        request = build_request(
            entry_agent="invoicer", input="Bill.", idempotency_key=f"k-{uuid4().hex}"
        )
        with pytest.raises(InvalidRequestError) as raised:
            await env.agents.start(request.model_copy(update={"result_contract": broken}))
        assert raised.value.field == "result_contract.schema"
        assert "objekt" in raised.value.message
        with pytest.raises(RunNotFoundError):  # nothing started
            await env.agents.get_run(root_run_id(request))
        conflicting = request.model_copy(
            update={"result_contract": ResultContract(kind="json", json_schema=SCHEMA)}
        )
        with pytest.raises(InvalidRequestError) as twice:
            await env.agents.run(conflicting, output_type=Invoice)
        assert twice.value.field == "result_contract"
        with pytest.raises(InvalidRequestError) as not_a_type:
            await env.agents.run(request, output_type=Plain)
        assert not_a_type.value.field == "output_type"
        with pytest.raises(InvalidRequestError) as bad_retries:
            build_request(entry_agent="invoicer", input="Bill.", output_retries=-1)
        assert bad_retries.value.field == "output_retries"
        # A plain Temporal client checks nothing: the run refuses it before any model call.
        run_id = f"run-{uuid4().hex}"
        plain = AgentRunRequest(entry_agent="invoicer", input="Bill.", result_contract=broken)
        result: AgentRunResult = await client.execute_workflow(
            WORKFLOW_NAME,
            RunInput(run_id=run_id, root_run_id=run_id, request=plain),
            id=run_id,
            task_queue=task_queue,
            result_type=AgentRunResult,
        )
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.INVALID_REQUEST
    assert result.failure.message.startswith("result_contract.schema: not a valid JSON Schema")
    assert result.usage.model_calls == 0


async def test_http_api_takes_a_json_contract_and_refuses_a_broken_schema(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = {"invoicer": ['{"n": "one"}', '{"n": 1}']}
    async with api_env(client, task_queue, _config(script), tmp_path) as api:
        body = {
            "entry_agent": "invoicer",
            "input": "Count.",
            "result_contract": {"kind": "json", "schema": SCHEMA},
        }
        started = await api.http.post("/v1/runs", json=body)
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        answer = await api.http.get(f"/v1/runs/{run_id}/result?wait=60")
        broken = {**body, "result_contract": {"kind": "json", "schema": {"type": 5}}}
        refused = await api.http.post("/v1/runs", json=broken)
        too_many = await api.http.post("/v1/runs", json={**body, "output_retries": 11})
    result = AgentRunResult.model_validate(answer.json())
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.output is not None and result.output.value == {"n": 1}
    assert result.usage.model_calls == 2
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "result_contract.schema"
    assert too_many.status_code == 422 and too_many.json()["field"] == "output_retries"


async def test_cli_run_takes_a_result_schema_file_and_refuses_a_broken_one(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    # No configuration file for the CLI: the worker below is the only one that knows the agent.
    env = cli_env(address_of(temporal_env), task_queue, tmp_path, config=None)
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    script = {"invoicer": ['{"n": 2}'], "talker": ["plain words"], "fixer": ["three", '{"n": 3}']}
    try:
        async with agent_env(client, task_queue, _config(script), tmp_path, store=store):
            typed = await otherone(
                "run",
                "invoicer",
                "Count.",
                "--result-schema",
                f"@{schema_file}",
                "--json",
                env=env,
            )
            auto = await otherone(
                "run", "talker", "Talk.", "--result-kind", "auto", "--quiet", env=env
            )
            streamed = await otherone("run", "fixer", "Count.", "--result-kind", "json", env=env)
            broken = await otherone(
                "run", "invoicer", "Count.", "--result-schema", '{"type": "objekt"}', env=env
            )
            not_json = await otherone(
                "run", "invoicer", "Count.", "--result-schema", "{type", env=env
            )
    finally:
        store.close()
    assert typed.code == 0, typed.describe()
    result = AgentRunResult.model_validate_json(typed.stdout.strip())
    assert result.output is not None and result.output.type == "json"
    assert result.output.value == {"n": 2}
    assert auto.code == 0 and auto.stdout.strip() == "plain words", auto.describe()
    assert streamed.code == 0, streamed.describe()
    assert "answer rejected, retry 1 of 2: invalid JSON" in streamed.stderr, streamed.describe()
    assert broken.code == 2, broken.describe()
    assert "result_contract.schema" in broken.stderr and "objekt" in broken.stderr
    assert not_json.code == 2 and "--result-schema: not JSON" in not_json.stderr


async def test_the_contract_is_part_of_the_idempotency_fingerprint(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    provider = RecordingProvider()
    config = _config({"invoicer": [_text(INVOICE)]})
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        request = build_request(entry_agent="invoicer", input="Bill.", idempotency_key="k-typed")
        first = await env.agents.run(request, output_type=Invoice)
        again = await env.agents.run(request, output_type=Invoice)  # joins the same run
        with pytest.raises(IdempotencyConflictError):
            await env.agents.run(request)  # no contract: a different request
    assert first == again and len(provider.calls("invoicer")) == 1


def test_fingerprints_of_requests_without_a_contract_did_not_change() -> None:
    """Runs started by key before result contracts existed are still joined, not conflicts."""
    request = build_request(entry_agent="a", input="x", idempotency_key="k")
    assert request.fingerprint() == (
        "9759fe5ef5ebad376e3d0da92f655e3282fb54baf4e121a6ab50273ba9a45936"
    )
    typed = request.model_copy(update={"result_contract": ResultContract(kind="json")})
    assert typed.fingerprint() != request.fingerprint()


MYPY_SNIPPET = """
    from typing import assert_type

    from pydantic import BaseModel

    from otherone import AgentClient, AgentRunRequest, AgentRunResult, TypedRunHandle


    class Invoice(BaseModel):
        total: float


    async def check(agents: AgentClient, request: AgentRunRequest) -> None:
        assert_type(await agents.run(request, output_type=Invoice), Invoice)
        assert_type(await agents.run(request, output_type=list[Invoice]), list[Invoice])
        assert_type(await agents.run(request), AgentRunResult)
        handle = await agents.start(request, output_type=Invoice)
        assert_type(handle, TypedRunHandle[Invoice])
        assert_type(await handle.output(), Invoice)
"""


@pytest.mark.timeout(300)
def test_mypy_infers_the_output_type(tmp_path: Path) -> None:
    """The overloads of `run` / `start`: mypy knows ``output_type=Invoice`` gives an `Invoice`.
    (Uses the repository's mypy cache: fast after `make lint`, ~40 s cold.)"""
    snippet = tmp_path / "typed_client.py"
    snippet.write_text(textwrap.dedent(MYPY_SNIPPET))
    cache = REPO_ROOT / ".mypy_cache"
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), str(snippet)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"$ref": "#/definitions/nope"}, "refers to '#/definitions/nope', which is not"),
        ({"type": "object", "properties": {"a": {"$ref": "#missing"}}}, "refers to '#missing'"),
        ({"$ref": "https://example.com/s.json"}, "only references inside the schema"),
    ],
)
def test_a_schema_whose_reference_leads_nowhere_is_refused(
    schema: dict[str, Any], problem: str
) -> None:
    """Found only while checking answers, a dangling ``$ref`` failed every answer and the model
    was asked to retry for the schema's mistake (3 model calls, then `invalid_agent_output`)."""
    assert problem in (schema_problem(schema) or "")


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/n", "$defs": {"n": {"type": "integer"}}},
        {"type": "object", "properties": {"next": {"$ref": "#"}}},
        {"$ref": "#one", "$defs": {"n": {"$anchor": "one", "type": "string"}}},
        {"$ref": "#/properties/a~1b", "properties": {"a/b": {"type": "string"}}},
        {"$defs": {"x": {"$id": "x.json", "$ref": "#/nowhere-here"}}},  # another base: left alone
    ],
)
def test_references_that_resolve_are_kept(schema: dict[str, Any]) -> None:
    assert schema_problem(schema) is None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"$ref": "#/properties/x"}}},
        {"$ref": "#"},
        {
            "$ref": "#/$defs/a",
            "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}},
        },
    ],
)
def test_a_reference_that_leads_back_to_itself_is_refused(schema: dict[str, Any]) -> None:
    """Accepted before, such a schema failed every answer with a RecursionError, and the model
    was asked to fix its answer for the schema's mistake (README: refused before anything
    starts). Recursion through ``properties``/``items`` is kept (see above)."""
    assert "leads back to itself" in (schema_problem(schema) or "")
    tree = {
        "$ref": "#/$defs/n",
        "$defs": {
            "n": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
            }
        },
    }
    assert schema_problem(tree) is None


def test_a_backtracking_pattern_cannot_stall_the_worker() -> None:
    """A contract's patterns run on the model's answer, and the schema is any caller's: one
    like ``^(a|aa)+$`` backtracks for hours on a long answer with Python's `re`, holding the
    worker (a chaos test stalled every tenant's runs for 50 s with ``^(\\w+\\s?)*$``). They
    are matched under a time budget; one that runs past it is a mismatch naming it."""
    slow = {"type": "object", "properties": {"answer": {"type": "string", "pattern": "^(a|aa)+$"}}}
    contract = ResultContract.model_validate({"kind": "json", "schema": slow})
    started = time.monotonic()
    _, problem = apply_result_contract(json.dumps({"answer": "a" * 60 + "!"}), contract)
    assert time.monotonic() - started < PATTERN_BUDGET_SECONDS + 3
    assert problem is not None and "'^(a|aa)+$' ran longer than" in problem
    _, fine = apply_result_contract(json.dumps({"answer": "aaa"}), contract)
    assert fine is None
    keyed = {"patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False}
    contract = ResultContract.model_validate({"kind": "json", "schema": keyed})
    assert apply_result_contract('{"x_a": 1}', contract)[1] is None
    _, extra = apply_result_contract('{"x_a": 1, "y": 2}', contract)
    assert extra is not None and "'y'" in extra and "'^x_'" in extra


def test_schemas_whose_patterns_cannot_be_time_limited_are_refused() -> None:
    """jsonschema matches the patterns of `unevaluatedProperties` next to `patternProperties`
    itself (no time limit): refused where the contract enters; and a schema nested too deeply
    for the checker is refused, not a 500 with a 2,000-line traceback."""
    untimed = {"patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    assert "is not supported" in (schema_problem({"properties": {"x": untimed}}) or "")
    deep: dict[str, Any] = {"type": "array"}
    for _ in range(400):
        deep = {"type": "array", "items": deep}
    assert schema_problem(deep) == "nested too deeply to be checked"
