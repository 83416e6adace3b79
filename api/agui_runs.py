"""AG-UI's own endpoint: ``POST /v1/ag-ui/{agent}`` takes the ``RunAgentInput`` that AG-UI
clients (``HttpAgent`` of ``@ag-ui/client``, CopilotKit) send, starts a root run of the agent and
answers with its tree's events as AG-UI Server-Sent Events (`otherone.api.agui`).

How the input maps: ``threadId`` is the run's session (the conversation: the server keeps it, so
only the thread's new user messages are read, the ones after its last other message);
``runId`` makes the start idempotent (the same thread and run id join the run already started:
a client's retry does not start a second one). ``context`` reaches the agent as a system message
before the new user messages. A tree that comes to wait for a person ends the AG-UI run with an
interrupt, and ``resume`` decides it (`otherone.api.agui_interrupts`); ``forwardedProps``
``{"otherone": {"interrupts": false}}`` keeps the stream open instead (decisions then go
through ``/v1/runs/{id}/approvals``). ``tools`` (tools the front end runs) are offered to the
model (`otherone.client_tools`): a call to one ends the AG-UI run naming it pending, and the
client's next request, ending with the tool's result, continues the run. A non-empty ``state``
is shared (`otherone.shared_state`): the model reads it and may replace it with
``ui.set_state``, which the stream sends as ``STATE_SNAPSHOT``.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    RunAgentInput,
    RunStartedEvent,
    ToolMessage,
    UserMessage,
)
from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from pydantic import ValidationError
from temporalio.client import WorkflowExecutionStatus

from otherone.api.agui_interrupts import WaitingCalls, answer_client_tools, decide_resumed
from otherone.api.dependencies import Agents, Partition, api_runtime
from otherone.api.problems import ApiError
from otherone.api.streams import StreamFormat, TreeStream, sse_frame
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
    waiting: WaitingCalls | None = None,
    sent_through: int = 0,
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
        waiting=waiting,
        sent_through=sent_through,
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
    """Start a run of ``agent_id`` from an AG-UI ``RunAgentInput`` (or, with ``resume``,
    decide the interrupts of a waiting one); its events as AG-UI SSE."""
    given = _agent_input(body)
    store = api_runtime(request).context.store
    results = _client_results(given)
    if given.resume or results:
        if given.resume:
            resumed = await decide_resumed(agents, store, given.resume)
        else:
            resumed = await answer_client_tools(agents, store, given.thread_id, results)
        stream = tree_stream(
            request,
            agents,
            resumed.root_run_id,
            partition,
            format="ag-ui",
            thread_id=given.thread_id,
            waiting=WaitingCalls(decided=resumed.decided),
            sent_through=resumed.after,
        )
        # A new AG-UI run of the same tree: it opens as every AG-UI run does.
        opening = RunStartedEvent(thread_id=given.thread_id, run_id=resumed.root_run_id)
        return _streamed(_opened(opening, stream.frames()))
    run = _run_request(agent_id, given, partition)
    handle = await agents.start(run)
    stream = tree_stream(
        request,
        agents,
        handle.run_id,
        partition,
        format="ag-ui",
        thread_id=given.thread_id,
        waiting=WaitingCalls() if _interrupts_wanted(given) else None,
    )
    return _streamed(stream.frames())


def _streamed(frames: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(frames, media_type="text/event-stream", headers=STREAM_HEADERS)


async def _opened(opening: BaseEvent, frames: AsyncIterator[str]) -> AsyncIterator[str]:
    yield sse_frame(opening.model_dump_json(by_alias=True, exclude_none=True))
    async for frame in frames:
        yield frame


def _interrupts_wanted(given: RunAgentInput) -> bool:
    """Interrupts unless the client opts out (``forwardedProps.otherone.interrupts: false``):
    a front end without interrupt support keeps the stream open while a person decides."""
    props = given.forwarded_props
    ours = props.get("otherone") if isinstance(props, dict) else None
    return not (isinstance(ours, dict) and ours.get("interrupts") is False)


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
        "input": (*_context_messages(given), *_new_user_messages(given)),
        "session": {"session_id": given.thread_id},
        "idempotency_key": _idempotency_key(agent_id, given),
    }
    if isinstance(given.state, dict) and given.state:
        fields["shared_state"] = given.state
    if given.tools:
        fields["client_tools"] = [
            {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
            if tool.parameters is not None
            else {"name": tool.name, "description": tool.description}
            for tool in given.tools
        ]
    if partition is not None:
        fields["runtime_context"] = RuntimeContext(partition_key=partition)
    try:
        return AgentRunRequest.model_validate(fields)
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        field = {"session.session_id": "threadId", "entry_agent": "agent_id"}.get(where, where)
        field = field.replace("client_tools", "tools", 1)
        raise ApiError(422, "invalid_request", f"{field}: {problem['msg']}", field=field) from None


def _client_results(given: RunAgentInput) -> list[tuple[str, str]]:
    """The results of the client's own tools the thread ends with (its tool messages after
    the last assistant message, as a front end sends them after running its tools), as (tool
    call id, content); none when the thread ends with a user message."""
    results: list[tuple[str, str]] = []
    for message in reversed(given.messages):
        if isinstance(message, ToolMessage):
            content = message.content if isinstance(message.content, str) else ""
            text = f"error: {message.error}" if message.error else content
            results.insert(0, (message.tool_call_id, text))
        elif isinstance(message, AssistantMessage) or results:
            break
        else:
            return []  # a user's message last: a new turn
    return results


def _context_messages(given: RunAgentInput) -> tuple[InputMessage, ...]:
    """AG-UI's ``context`` (what the front end knows: the page, the user's selection) as a
    system message before the user's, so the model reads it with this turn."""
    if not given.context:
        return ()
    lines = [f"- {item.description}: {item.value}" for item in given.context]
    text = "Context from the application:\n" + "\n".join(lines)
    return (InputMessage(role="system", content=text),)


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
