"""The HTTP API (`otherone.api`) on a free port over a real worker, store and dev server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from temporalio.client import Client

from otherone.activities.providers.base import ModelProvider
from otherone.api import ApiContext, ApiServer, ApiToken
from otherone.config import RuntimeConfig
from otherone.store import Store
from tests.harness import AgentEnv, agent_env


@dataclass
class ApiEnv:
    env: AgentEnv
    server: ApiServer
    http: httpx.AsyncClient

    @property
    def url(self) -> str:
        return self.server.url


@asynccontextmanager
async def api_env(
    client: Client,
    task_queue: str,
    config: RuntimeConfig,
    tmp_path: Path,
    *,
    tokens: Mapping[str, str | ApiToken] | None = None,
    heartbeat_seconds: float = 15.0,
    store: Store | None = None,
    ui_url: str | None = "http://localhost:8233",
    cors_origins: tuple[str, ...] = (),
    providers: Mapping[str, ModelProvider] | None = None,
) -> AsyncIterator[ApiEnv]:
    async with agent_env(
        client, task_queue, config, tmp_path, store=store, providers=providers
    ) as env:
        context = ApiContext(
            temporal=client,
            store=env.store,
            task_queue=task_queue,
            tokens=dict(tokens or {}),
            agents=list(config.agents.values()),
            config=config,  # as `otherone serve` passes the workers' configuration
            ui_url=ui_url,
            heartbeat_seconds=heartbeat_seconds,
            cors_origins=cors_origins,
        )
        async with (
            ApiServer(context, log_level="warning") as server,
            httpx.AsyncClient(base_url=server.url, timeout=30) as http,
        ):
            yield ApiEnv(env, server, http)
