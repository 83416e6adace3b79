"""Guardrails in traces and metrics (issue 45): a span per guardrail attempt naming the
guardrail and its verdict, and Prometheus verdict counts per guardrail."""

from __future__ import annotations

from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.runs import RunOutcome
from otherone.store import Store
from otherone.worker.app import build_worker
from otherone.worker.connection import connect
from otherone.worker.telemetry import OtheroneActivityInterceptor, prometheus_runtime
from tests.guardrail_fixtures import ALL_GUARDRAILS
from tests.harness import scripted_config
from tests.test_tracing import attr, free_port, named, traced_client


def _config() -> RuntimeConfig:
    agent = AgentDefinition.model_validate(
        {
            "id": "clerk",
            "description": "a clerk",
            "guardrails": {"input": ["no_secrets"], "output": ["polite_answer"]},
        }
    )
    config = scripted_config({"clerk": ["a stupid answer"]}, agents=[agent])
    for check in ALL_GUARDRAILS:
        config.add_guardrail(check)
    return config


async def test_each_guardrail_attempt_is_a_span_with_its_verdict(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    config = _config()
    async with traced_client(temporal_env) as (client, tracer, exporter):
        store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
        try:
            worker = build_worker(
                client,
                config,
                store,
                task_queue=task_queue,
                interceptors=[OtheroneActivityInterceptor(tracer, config)],
            )
            async with worker:
                agents = AgentClient(client, task_queue=task_queue, store=store)
                result = await agents.run(build_request(entry_agent="clerk", input="hi"))
        finally:
            store.close()
        spans = exporter.get_finished_spans()
    assert result.outcome is RunOutcome.FAILED
    guardrails = {attr(span, "otherone.guardrail.name"): span for span in named(spans, "guardrail")}
    assert set(guardrails) == {"no_secrets", "polite_answer"}
    assert attr(guardrails["no_secrets"], "otherone.guardrail.kind") == "input"
    assert attr(guardrails["no_secrets"], "otherone.guardrail.tripped") is False
    assert attr(guardrails["polite_answer"], "otherone.guardrail.tripped") is True
    assert attr(guardrails["polite_answer"], "otherone.guardrail.reason") == "the answer is rude"
    assert attr(guardrails["polite_answer"], "otherone.run_id") == result.run_id


async def test_verdicts_are_counted_per_guardrail_in_prometheus(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    port = free_port()
    client = await connect(
        temporal_env.client.service_client.config.target_host,
        temporal_env.client.namespace,
        runtime=prometheus_runtime(port),
    )
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        async with build_worker(client, _config(), store, task_queue=task_queue):
            agents = AgentClient(client, task_queue=task_queue, store=store)
            await agents.run(build_request(entry_agent="clerk", input="hi"))
            async with httpx.AsyncClient() as http:
                metrics = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    finally:
        store.close()
    lines = [
        line for line in metrics.splitlines() if line.startswith("otherone_guardrail_verdicts")
    ]
    passed = [
        line for line in lines if 'guardrail="no_secrets"' in line and 'verdict="passed"' in line
    ]
    tripped = [
        line
        for line in lines
        if 'guardrail="polite_answer"' in line and 'verdict="tripped"' in line
    ]
    assert passed and passed[0].endswith(" 1"), lines
    assert tripped and tripped[0].endswith(" 1"), lines
