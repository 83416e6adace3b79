"""What the trace view reads from the store: a tree's events (for `otherone.client.trace_view`)
and, for the detail of a bar, a model call's request and response or a tool call's arguments
and result (the transcript entries and stored results: secrets were redacted before they were
stored). Callers check the run is the caller's (tenant) first; every read here is of that run's
partition."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from otherone.client.trace_view import Trace, TraceState
from otherone.contracts import EventRecord
from otherone.errors import InvalidRequestError
from otherone.runs import RunRecord
from otherone.store import Store
from otherone.store.records import EntryRow

#: Events read at once while folding a tree.
_BATCH = 500
#: Request messages a model call's detail shows at most (the latest ones).
MAX_MESSAGES = 200
#: Characters of one message's (or result's) text shown at most.
MAX_TEXT_CHARS = 20_000


class CallMessage(BaseModel):
    """One transcript entry, as the model saw it (or answered)."""

    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    error_kind: str | None = None
    truncated: bool = Field(False, description="The text was cut at 20,000 characters.")


class ModelCallDetail(BaseModel):
    run_id: str
    turn: int
    attempt: int | None = None
    profile: str | None = None
    usage: dict[str, Any] | None = None
    request: list[CallMessage] = Field(
        description="The conversation before the call (after its session's latest compaction "
        "before it; the agent's instructions are not entries), at most the last 200."
    )
    earlier_messages: int = Field(0, description="Request messages left out (before those).")
    response: CallMessage | None = Field(
        None, description="The stored answer of the turn (null: not stored, or not yet)."
    )
    streamed_text: str | None = Field(
        None,
        description="What this attempt streamed, from its events, when it is not the stored "
        "answer (a failed or superseded attempt).",
    )


class ToolCallDetail(BaseModel):
    run_id: str
    tool_call_id: str
    tool_name: str | None = None
    arguments: str | None = Field(None, description="As the model wrote them.")
    result: str | None = Field(None, description="What the tool returned (null: not yet).")
    error_kind: str | None = None
    truncated: bool = False


def read_tree_events(
    store: Store, root_run_id: str, partition_key: str | None
) -> list[EventRecord]:
    """Every stored event of the root's tree (of ``partition_key`` only, when given), in order."""
    events: list[EventRecord] = []
    while True:
        after = events[-1].sequence if events else 0
        batch = store.read_events(
            root_run_id, after=after, limit=_BATCH, partition_key=partition_key
        )
        events.extend(batch)
        if len(batch) < _BATCH:
            return events


def tree_trace(store: Store, root_run_id: str, partition_key: str | None) -> Trace:
    state = TraceState(root_run_id)
    for record in read_tree_events(store, root_run_id, partition_key):
        state.apply(record)
    return state.trace(datetime.now(UTC))


def model_call_detail(
    store: Store, record: RunRecord, turn: int, attempt: int | None
) -> ModelCallDetail:
    """Turn ``turn`` of the run: the entries before its answer, and its answer."""
    entries = _session_entries(store, record)
    key = f"{record.run_id}:t{turn}:assistant"
    at = next((index for index, entry in enumerate(entries) if entry.entry_key == key), None)
    before = entries if at is None else entries[:at]
    before = _after_compaction(store, record, before)
    shown = before[-MAX_MESSAGES:]
    answer = entries[at] if at is not None else None
    usage = dict(answer.usage) if answer is not None and answer.usage else None
    events = _turn_events(store, record, turn)
    if answer is None and not events:
        raise InvalidRequestError(
            f"run '{record.run_id}' has no model call in turn {turn}", field="turn"
        )
    streamed = None
    if attempt is not None and (answer is None or attempt != _attempt_of_answer(events)):
        streamed = _streamed_text(events, attempt)
    return ModelCallDetail(
        run_id=record.run_id,
        turn=turn,
        attempt=attempt,
        profile=str(usage.get("model")) if usage and usage.get("model") else None,
        usage=usage,
        request=[_message(entry) for entry in shown],
        earlier_messages=len(before) - len(shown),
        response=_message(answer) if answer is not None and streamed is None else None,
        streamed_text=streamed,
    )


def tool_call_detail(store: Store, record: RunRecord, tool_call_id: str) -> ToolCallDetail:
    """The call as the model made it (its answer's tool calls) and the result it got."""
    entries = _session_entries(store, record)
    mine = [entry for entry in entries if entry.run_id in (None, record.run_id)]
    arguments, name = None, None
    for entry in mine:
        for call in entry.tool_calls or []:
            if call.get("id") == tool_call_id:
                function = call.get("function") or call
                name = function.get("name")
                raw = function.get("arguments")
                arguments = raw if isinstance(raw, str) or raw is None else str(raw)
    result = next((e for e in mine if e.role == "tool" and e.tool_call_id == tool_call_id), None)
    content, kind = (result.content, result.error_kind) if result is not None else (None, None)
    if content is None:
        stored = store.get_tool_results(record.partition_key, record.run_id, [tool_call_id])
        content = stored.get(tool_call_id)
    if name is None and arguments is None and content is None:
        raise InvalidRequestError(
            f"run '{record.run_id}' has no tool call '{tool_call_id}' in its transcript",
            field="tool_call_id",
        )
    text, truncated = _cut(content)
    return ToolCallDetail(
        run_id=record.run_id,
        tool_call_id=tool_call_id,
        tool_name=name or (result.tool_name if result is not None else None),
        arguments=arguments,
        result=text,
        error_kind=kind,
        truncated=truncated,
    )


def _session_entries(store: Store, record: RunRecord) -> list[EntryRow]:
    if record.session_id is None:
        return []
    return store.load_entries(record.partition_key, record.session_id)


def _after_compaction(store: Store, record: RunRecord, before: list[EntryRow]) -> list[EntryRow]:
    """The entries the model saw: those after the session's latest compaction, when that
    compaction came before the call (its summary first, as the model gets it)."""
    if record.session_id is None or not before:
        return before
    latest = store.latest_compaction(record.partition_key, record.session_id)
    last_id = before[-1].id or 0
    if latest is None or latest.up_to_entry_id >= last_id:
        return before
    summary = EntryRow(entry_key="compaction", role="system", content=latest.summary)
    return [summary, *(entry for entry in before if (entry.id or 0) > latest.up_to_entry_id)]


def _turn_events(store: Store, record: RunRecord, turn: int) -> list[dict[str, Any]]:
    """The bodies of the run's model events of ``turn`` (read once per detail)."""
    tree = read_tree_events(store, record.root_run_id, record.partition_key)
    return [
        event.event
        for event in tree
        if event.run_id == record.run_id
        and event.event.get("turn") == turn
        and str(event.event.get("type")).startswith("model_")
    ]


def _attempt_of_answer(events: list[dict[str, Any]]) -> int | None:
    """The attempt whose answer was stored: the turn's last completed without an error."""
    answered: int | None = None
    for body in events:
        attempt = body.get("attempt")
        if body.get("type") == "model_completed" and not body.get("error"):
            answered = attempt if isinstance(attempt, int) else answered
    return answered


def _streamed_text(events: list[dict[str, Any]], attempt: int) -> str:
    parts = [
        str(body.get("content") or "")
        for body in events
        if body.get("type") == "model_delta" and body.get("attempt") == attempt
    ]
    return _cut("".join(parts))[0] or ""


def _message(entry: EntryRow) -> CallMessage:
    text, truncated = _cut(entry.content)
    return CallMessage(
        role=entry.role,
        content=text or "",
        tool_calls=entry.tool_calls,
        tool_call_id=entry.tool_call_id,
        tool_name=entry.tool_name,
        error_kind=entry.error_kind,
        truncated=truncated,
    )


def _cut(text: str | None) -> tuple[str | None, bool]:
    if text is None or len(text) <= MAX_TEXT_CHARS:
        return text, False
    return text[:MAX_TEXT_CHARS] + "…", True
