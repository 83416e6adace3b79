"""AG-UI's own endpoint: ``POST /v1/ag-ui/{agent}`` takes the ``RunAgentInput`` that AG-UI
clients (``HttpAgent`` of ``@ag-ui/client``, CopilotKit) send, starts a root run of the agent and
answers with its tree's events as AG-UI Server-Sent Events (`otherone.api.agui`).

How the input maps: ``threadId`` is the run's session (the conversation: the server keeps it, so
only the thread's new user messages are read, the ones after its last other message);
``runId`` makes the start idempotent (the same thread and run id join the run already started:
a client's retry does not start a second one). ``tools`` (tools the front end runs), ``state``,
``context``, ``forwardedProps`` and ``resume`` have no counterpart here and are not read: the
agent's tools are the server's, approvals are decided through ``/v1/runs/{id}/approvals``.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

from ag_ui.core import RunAgentInput, UserMessage
from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from pydantic import ValidationError
from temporalio.client import WorkflowExecutionStatus

from otherone.api.dependencies import Agents, Partition, api_runtime
from otherone.api.problems import ApiError
from otherone.api.streams import StreamFormat, TreeStream
from otherone.client.agent_client import AgentClient
from otherone.parts import FilePart, ImagePart, Part, TextPart
from otherone.runs import AgentRunRequest, InputMessage, RuntimeContext

router = APIRouter()

#: What the stream's response carries besides its media type (no caching, no proxy buffering).
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def tree_stream(
    request: Request,
    agents: AgentClient,
    root: str,
    partition: str | None,
    *,
    after: int = 0,
    format: StreamFormat = "otherone",
    thread_id: str | None = None,
) -> TreeStream:
    """The event stream of the tree rooted at ``root``, for one client."""
    runtime = api_runtime(request)

    async def is_running() -> bool:
        current = await agents.describe_run(root)
        return current.status == WorkflowExecutionStatus.RUNNING

    return TreeStream(
        readers=runtime.readers,
        root_run_id=root,
        partition_key=partition,
        is_running=is_running,
        after=after,
        format=format,
        heartbeat_seconds=runtime.context.heartbeat_seconds,
        closing=runtime.closing,
        thread_id=thread_id,
    )


@router.post(
    "/ag-ui/{agent_id}",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "AG-UI events"}},
    tags=["events"],
)
async def run_ag_ui(
    request: Request,
    agent_id: Annotated[str, PathParam(min_length=1, max_length=128)],
    body: dict[str, Any],
    agents: Agents,
    partition: Partition,
) -> StreamingResponse:
    """Start a run of ``agent_id`` from an AG-UI ``RunAgentInput``; its events as AG-UI SSE."""
    given = _agent_input(body)
    run = _run_request(agent_id, given, partition)
    handle = await agents.start(run)
    stream = tree_stream(
        request, agents, handle.run_id, partition, format="ag-ui", thread_id=given.thread_id
    )
    return StreamingResponse(
        stream.frames(), media_type="text/event-stream", headers=STREAM_HEADERS
    )


def _agent_input(body: dict[str, Any]) -> RunAgentInput:
    try:
        return RunAgentInput.model_validate(body)
    except ValidationError as error:
        problem = error.errors()[0]
        field = ".".join(str(part) for part in problem["loc"]) or "body"
        raise ApiError(422, "invalid_request", f"{field}: {problem['msg']}", field=field) from None


def _run_request(agent_id: str, given: RunAgentInput, partition: str | None) -> AgentRunRequest:
    fields: dict[str, Any] = {
        "entry_agent": agent_id,
        "input": _new_user_messages(given),
        "session": {"session_id": given.thread_id},
        "idempotency_key": _idempotency_key(agent_id, given),
    }
    if partition is not None:
        fields["runtime_context"] = RuntimeContext(partition_key=partition)
    try:
        return AgentRunRequest.model_validate(fields)
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        field = {"session.session_id": "threadId", "entry_agent": "agent_id"}.get(where, where)
        raise ApiError(422, "invalid_request", f"{field}: {problem['msg']}", field=field) from None


def _new_user_messages(given: RunAgentInput) -> tuple[InputMessage, ...]:
    """The thread's user messages after its last other message: what this run answers."""
    new: list[UserMessage] = []
    for message in reversed(given.messages):
        if not isinstance(message, UserMessage):
            break
        new.insert(0, message)
    if not new:
        raise ApiError(
            422,
            "invalid_request",
            "messages: the thread's last message must be the user's (the run answers it)",
            field="messages",
        )
    first = len(given.messages) - len(new)
    return tuple(
        InputMessage(role="user", content=_content(message, first + index))
        for index, message in enumerate(new)
    )


def _content(message: UserMessage, index: int) -> str | tuple[Part, ...]:
    """Text, or our parts: AG-UI's ``text``, ``image`` and ``document`` parts (a ``data``
    source: base64 and its ``mime_type``; or a ``url`` one); the client stores their bytes."""
    if isinstance(message.content, str):
        return message.content
    return tuple(
        _part(part, f"messages.{index}.content.{number}")
        for number, part in enumerate(message.content)
    )


def _part(part: Any, field: str) -> Part:
    kind = getattr(part, "type", None)
    if kind == "text":
        return TextPart(text=str(part.text))
    source: Any = getattr(part, "source", None)
    source_kind = getattr(source, "type", None)
    if kind not in ("image", "document") or source_kind not in ("data", "url"):
        raise ApiError(
            422,
            "invalid_request",
            f"{field}: only text, image and document parts with a data or url source are taken",
            field=field,
        )
    given = {"data" if source_kind == "data" else "url": source.value}
    try:
        if kind == "image":
            return ImagePart(media_type=source.mime_type, **given)
        return FilePart(media_type=source.mime_type, **given)
    except ValidationError as error:
        message = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise ApiError(422, "invalid_request", f"{field}: {message}", field=field) from None


def _idempotency_key(agent_id: str, given: RunAgentInput) -> str:
    """One run per agent, thread and AG-UI run id (a key names them, whatever their length);
    the run's id reads like the CLI's: ``<agent>-<16 hex>-<16 hex>``."""
    digest = hashlib.sha256(f"{given.thread_id}\0{given.run_id}".encode()).hexdigest()
    return f"{agent_id[:64]}-{digest[:16]}"
