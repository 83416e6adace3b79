"""A secret appears nowhere: canaries in every place a secret lives, servers that echo them back,
then every sink searched for any 16-character piece of any of them (issue 51).

Where the canaries live: a provider key in the environment and one in the secrets file, an MCP
server's bearer token (``headers_env``) and a stdio server's credential (``env``), the store's
database password (PostgreSQL; a refused connection on both backends), and the HTTP API's token.
What echoes them: an OpenAI-style error that quotes the key across the 500-character cut, an
Anthropic 401 quoting its key, an MCP server that returns its Authorization header in a tool
result and in a tool error, a stdio server that prints its credential in a result, an error and
on stderr, an MCP server and a database that refuse connections, a completion webhook receiver
that refuses its first POST quoting the partition's webhook signing secret.
Sinks searched: every table of the store (SQLite and PostgreSQL), the worker's log records at
DEBUG and everything written to the process's stdout/stderr (MCP servers' stderr included),
stored events, the SSE and AG-UI streams, the decoded Temporal history of every run, the
OpenTelemetry spans (GenAI content capture on), the HTTP API's answers and page, run results,
the webhooks' bodies and headers and their deliveries' histories, and the CLI's ``--help`` and
``show`` output (at DEBUG). The webhook secret lives in the store's ``otherone_webhook_secrets``
(its home; no other table, no event, no log may show it). Positive controls show each sink holds
what the runs did and that each secret did reach the server it was meant for.
"""

from __future__ import annotations

import json
import logging
import secrets
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_http_headers
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import make_url, select
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.testing import WorkflowEnvironment

from otherone.api import ApiContext, ApiServer
from otherone.api.server import parse_tokens
from otherone.config import RuntimeConfig
from otherone.contracts import WebhookDelivered, delivery_workflow_id
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.errors import OtheroneError
from otherone.mcp_servers import McpServer
from otherone.payloads import compact_data_converter
from otherone.store import Store
from otherone.store.schema import metadata, webhook_secrets
from otherone.webhooks import SIGNATURE_HEADER, verify_signature
from otherone.worker.app import build_worker
from otherone.worker.devserver import free_port
from otherone.worker.telemetry import OtheroneActivityInterceptor
from tests.fixtures.providers.wire_server import Reply, Seen, WireServer
from tests.harness import history_with_payloads
from tests.mcp_http_server import McpTestServer, serving
from tests.processes import address_of, cli_env, otherone
from tests.sse import read_stream
from tests.webhook_receiver import Receiver, receiving

pytestmark = pytest.mark.timeout(240)

STDIO_SERVER = Path(__file__).resolve().parent / "mcp_stdio_server.py"
PARTITION = "tenant-canary"
PIECE = 16


def canary(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(20)}"


@dataclass(frozen=True)
class Canaries:
    openai_key: str = field(default_factory=lambda: canary("sk-canaryenv"))
    anthropic_key: str = field(default_factory=lambda: canary("sk-ant-canaryfile"))
    mcp_bearer: str = field(default_factory=lambda: canary("mcpbearer"))
    mcp_env: str = field(default_factory=lambda: canary("mcpenvcred"))
    # ${VAR} references: a bearer token from the secrets file in a header, and a value of
    # credential shape under names that say nothing (registered by its shape).
    mcp_ref_bearer: str = field(default_factory=lambda: canary("mcprefbearer"))
    mcp_ref_env: str = field(default_factory=lambda: canary("mcprefnote"))
    db_password: str = field(default_factory=lambda: canary("dbpass"))
    api_token: str = field(default_factory=lambda: canary("apitoken"))

    def all(self) -> dict[str, str]:
        return dict(vars(self))


def leaks(canaries: Canaries | dict[str, str], sinks: dict[str, str]) -> list[str]:
    """Every (sink, secret) pair where a 16-character piece of the secret shows."""
    found = []
    planted = canaries if isinstance(canaries, dict) else canaries.all()
    for where, text in sinks.items():
        for name, secret in planted.items():
            pieces = {secret[i : i + PIECE] for i in range(len(secret) - PIECE + 1)}
            if any(piece in text for piece in pieces):
                found.append(f"{name} in {where}")
    return found


# --------------------------------------------------------------------------- the servers


class EchoingMcpServer(McpTestServer):
    """The test MCP server plus two tools that echo the request's Authorization header."""

    def _register(self) -> None:
        super()._register()
        self.seen_authorization: list[str] = []

        @self.app.tool
        def whoami() -> str:
            """Who the caller is (echoes its credentials)."""
            authorization = get_http_headers(include_all=True).get("authorization", "")
            self.seen_authorization.append(authorization)
            return f"you sent Authorization: {authorization}"

        @self.app.resource("whoami://me", name="me", description="Who the caller is")
        def me() -> str:
            """The caller's credentials, as a resource (read through resources.read)."""
            authorization = get_http_headers(include_all=True).get("authorization", "")
            self.seen_authorization.append(f"resource: {authorization}")
            return f"resource says you sent Authorization: {authorization}"

        @self.app.tool
        def whoami_strict() -> str:
            """Refuse the caller, quoting its credentials."""
            authorization = get_http_headers(include_all=True).get("authorization", "")
            raise ToolError(f"token not allowed here: {authorization}")


class LeakyProvider:
    """OpenAI and Anthropic endpoints that quote the caller's key in their errors."""

    def __call__(self, seen: Seen) -> Reply:
        if seen.path.endswith("/messages"):  # Anthropic: a 401 quoting the key
            key = seen.headers.get("x-api-key", "")
            return Reply.error(
                401,
                {
                    "type": "error",
                    "error": {
                        "type": "authentication_error",
                        "message": f"invalid x-api-key: {key}",
                    },
                },
            )
        key = seen.headers.get("authorization", "").removeprefix("Bearer ")
        # The key starts 10 characters before the 500-character cut of an error's detail.
        padding = "request rejected; " + "x" * (490 - len("request rejected; "))
        return Reply.error(400, {"error": {"message": f"{padding}{key} (check your request)"}})


def config(provider_url: str, mcp_url: str) -> RuntimeConfig:
    models = [
        ModelProfile(
            id="openai-wire",
            provider="openai",
            model="gpt-test",
            base_url=f"{provider_url}/v1",
            api_key_env="CANARY_OPENAI_KEY",
        ),
        ModelProfile(
            id="anthropic-wire",
            provider="anthropic",
            model="claude-test",
            base_url=provider_url,
            api_key_env="CANARY_ANTHROPIC_KEY",
            max_tokens=64,
        ),
        ModelProfile.model_validate(
            {
                "id": "scripted",
                "provider": "scripted",
                "model": "test",
                "script": {
                    "mcp_user": [
                        {
                            "tool_calls": [
                                {"id": "c1", "name": "mcp.echo.whoami", "arguments": {}},
                                {"id": "c2", "name": "mcp.echo.whoami_strict", "arguments": {}},
                                {
                                    "id": "c3",
                                    "name": "mcp.local.show_env",
                                    "arguments": {"name": "SERVICE_TOKEN"},
                                },
                                {
                                    "id": "c4",
                                    "name": "mcp.local.fail_env",
                                    "arguments": {"name": "SERVICE_TOKEN"},
                                },
                                {"id": "c5", "name": "mcp.echoref.whoami", "arguments": {}},
                                {
                                    "id": "c6",
                                    "name": "mcp.echoref.whoami_strict",
                                    "arguments": {},
                                },
                                {
                                    "id": "c7",
                                    "name": "mcp.local.fail_env",
                                    "arguments": {"name": "MCP_NOTE"},
                                },
                                {
                                    "id": "c8",
                                    "name": "mcp.echo.resources.read",
                                    "arguments": {"uri": "whoami://me"},
                                },
                            ]
                        },
                        {"chunks": ["all ", "checked"]},
                    ]
                },
            }
        ),
    ]
    agents = [
        AgentDefinition(id="openai_user", description="asks OpenAI", model="openai-wire"),
        AgentDefinition(id="anthropic_user", description="asks Anthropic", model="anthropic-wire"),
        AgentDefinition.model_validate(
            {
                "id": "mcp_user",
                "description": "uses MCP tools",
                "model": "scripted",
                "tools": ["mcp.echo.*", "mcp.echoref.*", "mcp.local.*", "mcp.down.*"],
            }
        ),
    ]
    servers = [
        McpServer(name="echo", url=mcp_url, headers_env={"Authorization": "CANARY_MCP_AUTH"}),
        # The same server through a ${VAR} header whose variable is a secrets-file entry.
        McpServer(
            name="echoref", url=mcp_url, headers={"Authorization": "Bearer ${CANARY_MCP_REF}"}
        ),
        McpServer(
            name="local",
            command=sys.executable,
            args=(str(STDIO_SERVER),),
            env={
                "SERVICE_TOKEN": "${CANARY_MCP_ENV}",
                "MCP_TEST_DIR": "${CANARY_MCP_DIR}",
                "MCP_NOTE": "note: ${CANARY_MCP_NOTE} (kept)",
            },
        ),
        McpServer(
            name="down",
            url=f"http://127.0.0.1:{free_port()}/mcp",
            headers_env={"Authorization": "CANARY_MCP_AUTH"},
            startup_timeout_seconds=5,
        ),
    ]
    return RuntimeConfig(
        agents=agents, models=models, mcp_servers=servers, default_model="scripted"
    )


# --------------------------------------------------------------------------- the harness


@pytest.fixture
def canaries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Canaries:
    planted = Canaries()
    secrets_file = tmp_path / "secrets.env"
    secrets_file.write_text(
        f"CANARY_ANTHROPIC_KEY={planted.anthropic_key}\nCANARY_MCP_REF={planted.mcp_ref_bearer}\n"
    )
    monkeypatch.setenv("OTHERONE_SECRETS_FILE", str(secrets_file))
    monkeypatch.delenv("CANARY_ANTHROPIC_KEY", raising=False)
    monkeypatch.setenv("CANARY_OPENAI_KEY", planted.openai_key)
    monkeypatch.setenv("CANARY_MCP_AUTH", f"Bearer {planted.mcp_bearer}")
    monkeypatch.setenv("CANARY_MCP_ENV", planted.mcp_env)
    monkeypatch.setenv("CANARY_MCP_DIR", str(tmp_path))
    monkeypatch.setenv("CANARY_MCP_NOTE", planted.mcp_ref_env)
    return planted


@dataclass
class Observed:
    client: Client
    store: Store
    http: httpx.AsyncClient
    spans: InMemorySpanExporter
    runs: dict[str, str] = field(default_factory=dict)
    sinks: dict[str, str] = field(default_factory=dict)
    #: Where every run's completion webhook goes.
    webhook: str | None = None


@contextmanager
def tracing() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider, exporter
    finally:
        provider.shutdown()


@asynccontextmanager
async def observed_runtime(
    temporal_env: WorkflowEnvironment,
    store_url: str,
    task_queue: str,
    runtime: RuntimeConfig,
    canaries: Canaries,
) -> AsyncIterator[Observed]:
    """A traced client, a worker with our activity spans, and the HTTP API with a token."""
    with tracing() as (provider, exporter):
        tracer = provider.get_tracer("canary")
        client = await Client.connect(
            address_of(temporal_env),
            namespace=temporal_env.client.namespace,
            data_converter=compact_data_converter,
            interceptors=[TracingInterceptor(tracer)],
        )
        store = Store.open(store_url)
        try:
            worker = build_worker(
                client,
                runtime,
                store,
                task_queue=task_queue,
                # content capture on: prompts, answers and tool results on the spans too
                interceptors=[OtheroneActivityInterceptor(tracer, runtime, capture_content=True)],
            )
            context = ApiContext(
                temporal=client,
                store=store,
                task_queue=task_queue,
                tokens=parse_tokens(f"{canaries.api_token}:{PARTITION}"),  # as `otherone serve`
                agents=list(runtime.agents.values()),
                config=runtime,
            )
            headers = {"Authorization": f"Bearer {canaries.api_token}"}
            async with (
                worker,
                ApiServer(context, log_level="debug") as api,
                httpx.AsyncClient(base_url=api.url, headers=headers, timeout=60) as http,
            ):
                yield Observed(client, store, http, exporter)
        finally:
            store.close()


async def start_run(observed: Observed, agent: str) -> str:
    body = {"entry_agent": agent, "input": f"canary run of {agent}", "webhook": observed.webhook}
    answer = await observed.http.post("/v1/runs", json=body)
    assert answer.status_code == 201, answer.text
    run_id: str = answer.json()["run_id"]
    observed.runs[agent] = run_id
    return run_id


async def finished(observed: Observed, run_id: str) -> dict[str, Any]:
    answer = await observed.http.get(f"/v1/runs/{run_id}/result", params={"wait": 120})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    observed.sinks[f"result of {run_id}"] = answer.text
    return result


# --------------------------------------------------------------------------- the sinks


async def collect_api(observed: Observed) -> None:
    http, sinks = observed.http, observed.sinks
    for run_id in observed.runs.values():
        for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/tree"):
            answer = await http.get(path)
            assert answer.status_code == 200, answer.text
            sinks[f"GET {path}"] = answer.text
        for form in ("", "?format=ag-ui"):
            status, frames = await read_stream(http, f"/v1/runs/{run_id}/events{form}")
            assert status == 200
            sinks[f"SSE {run_id}{form}"] = "\n".join(frame.data for frame in frames)
    for path in (
        "/v1/runs",
        "/v1/sessions",
        "/v1/info",
        "/v1/whoami",
        "/v1/agents",
        "/",
        "/openapi.json",
    ):
        answer = await http.get(path)
        sinks[f"GET {path}"] = answer.text + json.dumps(dict(answer.headers))


async def collect_ag_ui_run(observed: Observed) -> None:
    """An AG-UI client's own run of the MCP agent, streamed to the end."""
    unique = secrets.token_hex(6)  # the dev server is the session's: ids of this test only
    body = {
        "threadId": f"canary-thread-{unique}",
        "runId": f"canary-agui-{unique}",
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": [{"id": "m1", "role": "user", "content": "check the tools"}],
    }
    async with observed.http.stream("POST", "/v1/ag-ui/mcp_user", json=body) as answer:
        assert answer.status_code == 200
        observed.sinks["AG-UI POST /v1/ag-ui/mcp_user"] = "".join(
            [chunk async for chunk in answer.aiter_text()]
        )


async def collect_histories(observed: Observed) -> None:
    """Every execution of every run (none of them has children) and of its webhook delivery."""
    for run_id in observed.runs.values():
        for workflow_id in (run_id, delivery_workflow_id(run_id)):
            history = await observed.client.get_workflow_handle(workflow_id).fetch_history()
            observed.sinks[f"history of {workflow_id}"] = history_with_payloads(history.to_json())


async def delivered(observed: Observed) -> list[WebhookDelivered]:
    """Every run's webhook delivery, once it has ended."""
    return [
        await observed.client.get_workflow_handle(
            delivery_workflow_id(run_id), result_type=WebhookDelivered
        ).result()
        for run_id in observed.runs.values()
    ]


def collect_webhooks(observed: Observed, receiver: Receiver) -> None:
    observed.sinks["webhook POSTs"] = "\n".join(
        json.dumps(got.headers) + got.path + got.body.decode() for got in receiver.received
    )


def collect_store(observed: Observed) -> None:
    with observed.store.engine.connect() as connection:
        for table in metadata.sorted_tables:
            rows = connection.execute(select(table)).all()
            observed.sinks[f"table {table.name}"] = "\n".join(repr(tuple(row)) for row in rows)
    for run_id in observed.runs.values():
        events = observed.store.read_events(run_id, limit=10_000)
        observed.sinks[f"events of {run_id}"] = json.dumps(
            [event.model_dump(mode="json") for event in events]
        )


def collect_spans(observed: Observed) -> None:
    observed.sinks["spans"] = "\n".join(
        span_text(span) for span in observed.spans.get_finished_spans()
    )


def span_text(span: ReadableSpan) -> str:
    return json.dumps(
        {
            "name": span.name,
            "attributes": dict(span.attributes or {}),
            "status": span.status.description,
            "events": [[event.name, dict(event.attributes or {})] for event in span.events],
        },
        default=str,
    )


def failed_database_connection(store_url: str, password: str) -> str:
    """A store URL whose server refuses the connection: what the error says."""
    url = make_url(store_url)
    if url.get_backend_name() != "postgresql":
        url = make_url("postgresql+psycopg://otherone@127.0.0.1/otherone")
    refused = url.set(port=free_port(), password=password).render_as_string(hide_password=False)
    try:
        Store.open(refused)
    except (OtheroneError, OSError) as error:
        return f"{type(error).__name__}: {error}"
    raise AssertionError("a closed port accepted a database connection")


# --------------------------------------------------------------------------- the test


async def test_no_piece_of_any_secret_reaches_any_sink(
    temporal_env: WorkflowEnvironment,
    store_url: str,
    task_queue: str,
    tmp_path: Path,
    canaries: Canaries,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    if make_url(store_url).get_backend_name() == "postgresql":  # trust auth: any password does
        store_url = (
            make_url(store_url)
            .set(password=canaries.db_password)
            .render_as_string(hide_password=False)
        )
    sinks: dict[str, str] = {
        "refused database connection": failed_database_connection(store_url, canaries.db_password)
    }
    # The receiver refuses the first POST, quoting the secret it checks signatures with.
    hooks = Receiver(statuses=(500, 200))
    with serving(EchoingMcpServer()) as mcp, receiving(hooks):
        async with (
            WireServer(LeakyProvider()) as provider,
            observed_runtime(
                temporal_env, store_url, task_queue, config(provider.url, mcp.url), canaries
            ) as observed,
        ):
            webhook_secret = observed.store.webhook_secrets.get(PARTITION).secret
            hooks.answer_text = f"bad signature; we check with {webhook_secret}"
            observed.webhook = f"{hooks.url}/hooks/canary"
            runs = {
                agent: await start_run(observed, agent)
                for agent in ("openai_user", "anthropic_user", "mcp_user")
            }
            results = {agent: await finished(observed, run_id) for agent, run_id in runs.items()}
            deliveries = await delivered(observed)
            await collect_ag_ui_run(observed)
            await collect_api(observed)
            await collect_histories(observed)
            collect_webhooks(observed, hooks)
            collect_store(observed)
        collect_spans(observed)  # the worker has stopped: every span ended
        sinks.update(observed.sinks)
        # The secrets did reach the servers they were meant for (so an echo could leak them).
        assert f"Bearer {canaries.mcp_bearer}" in mcp.seen_authorization
        assert f"Bearer {canaries.mcp_ref_bearer}" in mcp.seen_authorization
        # A resource's contents go through the same redaction as tool results.
        assert f"resource: Bearer {canaries.mcp_bearer}" in mcp.seen_authorization
        assert any("resource says you sent Authorization" in text for text in sinks.values())
        sent = {
            seen.headers.get("authorization") or seen.headers.get("x-api-key")
            for seen in provider.requests
        }
        assert {f"Bearer {canaries.openai_key}", canaries.anthropic_key} <= sent

    env = cli_env(
        address_of(temporal_env),
        task_queue,
        tmp_path,
        config=None,
        OTHERONE_DATABASE_URL=store_url,
        OTHERONE_LOG_LEVEL="DEBUG",
        OTHERONE_SERVE_TOKENS=f"{canaries.api_token}:{PARTITION}",
        OTHERONE_SECRETS_FILE=str(tmp_path / "secrets.env"),
        CANARY_OPENAI_KEY=canaries.openai_key,
    )
    for command in (
        ("--help",),
        ("run", "--help"),
        ("serve", "--help"),
        ("worker", "--help"),
        ("show", runs["mcp_user"]),
        ("show", runs["openai_user"], "--json"),
    ):
        shown = await otherone(*command, env=env, limit=60)
        sinks[f"otherone {' '.join(command)}"] = shown.stdout + shown.stderr
    captured = capfd.readouterr()
    sinks["logs"] = caplog.text + "\n".join(r.exc_text or "" for r in caplog.records)
    sinks["stdout and stderr"] = captured.out + captured.err

    # Positive controls: each sink holds what the runs did, so a leak there would show.
    assert results["openai_user"]["outcome"] == "failed"
    assert "request rejected; xxx" in results["openai_user"]["failure"]["message"]
    assert results["anthropic_user"]["outcome"] == "failed"
    assert results["mcp_user"]["outcome"] == "completed", results["mcp_user"]
    tools = sinks["table otherone_entries"]
    assert "you sent Authorization: " in tools and "token not allowed here" in tools
    assert "SERVICE_TOKEN=" in tools and "cannot use SERVICE_TOKEN" in tools
    assert "cannot use MCP_NOTE=note: " in tools
    assert "debug: MCP_NOTE=note: " in sinks["stdout and stderr"]
    assert "tool_completed" in sinks[f"events of {runs['mcp_user']}"]
    assert "TOOL_CALL_RESULT" in sinks["AG-UI POST /v1/ag-ui/mcp_user"]
    assert "mcp.echo.whoami" in sinks[f"history of {runs['mcp_user']}"]
    assert "request rejected" in sinks[f"history of {runs['openai_user']}"]
    assert "chat" in sinks["spans"] or "model call" in sinks["spans"]
    for captured_content in ("gen_ai.input.messages", "gen_ai.tool.call.result"):
        assert captured_content in sinks["spans"]
    assert '"name": "execute_tool mcp.echo.whoami"' in sinks["spans"]  # an MCP tool's span
    assert "debug: SERVICE_TOKEN=" in sinks["stdout and stderr"]
    assert "usage: otherone" in sinks["otherone --help"]
    assert '"down":{"tools_hash":"","tools":[],"error":' in sinks["table otherone_snapshots"]

    # The webhooks: each run's record, signed; the refused attempt's event quotes the answer.
    assert all(delivery.delivered for delivery in deliveries)
    assert len(hooks.received) == 4  # three runs, one retried
    for got in hooks.received:
        assert verify_signature(got.body, got.headers[SIGNATURE_HEADER], webhook_secret)
    assert "request rejected; xxx" in sinks["webhook POSTs"]
    refusals = [sinks[f"events of {run_id}"] for run_id in runs.values()]
    assert sum("bad signature; we check with <redacted>" in e for e in refusals) == 1

    assert leaks(canaries, sinks) == []
    # The webhook secret: in its own table only.
    elsewhere = {where: text for where, text in sinks.items() if webhook_secrets.name not in where}
    assert leaks({"webhook_secret": webhook_secret}, elsewhere) == []
    assert webhook_secret in sinks[f"table {webhook_secrets.name}"]
    # What the echoes became.
    assert "you sent Authorization: <redacted>" in tools and "SERVICE_TOKEN=<redacted>" in tools
    assert "you sent Authorization: <redacted>" in sinks["spans"]  # a captured tool result
    assert "debug: SERVICE_TOKEN=<redacted>" in sinks["stdout and stderr"]
    assert "cannot use MCP_NOTE=note: <redacted> (kept)" in tools
