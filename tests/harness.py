"""Test harness: a real worker on a fresh task queue, a real SQLite store, scripted models."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.activities.providers.base import ModelProvider
from otherone.authorization import AgentCallAuthorizer
from otherone.client.agent_client import AgentClient
from otherone.config import RuntimeConfig
from otherone.definitions import (
    AgentDefinition,
    ModelProfile,
    RuntimeLimits,
    RuntimePolicy,
    ScriptedTurn,
)
from otherone.search_attributes import CUSTOM_SEARCH_ATTRIBUTES
from otherone.store import Store
from otherone.worker.app import AgentWorker, build_worker
from otherone.worker.connection import data_converter
from otherone.worker.devserver import THROTTLE_FIX_ARGS, dynamic_config_args, find_temporal_binary
from otherone.worker.sandbox import WorkflowSandbox


async def start_test_server() -> WorkflowEnvironment:
    """A real dev server (in memory, headless, unthrottled, our search attributes registered)."""
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(find_temporal_binary()),
        search_attributes=CUSTOM_SEARCH_ATTRIBUTES,
        data_converter=data_converter(),  # the workers' own (compact activity payloads)
        dev_server_extra_args=[*THROTTLE_FIX_ARGS, *FAST_DRAINAGE_ARGS],
        ui=False,
    )


#: A Worker Deployment version's drainage is computed every 3 minutes by default: every
#: second here, so a test sees ``draining`` turn ``drained`` (tests/test_versioning.py).
FAST_DRAINAGE_ARGS = dynamic_config_args(
    {
        "matching.wv.VersionDrainageStatusVisibilityGracePeriod": "1s",
        "matching.wv.VersionDrainageStatusRefreshInterval": "1s",
    }
)


@dataclass
class AgentEnv:
    agents: AgentClient
    store: Store
    worker: AgentWorker
    config: RuntimeConfig


def scripted_config(
    script: Mapping[str, Sequence[ScriptedTurn | Mapping[str, Any] | str]],
    *,
    agents: Sequence[AgentDefinition] | None = None,
    tools: Sequence[Any] = (),
    limits: RuntimeLimits | None = None,
    policy: RuntimePolicy | None = None,
) -> RuntimeConfig:
    """A runtime with one scripted model playing ``script`` (agent id -> turns)."""
    model = ModelProfile.model_validate(
        {"id": "scripted", "provider": "scripted", "model": "test", "script": dict(script)}
    )
    declared = agents or [
        AgentDefinition(id=agent_id, description=f"{agent_id} agent") for agent_id in script
    ]
    return RuntimeConfig(agents=declared, models=[model], tools=tools, limits=limits, policy=policy)


@asynccontextmanager
async def agent_env(
    client: Client,
    task_queue: str,
    config: RuntimeConfig,
    tmp_path: Path,
    *,
    providers: Mapping[str, ModelProvider] | None = None,
    store: Store | None = None,
    authorizer: AgentCallAuthorizer | None = None,
    max_concurrent_activities: int = 64,
    workflow_sandbox: WorkflowSandbox | None = None,
) -> AsyncIterator[AgentEnv]:
    """A running worker for ``config`` and an AgentClient that reads events from its store.

    ``workflow_sandbox`` ``None``: the suite's mode (``strict``, see tests/conftest.py)."""
    own_store = store is None
    store = store or Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    worker = build_worker(
        client,
        config,
        store,
        task_queue=task_queue,
        providers=providers,
        authorizer=authorizer,
        max_concurrent_activities=max_concurrent_activities,
        workflow_sandbox=workflow_sandbox,
    )
    try:
        async with worker:
            yield AgentEnv(
                AgentClient(client, task_queue=task_queue, store=store), store, worker, config
            )
    finally:
        if own_store:
            store.close()


async def wait_until(
    condition: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    within: float = 30.0,  # generous: CI machines are loaded; a pass returns at once
    interval: float = 0.05,
    message: str = "condition",
) -> None:
    """Poll ``condition`` until true; fail the test after ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = condition()
        if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
            value = await value
        if value:
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {within}s waiting for {message}")


def history_with_payloads(history_json: str) -> str:
    """A history's JSON plus every payload in it decoded (they are base64 in the JSON): the
    text a search for a leaked value must cover."""
    decoded: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("data"), str) and "metadata" in value:
                decoded.append(base64.b64decode(value["data"]).decode("utf-8", "replace"))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads(history_json))
    return "\n".join([history_json, *decoded])
