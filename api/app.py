"""The HTTP API of `otherone serve` (FastAPI): runs, results, trees, messages, cancellation,
sessions and live event streams, for any front end; and the page at ``/``.

Every endpoint acts through `otherone.client.AgentClient`, scoped to the caller's partition when
tokens are configured, so the API has exactly the client's semantics: idempotent starts with
conflict detection, a run of another partition is "not found", messages are signals.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Header, Query, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from temporalio.client import WorkflowExecutionDescription

from otherone.api import (
    agui_runs,
    approvals,
    forks,
    schedules,
    traces,
    uploads,
    usage,
    webhook_secrets,
    workers,
)
from otherone.api.agui_runs import STREAM_HEADERS, tree_stream
from otherone.api.body_limit import BodyLimit
from otherone.api.dependencies import (
    Agents,
    ApiContext,
    ApiRuntime,
    ApiToken,
    Caller,
    Partition,
    RunId,
    api_runtime,
)
from otherone.api.notify import notification_source
from otherone.api.problems import (
    PROBLEM_RESPONSES,
    ApiError,
    Problem,
    install_problem_handlers,
)
from otherone.api.request_guard import RequestGuard
from otherone.api.security_headers import SecurityHeaders
from otherone.api.streams import StreamFormat
from otherone.client.agent_client import AgentClient
from otherone.client.store_answers import answered
from otherone.errors import RunNotFoundError
from otherone.part_storage import path_part_field
from otherone.parts import QueuedMessage
from otherone.runs import (
    DEFAULT_PARTITION,
    PARTITION_PATTERN,
    AgentRunRequest,
    AgentRunResult,
    InputMessage,
    RunRecord,
    RuntimeContext,
)
from otherone.search_attributes import SESSION_ID
from otherone.store.events import MAX_EVENT_SEQUENCE as MAX_SEQUENCE

__all__ = ["ApiContext", "ApiToken", "close_streams", "create_app", "openapi_schema"]

STATIC = Path(__file__).resolve().parent / "static"
MAX_RESULT_WAIT_SECONDS = 300.0


# --------------------------------------------------------------------------- answers


class StartedRun(BaseModel):
    run_id: str
    events_url: str
    result_url: str
    ui_url: str | None = Field(
        None,
        description="The run in the Temporal Web UI; null unless the operator shows the Web UI "
        "(OTHERONE_SERVE_SHOW_UI_URL).",
    )


class PendingResult(BaseModel):
    run_id: str
    status: Literal["running"] = "running"


class Messages(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is a mistake, not ignored

    messages: list[QueuedMessage] = Field(
        min_length=1,
        description="User messages, taken at the run's next safe point: text, or a list of "
        "parts (text, image, file; images and files as base64 `data` or an `url`).",
    )


def _refuse_path_parts(messages: Sequence[InputMessage | QueuedMessage], field: str) -> None:
    """A part naming a ``path`` is for clients that read their own files: never the server's."""
    where = path_part_field(messages, field)
    if where is not None:
        raise ApiError(
            422,
            "invalid_request",
            f"{where}: a path is not read by the server: send the bytes as base64 `data`",
            field=where,
        )


class Accepted(BaseModel):
    run_id: str
    accepted: bool = True


class Session(BaseModel):
    partition_key: str
    session_id: str
    internal: bool
    created_at: datetime
    updated_at: datetime
    lease_run_id: str | None = Field(None, description="The run holding the session's lease.")
    lease_until: datetime | None = Field(
        None, description="When that lease ends unless its run renews it (None: not held)."
    )


class Agent(BaseModel):
    id: str
    description: str
    callable_agents: list[str] = Field(default_factory=list)


class ServerInfo(BaseModel):
    auth_required: bool
    partition_key: str | None = Field(
        None, description="The caller's partition (token's; `whoami` only)."
    )
    identity: str | None = Field(
        None, description="Who the caller's approval decisions are made as (`whoami` only)."
    )
    namespace: str | None = Field(
        None,
        description="The Temporal namespace, to build Web UI links; null unless `ui_url` is given.",
    )
    ui_url: str | None = Field(
        None,
        description="Base URL of the Temporal Web UI; null unless the operator shows it "
        "(OTHERONE_SERVE_SHOW_UI_URL: it has no login and shows every partition).",
    )
    version: str


def _ui_link(context: ApiContext, run_id: str) -> str | None:
    if context.ui_url is None:
        return None
    from urllib.parse import quote

    namespace = quote(context.namespace, safe="")
    return f"{context.ui_url}/namespaces/{namespace}/workflows/{quote(run_id, safe='')}"


# --------------------------------------------------------------------------- endpoints

router = APIRouter(prefix="/v1", responses=PROBLEM_RESPONSES)
#: Endpoints that need no token and name no run: none of the problem answers applies.
public = APIRouter(prefix="/v1")


@router.post(
    "/runs",
    status_code=201,
    response_model=StartedRun,
    tags=["runs"],
    responses={
        409: {
            "model": Problem,
            "description": "The Idempotency-Key was used with another request "
            "(idempotency_conflict), or another live run writes to the session (session_busy)",
        }
    },
)
async def start_run(
    request: Request,
    body: AgentRunRequest,
    agents: Agents,
    partition: Partition,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=256,
            description="The root idempotency key: the same key starts the run once; the same "
            "key with a different body is refused (409 idempotency_conflict).",
        ),
    ] = None,
) -> StartedRun:
    """Start a root run (or join the one started with the same Idempotency-Key)."""
    update: dict[str, Any] = {}
    if idempotency_key is not None and not idempotency_key.isascii():
        # HTTP header values arrive as Latin-1: a UTF-8 key would become another key.
        raise ApiError(
            422,
            "invalid_request",
            "Idempotency-Key: use ASCII in the header (or the body's idempotency_key for any text)",
            field="Idempotency-Key",
        )
    if idempotency_key is not None:
        if body.idempotency_key not in (None, idempotency_key):
            raise ApiError(
                422,
                "invalid_request",
                "idempotency_key: differs from the Idempotency-Key header",
                field="idempotency_key",
            )
        update["idempotency_key"] = idempotency_key
    if partition is not None and "runtime_context" not in body.model_fields_set:
        update["runtime_context"] = RuntimeContext(partition_key=partition)
    _refuse_path_parts(() if isinstance(body.input, str) else body.input, "input")
    handle = await agents.start(body.model_copy(update=update))
    return StartedRun(
        run_id=handle.run_id,
        events_url=str(request.url_for("run_events", run_id=handle.run_id)),
        result_url=str(request.url_for("run_result", run_id=handle.run_id)),
        ui_url=_ui_link(api_runtime(request).context, handle.run_id),
    )


@router.get(
    "/runs/{run_id:path}/result",
    name="run_result",
    response_model=AgentRunResult,
    responses={202: {"model": PendingResult, "description": "Still running after `wait`"}},
    tags=["runs"],
)
async def run_result(
    run_id: RunId,
    agents: Agents,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_RESULT_WAIT_SECONDS,
            allow_inf_nan=False,  # `nan` is "a finite number", not "at most 300"
            description="Seconds to wait for the end.",
        ),
    ] = 30.0,
) -> Any:
    """The run's result; waits up to ``wait`` seconds, then answers 202 (ask again)."""
    await agents.check_visible(run_id)  # 404 before waiting (a forgotten run: its record)
    try:
        return await asyncio.wait_for(agents.result(run_id), timeout=wait or 0.001)
    except TimeoutError:
        return JSONResponse(
            PendingResult(run_id=run_id).model_dump(), status_code=202, headers={"Retry-After": "1"}
        )


@router.get("/runs/{run_id:path}/tree", response_model=list[RunRecord], tags=["runs"])
async def run_tree(run_id: RunId, agents: Agents) -> list[RunRecord]:
    """Every run of the run's tree (root first), live records for the running ones."""
    try:
        description = await agents.describe_run(run_id)
    except RunNotFoundError:  # Temporal forgot it (retention): the store's record names its root
        return await agents.list_run_tree((await agents.get_run(run_id)).root_run_id)
    return await agents.list_run_tree(description.root_id or run_id)


@router.post(
    "/runs/{run_id:path}/messages",
    status_code=202,
    response_model=Accepted,
    responses={409: {"description": "The run has ended (run_not_active)"}},
    tags=["runs"],
)
async def send_messages(run_id: RunId, body: Messages, agents: Agents) -> Accepted:
    """Send user messages to a running run (a Temporal signal). A message is text, or parts
    (text, and images and files as base64 ``data`` or an ``url``)."""
    _refuse_path_parts(body.messages, "messages")
    await agents.send_message(run_id, body.messages)
    return Accepted(run_id=run_id)


@router.post(
    "/runs/{run_id:path}/cancel",
    status_code=202,
    response_model=Accepted,
    responses={409: {"description": "The run has ended (run_not_active)"}},
    tags=["runs"],
)
async def cancel_run(run_id: RunId, agents: Agents) -> Accepted:
    """Cancel the run and its descendants; it ends `cancelled`."""
    await agents.cancel(run_id)
    return Accepted(run_id=run_id)


@router.get(
    "/runs/{run_id:path}/events",
    name="run_events",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"},
        204: {"description": "Resumed after the end of an ended tree: nothing more"},
    },
    tags=["events"],
)
async def run_events(
    request: Request,
    run_id: RunId,
    agents: Agents,
    partition: Partition,
    format: Annotated[
        Literal["otherone", "ag-ui"],
        Query(description="`otherone`: our envelopes; `ag-ui`: AG-UI protocol events."),
    ] = "otherone",
    after: Annotated[
        int, Query(ge=0, le=MAX_SEQUENCE, description="Start after this sequence.")
    ] = 0,
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", description="Resume after this sequence (wins over after)."),
    ] = None,
) -> Response:
    """The whole tree's events (any run of it names the tree) as Server-Sent Events."""
    if last_event_id is not None and last_event_id.strip():
        text = last_event_id.strip()
        # (isdigit alone would pass '²' and numbers no database column holds)
        if not (text.isascii() and text.isdigit()) or int(text) > MAX_SEQUENCE:
            raise ApiError(
                422,
                "invalid_request",
                f"Last-Event-ID: must be an event sequence (an integer 0-{MAX_SEQUENCE})",
                field="Last-Event-ID",
            )
        after = int(text)
    description = await agents.describe_run(run_id)
    root = description.root_id or run_id
    thread = await _thread_of(agents, description, root) if format == "ag-ui" else None
    stream = tree_stream(
        request, agents, root, partition, after=after, format=_format(format), thread_id=thread
    )
    if after and not await stream.is_running() and not await stream.pending():
        return Response(status_code=204)  # EventSource stops reconnecting on 204
    return StreamingResponse(
        stream.frames(), media_type="text/event-stream", headers=STREAM_HEADERS
    )


# The approvals' routes (`otherone.api.approvals`), here: before the catch-all below.
router.include_router(approvals.router)
router.include_router(workers.router)
router.include_router(usage.router)
router.include_router(agui_runs.router)
router.include_router(schedules.router)
router.include_router(webhook_secrets.router)
router.include_router(forks.router)
router.include_router(uploads.router)
router.include_router(traces.router)


# Registered after the routes with a suffix: ``{run_id:path}`` would swallow ``x/result``.
@router.get("/runs/{run_id:path}", response_model=RunRecord, tags=["runs"])
async def get_run(run_id: RunId, agents: Agents) -> RunRecord:
    """The run's record: live (status, iteration, usage) while it runs, else the final one."""
    return await agents.get_run(run_id)


async def _thread_of(
    agents: AgentClient, description: WorkflowExecutionDescription, root: str
) -> str | None:
    """AG-UI's thread of a tree: its root's session (the conversation its runs continue)."""
    if description.id != root:
        description = await agents.describe_run(root)
    return description.typed_search_attributes.get(SESSION_ID)


def _format(value: str) -> StreamFormat:
    return "ag-ui" if value == "ag-ui" else "otherone"


#: Sessions a `GET /v1/sessions` page lists by default, and at most.
SESSIONS_PAGE = 1000
MAX_SESSIONS_PAGE = 10_000


@router.get("/sessions", response_model=list[Session], tags=["sessions"])
async def list_sessions(
    request: Request,
    partition: Partition,
    partition_key: Annotated[
        str | None,
        Query(
            alias="partition",
            pattern=PARTITION_PATTERN,
            description=f"Without a token: the partition to list (default `{DEFAULT_PARTITION}`).",
        ),
    ] = None,
    internal: Annotated[bool, Query(description="Also child runs' internal sessions.")] = False,
    limit: Annotated[
        int, Query(ge=1, le=MAX_SESSIONS_PAGE, description="At most this many sessions.")
    ] = SESSIONS_PAGE,
    after: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=256,
            description="The next page: those after this session id (the last one listed).",
        ),
    ] = None,
) -> list[Session]:
    """The sessions (conversations) of the caller's partition, oldest first, a page at a time
    (a full page: ask again with ``after`` = its last session id)."""
    if partition is not None and partition_key not in (None, partition):
        raise ApiError(
            422,
            "invalid_request",
            f"partition: this token is bound to partition '{partition}'",
            field="partition",
        )
    chosen = partition or partition_key or DEFAULT_PARTITION
    store = api_runtime(request).context.store
    infos = await answered(
        store.session_infos, chosen, include_internal=internal, limit=limit, after=after
    )
    now = datetime.now(tz=infos[0].created_at.tzinfo) if infos else None
    return [
        Session(
            partition_key=info.partition_key,
            session_id=info.session_id,
            internal=info.internal,
            created_at=info.created_at,
            updated_at=info.updated_at,
            lease_run_id=holder,
            lease_until=info.lease_until if holder is not None else None,
        )
        for info in infos
        for holder in [info.holder(now) if now is not None else None]
    ]


@router.get("/agents", response_model=list[Agent], tags=["agents"])
async def list_agents(request: Request, partition: Partition) -> list[Agent]:
    """The agents of the server's configuration (what the page offers)."""
    return [
        Agent(
            id=agent.id,
            description=agent.description,
            callable_agents=list(agent.callable_agents.names),
        )
        for agent in api_runtime(request).context.agents
    ]


#: ``security: []``: the one operation that needs no token, said so in the OpenAPI document.
NO_TOKEN: dict[str, Any] = {"security": []}


@public.get("/info", response_model=ServerInfo, tags=["server"], openapi_extra=NO_TOKEN)
async def server_info(request: Request) -> ServerInfo:
    """What a front end needs before it has a token: whether it needs one, the version, and the
    Web UI's address when the operator shows it. No authentication, so nothing about tenants
    (partitions, agents, runs) or the server's configuration."""
    context = api_runtime(request).context
    shown = context.ui_url is not None  # the namespace only serves to build Web UI links
    return ServerInfo(
        auth_required=bool(context.tokens),
        namespace=context.namespace if shown else None,
        ui_url=context.ui_url,
        version=_version(),
    )


@router.get("/whoami", response_model=ServerInfo, tags=["server"])
async def whoami(request: Request, caller: Caller) -> ServerInfo:
    """`info` plus the caller's partition and decider identity: a way to check a token."""
    info = await server_info(request)
    identity = caller.identity or api_runtime(request).context.temporal.identity
    return info.model_copy(update={"partition_key": caller.partition, "identity": identity})


def _version() -> str:
    try:
        return version("otherone-temporal")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


# --------------------------------------------------------------------------- the app


def create_app(context: ApiContext | None = None) -> FastAPI:
    """The ASGI app; ``context`` may be None only to read the OpenAPI schema."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if context is None:
            raise RuntimeError("create_app() without a context cannot serve")
        runtime = ApiRuntime(context)
        app.state.otherone = runtime
        source = asyncio.create_task(
            notification_source(context.store, runtime.notifier).run(), name="event-notifications"
        )
        try:
            yield
        finally:
            runtime.closing.set()
            source.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await source

    app = FastAPI(
        title="Otherone API",
        version=_version(),
        description="Start, follow, steer and inspect Otherone agent runs. Errors are problem "
        "details (application/problem+json) with a stable `code`.",
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: the schema is at /openapi.json
        redoc_url=None,
        lifespan=lifespan,
    )
    install_problem_handlers(app)
    app.include_router(router)
    app.include_router(public)
    app.add_middleware(BodyLimit)
    app.add_middleware(
        RequestGuard,
        authenticated=context is None or bool(context.tokens),
        cors_origins=() if context is None else tuple(context.cors_origins),
    )
    if context is not None and context.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(context.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
        )
    # Added last, so outermost: the guards' refusals and CORS answers get the headers too.
    app.add_middleware(SecurityHeaders)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        # Never framed by another site (clickjacking an approval): `SecurityHeaders` says so.
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/healthz", include_in_schema=False)
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    app.mount("/assets", StaticFiles(directory=STATIC), name="assets")
    return app


def close_streams(app: FastAPI) -> None:
    """End every open event stream (graceful shutdown: clients resume with Last-Event-ID)."""
    runtime: ApiRuntime | None = getattr(app.state, "otherone", None)
    if runtime is not None:
        runtime.closing.set()


def openapi_schema() -> dict[str, Any]:
    """The API's OpenAPI document (checked in as docs/openapi.json)."""
    return create_app().openapi()
