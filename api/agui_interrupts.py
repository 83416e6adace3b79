"""Approvals and `human.ask` questions as AG-UI interrupts (the protocol's interrupt/resume).

A run of ``POST /v1/ag-ui/{agent}`` whose tree comes to wait for a person ends its AG-UI run
with ``RUN_FINISHED`` of outcome ``interrupt``, one `Interrupt` per waiting tool call (the
Temporal run goes on waiting, durably). The client answers with its next ``RunAgentInput``:
``resume`` holds one `ResumeEntry` per interrupt it decides, and its answer streams what the
tree does next. So a CopilotKit front end approves without our REST endpoints.

What waits is read from the stream's own events (``approval_requested``, then
``approval_decided`` or the run's end), not from Temporal's visibility, which lags: a turn's
requests are stored in one transaction, so a stream that has read all there is has seen them
all.

An interrupt's id holds where the stream stopped and the call: ``<sequence>/<run id>/<call
id>`` (the ids percent-encoded), so a resume needs no state on the server (any API server
answers it) and continues exactly after the events the interrupted run had sent.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    ResumeEntry,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
)

from otherone.api.agui import tool_call_events
from otherone.api.problems import ApiError
from otherone.client.agent_client import AgentClient
from otherone.client.store_answers import answered
from otherone.contracts import ApprovalRequest, EventRecord
from otherone.errors import (
    ApprovalConflictError,
    ApprovalNotAllowedError,
    ApprovalNotFoundError,
    RunNotActiveError,
)
from otherone.partitions import DEFAULT_PARTITION
from otherone.store import Store

__all__ = ["Resumed", "WaitingCalls", "decide_resumed", "interrupted"]

#: `Interrupt.reason` per kind of wait.
REASONS = {"approval": "tool_approval", "question": "input_required"}
#: What a client's `ResumeEntry.payload` looks like, per kind (`Interrupt.response_schema`).
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reason": {"type": "string", "description": "Why not (the model reads it)."},
        "arguments": {"type": "object", "description": "Arguments instead of the model's."},
    },
    "required": ["approved"],
}
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
_RUN_ENDS = frozenset({"run_completed", "run_failed", "run_cancelled"})


@dataclass
class WaitingCalls:
    """The tool calls of a tree that wait for a person, as its events tell (in order)."""

    #: Calls decided by the request being answered: their `approval_decided` may not be
    #: stored yet, but they wait no more.
    decided: frozenset[tuple[str, str]] = frozenset()
    waiting: dict[tuple[str, str], EventRecord] = field(default_factory=dict)

    def see(self, record: EventRecord) -> None:
        kind, call_id = record.event.get("type"), record.event.get("call_id")
        if kind in _RUN_ENDS:  # an ended run (cancelled, say) waits for nothing
            for key in [key for key in self.waiting if key[0] == record.run_id]:
                del self.waiting[key]
        if not isinstance(call_id, str):
            return
        key = (record.run_id, call_id)
        if kind == "approval_requested" and key not in self.decided:
            self.waiting[key] = record
        elif kind == "approval_decided":
            self.waiting.pop(key, None)

    @property
    def any(self) -> bool:
        return bool(self.waiting)


def interrupted(
    thread_id: str, root_run_id: str, calls: WaitingCalls, after: int
) -> list[BaseEvent]:
    """The AG-UI run's end while ``calls`` wait, the stream having sent events up to
    ``after``: first each waiting call as the model made it (its TOOL_CALL_START, _ARGS,
    _END: the client then holds the call; when it runs, its start is sent again, which AG-UI
    clients take as the same call), then RUN_FINISHED: with the interrupts when a person is
    asked, else (only client tools wait) a success naming the calls the client is to run."""
    events: list[BaseEvent] = []
    for record in calls.waiting.values():
        call = {
            "tool_call_id": record.event.get("call_id"),
            "tool_name": record.event.get("tool_name"),
            "arguments": record.event.get("arguments"),
        }
        sub = {} if record.run_id == root_run_id else {"subagent_run_id": record.run_id}
        events += tool_call_events(record, call, sub)
    asked = [record for record in calls.waiting.values() if _kind(record) != "client_tool"]
    outcome: RunFinishedInterruptOutcome | RunFinishedSuccessOutcome
    if asked:
        interrupts = [_interrupt(record, root_run_id, after) for record in asked]
        outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
    else:
        pending = [str(record.event.get("call_id")) for record in calls.waiting.values()]
        outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=pending)
    events.append(RunFinishedEvent(thread_id=thread_id, run_id=root_run_id, outcome=outcome))
    return events


def _kind(record: EventRecord) -> str:
    kind = record.event.get("kind")
    return kind if kind in ("question", "client_tool") else "approval"


def _interrupt(record: EventRecord, root_run_id: str, after: int) -> Interrupt:
    body = record.event
    call_id = str(body["call_id"])
    kind = _kind(record)
    tool = str(body.get("tool_name") or "")
    message = (
        str(body.get("question") or "")
        if kind == "question"
        else f"{record.agent_id} wants to call {tool}"
    )
    return Interrupt(
        id=f"{after}/{quote(record.run_id, safe='')}/{quote(call_id, safe='')}",
        reason=REASONS[kind],
        message=message,
        # As the stream names the call (a descendant's prefixed with its run id).
        tool_call_id=call_id if record.run_id == root_run_id else f"{record.run_id}#{call_id}",
        subagent_run_id=None if record.run_id == root_run_id else record.run_id,
        response_schema=ANSWER_SCHEMA if kind == "question" else APPROVAL_SCHEMA,
        metadata={
            "run_id": record.run_id,
            "call_id": call_id,
            "kind": kind,
            "tool_name": tool,
            "arguments": _parsed(body.get("arguments")),
            "approvers": body.get("approvers") or [],
        },
    )


def _parsed(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:  # cut for the event: the text as it is
        return arguments


@dataclass(frozen=True)
class Resumed:
    """What a resume decided: the tree, where its stream goes on, the calls decided."""

    root_run_id: str
    after: int
    decided: frozenset[tuple[str, str]]


async def decide_resumed(
    agents: AgentClient, store: Store, entries: Sequence[ResumeEntry]
) -> Resumed:
    """Send each entry's decision (as the caller's identity); malformed entries are refused
    before any decision is sent. A client's retry is harmless: the same decision again is
    accepted, even once the run has gone on to its end (read from ``store``)."""
    parsed = [_entry(index, entry) for index, entry in enumerate(entries)]
    roots: set[str] = set()
    for _, run_id, call_id, decide in parsed:
        try:
            request = await decide.send(agents, run_id, call_id)
        except (RunNotActiveError, ApprovalNotFoundError, ApprovalConflictError) as refused:
            if isinstance(refused, ApprovalNotAllowedError):
                raise
            root = await answered(_decided_in, store, agents.partition_key, run_id, call_id, decide)
            if root is None:
                raise
            roots.add(root)
            continue
        roots.add(request.root_run_id)
    if len(roots) != 1:
        raise ApiError(
            422,
            "invalid_request",
            "resume: the interrupts answered must be of one run tree",
            field="resume",
        )
    return Resumed(
        root_run_id=roots.pop(),
        after=min(after for after, *_ in parsed),
        decided=frozenset((run_id, call_id) for _, run_id, call_id, _ in parsed),
    )


@dataclass(frozen=True)
class _Decide:
    """One entry's decision: how to send it, and the `approval_decided` it records."""

    send: Callable[[AgentClient, str, str], Awaitable[ApprovalRequest]]
    recorded: str  # approved / denied / answered


def _decided_in(
    store: Store, partition_key: str | None, run_id: str, call_id: str, decide: _Decide
) -> str | None:
    """The root of ``run_id`` when its call was decided as ``decide`` would (a retried
    resume), else None."""
    record = store.find_run_record(run_id, partition_key)
    if record is None:
        return None
    for event in store.read_events(record.root_run_id, limit=10_000, partition_key=partition_key):
        body = event.event
        if (
            event.run_id == run_id
            and body.get("type") == "approval_decided"
            and body.get("call_id") == call_id
        ):
            return record.root_run_id if body.get("decision") == decide.recorded else None
    return None


def _entry(index: int, entry: ResumeEntry) -> tuple[int, str, str, _Decide]:
    where = f"resume.{index}"
    parts = entry.interrupt_id.split("/")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1] or not parts[2]:
        raise ApiError(
            422,
            "invalid_request",
            f"{where}.interruptId: not an interrupt of this server: {entry.interrupt_id!r}",
            field=f"{where}.interruptId",
        )
    return int(parts[0]), unquote(parts[1]), unquote(parts[2]), _decision(where, entry)


def _decision(where: str, entry: ResumeEntry) -> _Decide:
    payload = entry.payload
    if entry.status == "cancelled":
        reason = _text(payload, "reason") or "cancelled in the client"
        return _Decide(lambda agents, run, call: agents.deny(run, call, reason), "denied")
    if isinstance(payload, str) and payload.strip():
        return _Decide(lambda agents, run, call: agents.answer(run, call, payload), "answered")
    if isinstance(payload, dict):
        answer = _text(payload, "answer")
        if answer is not None:
            return _Decide(lambda agents, run, call: agents.answer(run, call, answer), "answered")
        approved = payload.get("approved")
        if approved is True:
            arguments = payload.get("arguments")
            if arguments is not None and not isinstance(arguments, dict):
                raise _bad_payload(where, "arguments must be an object")
            return _Decide(
                lambda agents, run, call: agents.approve(run, call, arguments), "approved"
            )
        if approved is False:
            refusal = _text(payload, "reason") or "denied in the client"
            return _Decide(lambda agents, run, call: agents.deny(run, call, refusal), "denied")
    if isinstance(payload, bool):
        if payload:
            return _Decide(lambda agents, run, call: agents.approve(run, call), "approved")
        return _Decide(
            lambda agents, run, call: agents.deny(run, call, "denied in the client"), "denied"
        )
    raise _bad_payload(
        where, 'give {"approved": true|false, "reason"?, "arguments"?} or {"answer": "..."}'
    )


def _text(payload: Any, key: str) -> str | None:
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, str) and value.strip() else None


def _bad_payload(where: str, detail: str) -> ApiError:
    return ApiError(422, "invalid_request", f"{where}.payload: {detail}", field=f"{where}.payload")


async def answer_client_tools(
    agents: AgentClient, store: Store, thread_id: str, results: Sequence[tuple[str, str]]
) -> Resumed:
    """Send the client's results (``(tool call id, content)``) of the client tools the
    thread's run waits on; the stream then goes on after their calls. A retried request is
    harmless, as for `decide_resumed`."""
    partition = agents.partition_key or DEFAULT_PARTITION
    root = await answered(store.session_holder, partition, thread_id)
    if root is None:  # the lease lapsed while the run waited: ask Temporal who waits
        root = await _waiting_root(agents, store, thread_id, {call for call, _ in results})
    if root is None:
        raise ApiError(
            409,
            "run_not_active",
            f"messages: no run of thread '{thread_id}' waits for these tool results",
            field="messages",
        )
    for call_id, content in results:
        decide = _answer_with(content)
        try:
            await decide.send(agents, root, call_id)
        except (RunNotActiveError, ApprovalNotFoundError, ApprovalConflictError) as refused:
            if isinstance(refused, ApprovalNotAllowedError):
                raise
            done = await answered(_decided_in, store, agents.partition_key, root, call_id, decide)
            if done is None:
                raise
    after = await answered(_requested_at, store, agents.partition_key, root, results)
    return Resumed(
        root_run_id=root, after=after, decided=frozenset((root, call) for call, _ in results)
    )


def _answer_with(text: str) -> _Decide:
    # An answer must have text: a tool that returned nothing says so.
    said = text if text.strip() else "(the tool returned nothing)"
    return _Decide(lambda agents, run, call: agents.answer(run, call, said), "answered")


async def _waiting_root(
    agents: AgentClient, store: Store, thread_id: str, calls: set[str]
) -> str | None:
    for request in await agents.pending_approvals():
        if request.kind != "client_tool" or request.call_id not in calls:
            continue
        record = await answered(store.find_run_record, request.root_run_id, agents.partition_key)
        if record is not None and record.session_id == thread_id:
            return request.root_run_id
    return None


def _requested_at(
    store: Store, partition_key: str | None, root: str, results: Sequence[tuple[str, str]]
) -> int:
    """The sequence of the last of the calls' `approval_requested`: the interrupted stream
    sent it, and what came with it (all there was; a few events more sent again are taken by
    AG-UI clients as the same messages)."""
    calls = {call for call, _ in results}
    found = 0
    for event in store.read_events(root, limit=10_000, partition_key=partition_key):
        body = event.event
        if (
            event.run_id == root
            and body.get("type") == "approval_requested"
            and body.get("call_id") in calls
        ):
            found = event.sequence
    return found
