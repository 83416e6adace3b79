"""Prometheus metrics per agent, profile and tool (issue 48), scraped from a worker's real
``/metrics`` endpoint after a scenario that exercises each: model calls (one failed attempt),
tokens, a tool call, an agent call, capacity waits, an approval wait, finished runs; and the
Grafana dashboard in deploy/ references only metrics that endpoint serves."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile, RuntimeLimits
from otherone.runs import RunOutcome
from otherone.store import Store
from otherone.tools import tool
from otherone.worker.activity_metrics import METRICS
from otherone.worker.app import build_worker, connect
from otherone.worker.telemetry import prometheus_runtime
from tests.test_approvals import open_requests
from tests.test_tracing import free_port, lookup

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "otherone-dashboard.json"
#: What Prometheus appends to a histogram's name (Temporal's exporter adds no ``_total``).
SUFFIXES = ("_bucket", "_sum", "_count")


@tool(approval="always")
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def metrics_team() -> RuntimeConfig:
    def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
        return {"tool_calls": [{"name": name, "id": call_id, "arguments": arguments}]}

    slow = {"text": "slow answer", "delay_seconds": 0.4}
    script = {
        "coordinator": [
            {**call("lookup", "t1", city="Paris"), "input_tokens": 11, "output_tokens": 7},
            call("agent.call", "c1", agent="worker", task="work"),
            "final answer",
        ],
        "worker": [{"text": "worker result", "fail": {"attempts": 1}}],
        "clerk": [call("send_email", "m1", to="bob"), "sent"],
        "sleeper": [slow, slow],
    }
    # priced, so that the calls have a cost ($1,000 / $2,000 per million tokens)
    model = ModelProfile.model_validate(
        {
            "id": "scripted",
            "provider": "scripted",
            "model": "test",
            "script": script,
            "prices": {"input": "1000", "output": "2000"},
        }
    )
    return RuntimeConfig(
        agents=[
            AgentDefinition(
                id="coordinator", description="c", callable_agents=["worker"], tools=["lookup"]
            ),
            AgentDefinition(id="worker", description="w"),
            AgentDefinition(id="clerk", description="k", tools=["send_email"]),
            AgentDefinition(id="sleeper", description="s"),
        ],
        models=[model],
        tools=[lookup, send_email],
        limits=RuntimeLimits(max_concurrent_model_calls=1),  # the sleepers wait for each other
    )


async def scenario_metrics(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> str:
    """The worker's /metrics text after the scenario."""
    port = free_port()
    client = await connect(
        temporal_env.client.service_client.config.target_host,
        temporal_env.client.namespace,
        runtime=prometheus_runtime(port),
    )
    store = Store.open(f"sqlite:///{tmp_path / 'metrics.db'}")
    try:
        async with build_worker(client, metrics_team(), store, task_queue=task_queue):
            agents = AgentClient(client, task_queue=task_queue, store=store)
            sleepers = [
                await agents.start(build_request(entry_agent="sleeper", input=str(n)))
                for n in range(2)
            ]
            clerk = await agents.start(build_request(entry_agent="clerk", input="mail bob"))
            await open_requests(agents, clerk.run_id)
            await agents.approve(clerk.run_id, "m1")
            root = await agents.run(build_request(entry_agent="coordinator", input="start"))
            ended = await asyncio.gather(*(h.result() for h in [*sleepers, clerk]))
            assert root.outcome is RunOutcome.COMPLETED, root
            assert all(result.outcome is RunOutcome.COMPLETED for result in ended), ended
            async with httpx.AsyncClient() as http:
                return (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    finally:
        store.close()


def samples(metrics: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of ``name`` (exactly: no other metric's), with their labels."""
    found = []
    for line in metrics.splitlines():
        match = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if match and match.group(1) == name:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
            found.append((labels, float(match.group(3))))
    return found


def value(metrics: str, name: str, **labels: str) -> float:
    return sum(v for found, v in samples(metrics, name) if labels.items() <= found.items())


def exported_names(metrics: str) -> set[str]:
    return {
        match.group(1)
        for line in metrics.splitlines()
        if (match := re.match(r"([a-zA-Z_:][\w:]*)[{ ]", line))
    }


def base_name(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


async def test_agent_profile_and_tool_metrics_and_the_dashboard(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    metrics = await scenario_metrics(temporal_env, task_queue, tmp_path)
    calls = "otherone_model_calls"
    assert value(metrics, calls, agent="coordinator", profile="scripted", outcome="ok") == 3
    assert value(metrics, calls, agent="worker", outcome="error") == 1  # the failed attempt
    assert value(metrics, calls, agent="worker", outcome="ok") == 1
    tokens = "otherone_model_tokens"
    assert value(metrics, tokens, agent="coordinator", type="input") >= 11
    assert value(metrics, tokens, agent="coordinator", type="output") >= 7
    assert value(metrics, "otherone_model_call_seconds_count", agent="coordinator") == 3
    tool_calls = "otherone_tool_calls"
    assert value(metrics, tool_calls, agent="coordinator", tool="lookup", outcome="ok") == 1
    assert value(metrics, "otherone_tool_call_seconds_count", tool="send_email") == 1
    waited = "otherone_approval_wait_seconds_count"
    assert value(metrics, waited, agent="clerk", tool="send_email", decision="approved") == 1
    # two sleepers, one permit: at least one of their calls waited for the other's
    assert value(metrics, "otherone_capacity_wait_seconds_count", agent="sleeper") >= 1
    assert value(metrics, "otherone_capacity_wait_seconds_sum", agent="sleeper") > 0
    finished = "otherone_runs_finished"
    assert value(metrics, finished, agent="coordinator", status="completed") == 1
    assert value(metrics, finished, agent="sleeper", status="completed") == 2
    assert value(metrics, "otherone_run_seconds_count", agent="worker") == 1
    cost = "otherone_model_cost_microusd"  # 11 x $1,000 + 7 x $2,000 per million
    assert value(metrics, cost, agent="coordinator") >= 11 * 1000 + 7 * 2000

    exported = exported_names(metrics)
    ours = {base_name(name) for name in exported if name.startswith("otherone_")}
    assert set(METRICS) <= ours  # every metric of the registry was served

    # the dashboard: valid JSON whose every query names only metrics the worker serves
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    assert len(expressions) >= 8
    expressions += [  # the variables' queries too
        str(variable.get("definition", "")) for variable in dashboard["templating"]["list"]
    ]
    referenced = {
        name
        for expr in expressions
        for name in re.findall(r"\b((?:otherone|temporal)_[a-z0-9_]+)\b", expr)
    }
    assert referenced
    missing = sorted(name for name in referenced if name not in exported)
    assert not missing, f"the dashboard uses metrics the worker does not serve: {missing}"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
