"""Who calls the HTTP API and what it acts through: bearer tokens bound to one partition (and
the identity approval decisions are made as), the server's context, and the FastAPI
dependencies every endpoint takes (the caller, their partition, an `AgentClient` scoped to it,
a run id)."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from temporalio.client import Client

from otherone.api.notify import EventNotifier
from otherone.api.problems import ApiError
from otherone.api.streams import TreeReaders
from otherone.client.agent_client import DEFAULT_TASK_QUEUE, AgentClient
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition
from otherone.store import Store

RUN_ID_PATTERN = r"^[A-Za-z0-9_./:-]{1,1000}$"


@dataclass(frozen=True)
class ApiToken:
    """What a bearer token grants: one partition, and the identity its approval decisions are
    made as (what a request's ``approvers`` name; default ``api:<partition>``)."""

    partition: str
    identity: str | None = None

    @property
    def decider(self) -> str:
        return self.identity or f"api:{self.partition}"


@dataclass
class ApiContext:
    """What the API serves: a Temporal client, the store its workers write, the agents."""

    temporal: Client
    store: Store
    task_queue: str = DEFAULT_TASK_QUEUE
    namespace: str = "default"
    #: bearer token -> its partition (a plain string: identity ``api:<partition>``) or
    #: `ApiToken`; empty: no authentication (bind to loopback only).
    tokens: Mapping[str, str | ApiToken] = field(default_factory=dict)
    agents: Sequence[AgentDefinition] = ()
    #: The workers' configuration, when known: requests it cannot serve (an unknown agent,
    #: limits that loosen its own) are refused at the start with 422, as the CLI refuses them,
    #: instead of starting a run that fails at once.
    config: RuntimeConfig | None = None
    ui_url: str | None = None
    heartbeat_seconds: float = 15.0
    #: Browser origins of front ends on other sites (CORS); the page at / needs none.
    cors_origins: Sequence[str] = ()


@dataclass
class ApiRuntime:
    """The serving app's state: its context, the event notifier, the shared tree readers."""

    context: ApiContext
    notifier: EventNotifier = field(default_factory=EventNotifier)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    readers: TreeReaders = field(init=False)

    def __post_init__(self) -> None:
        self.readers = TreeReaders(self.context.store, self.notifier)


_bearer = HTTPBearer(
    auto_error=False, description="A token of OTHERONE_SERVE_TOKENS (bound to one partition)."
)


def api_runtime(request: Request) -> ApiRuntime:
    runtime: ApiRuntime = request.app.state.otherone
    return runtime


@dataclass(frozen=True)
class ApiCaller:
    """Who calls: their partition and decider identity (both None on a server without tokens:
    the operator's view, deciding as the server's Temporal identity)."""

    partition: str | None = None
    identity: str | None = None


def _caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiCaller:
    tokens = api_runtime(request).context.tokens
    if not tokens:
        return ApiCaller()
    if credentials is None:
        raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer <token>)")
    given = credentials.credentials.encode()
    found: str | ApiToken | None = None
    for token, grant in tokens.items():  # compare with every token: no timing hint
        if hmac.compare_digest(token.encode(), given):
            found = grant
    if found is None:
        raise ApiError(401, "unauthorized", "unknown bearer token")
    grant = ApiToken(found) if isinstance(found, str) else found
    return ApiCaller(grant.partition, grant.decider)


Caller = Annotated[ApiCaller, Depends(_caller)]


def _partition(caller: Caller) -> str | None:
    """The caller's partition (None: unauthenticated server, the operator's view)."""
    return caller.partition


Partition = Annotated[str | None, Depends(_partition)]
RunId = Annotated[str, PathParam(pattern=RUN_ID_PATTERN, description="A run id (may hold '/').")]


def _agents(request: Request, caller: Caller) -> AgentClient:
    context = api_runtime(request).context
    return AgentClient(
        context.temporal,
        task_queue=context.task_queue,
        store=context.store,
        partition_key=caller.partition,
        identity=caller.identity,
        config=context.config,
    )


Agents = Annotated[AgentClient, Depends(_agents)]
