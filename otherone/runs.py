"""Requests, results and records of agent runs (the seed's names, as pydantic models)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    field_validator,
    model_validator,
)

from otherone.client_tools import ClientTool, check_client_tools
from otherone.errors import FailureCode
from otherone.partitions import DEFAULT_PARTITION as DEFAULT_PARTITION
from otherone.partitions import PARTITION_PATTERN as PARTITION_PATTERN
from otherone.parts import Part, TextPart, parts_text
from otherone.run_types import (
    AgentId,
    HandoffContext,
    ModelProfileId,
    Money,
    PositiveDuration,
    RunLimitOverrides,
    TreeBudget,
)
from otherone.shared_state import check_state
from otherone.webhooks import WebhookUrl

#: Bounded text of a user message (1 MiB); a run's own limits may be tighter.
MAX_INPUT_BYTES = 1024 * 1024


#: Most times a run may answer again after its final answer broke its result contract.
MAX_OUTPUT_RETRIES = 10
#: `output_retries` of a request: None takes the runtime policy's (`RuntimePolicy.output_retries`).
OutputRetries = Annotated[int, Field(ge=0, le=MAX_OUTPUT_RETRIES)]

#: Which events of descendants are stored (the root's own events always are): `all`;
#: `lifecycle_only` (run_started/completed/failed/cancelled and agent calls); `root_only` (none).
EventVisibility = Literal["all", "lifecycle_only", "root_only"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _bounded_text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    _check_unicode(value)
    if len(value.encode("utf-8")) > MAX_INPUT_BYTES:
        raise ValueError(f"must be at most {MAX_INPUT_BYTES} bytes")
    return value


#: Refusal messages by what is wrong with the text.
UNENCODABLE_TEXT = "must be valid UTF-8 text: it contains an unpaired surrogate"
NUL_TEXT = "must not contain a NUL character (U+0000): the store cannot hold it"


def unstorable_problem(text: str) -> str | None:
    """Why the store could not hold ``text`` (None: it can): `UNENCODABLE_TEXT` or `NUL_TEXT`."""
    if "\x00" in text:
        return NUL_TEXT
    return None if text.isascii() or _encodable(text) else UNENCODABLE_TEXT


def storable_text(text: str) -> str:
    """``text`` with what no store can hold (NUL, lone surrogates) replaced by U+FFFD: for
    text that cannot be refused where it enters (e.g. a signal sent by Temporal's own client)."""
    if unstorable_problem(text) is None:
        return text
    return "".join("\ufffd" if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch for ch in text)


def unstorable_part(value: Any, path: str = "") -> tuple[str, str] | None:
    """Where in ``value`` a string holds text no store can keep, and what is wrong with it
    (`unstorable_problem`); None: all storable. A lone surrogate or a NUL character.

    Python decodes undecodable bytes (command-line arguments, files read with
    ``surrogateescape``) and broken JSON escapes to lone surrogates; Temporal payloads, the store
    and events can only carry UTF-8, so such text is refused where it enters. PostgreSQL cannot
    store U+0000 in text or JSON at all; SQLite could, but both stores refuse it alike.
    """
    return _unstorable(value, path)


def _unstorable(value: Any, path: str) -> tuple[str, str] | None:
    """(where, problem) of the first string in ``value`` that no store can hold."""
    match value:
        case str():
            problem = unstorable_problem(value)
            return None if problem is None else (path or "(text)", problem)
        case BaseModel():
            items: Any = ((name, getattr(value, name)) for name in type(value).model_fields)
        case dict():
            items = value.items()
        case list() | tuple():
            items = enumerate(value)
        case _:
            return None
    for key, item in items:
        found = _unstorable(key, path) or _unstorable(item, f"{path}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: How deep free-form JSON (metadata, an agent call's context) may nest: the run's input
#: carries it a few levels deeper, and the JSON parsers on its way (Temporal payloads, pydantic)
#: stop at a few hundred levels, which would fail the run after it was accepted.
MAX_JSON_DEPTH = 64


def _check_json(value: Any) -> Any:
    """Free-form JSON a run carries: storable text, `MAX_JSON_DEPTH` levels at most, and
    numbers JSON has (not NaN or Infinity: they would not survive the trip as themselves)."""
    _check_unicode(value)
    if _depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise ValueError(f"must nest at most {MAX_JSON_DEPTH} levels deep")
    try:
        json.dumps(value, default=str, allow_nan=False)
    except ValueError:
        raise ValueError("must hold JSON numbers only (not NaN or Infinity)") from None
    return value


def _depth(value: Any, limit: int) -> int:
    """How deep ``value`` nests (a scalar: 0), counted no further than ``limit`` + 1."""
    if limit < 0:
        return 1
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        return 0
    return 1 + max((_depth(item, limit - 1) for item in items), default=0)


def _check_unicode(value: Any) -> Any:
    found = _unstorable(value, "")
    if found is not None:
        where, problem = found
        inside = "" if where == "(text)" else f" (at {where})"
        head, _, tail = problem.partition(": ")
        raise ValueError(f"{head}{inside}: {tail}")
    return value


class InputMessage(_Model):
    """One message of a run's input when it is given as a conversation: text, or parts (text,
    images, files: `otherone.parts`; images and files of user messages only)."""

    role: Literal["user", "assistant", "system"]
    content: str | tuple[Part, ...]

    @property
    def text(self) -> str:
        """The message's text (of its text parts, when it has parts)."""
        return self.content if isinstance(self.content, str) else parts_text(self.content)

    @property
    def has_content(self) -> bool:
        """Some text, or a part that is not text."""
        if isinstance(self.content, str):
            return bool(self.content.strip())
        return any(not isinstance(part, TextPart) or part.text.strip() for part in self.content)

    @model_validator(mode="after")
    def _parts_of_users(self) -> Self:
        binary = isinstance(self.content, tuple) and any(
            not isinstance(part, TextPart) for part in self.content
        )
        if binary and self.role != "user":
            raise ValueError("only user messages may hold image or file parts")
        return self


class SessionTarget(_Model):
    """Which conversation the run reads and writes. No session_id = a fresh session."""

    session_id: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    context_window: Annotated[int, Field(gt=0, le=10_000_000)] = 8192
    threshold_percentage: Annotated[float, Field(gt=0, le=1)] = 0.8

    @field_validator("session_id")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank")
        _check_unicode(value)
        return value


class RuntimeContext(_Model):
    """Tenant boundary: every descendant inherits it unchanged; all data is scoped by it."""

    partition_key: Annotated[str, StringConstraints(pattern=PARTITION_PATTERN)] = DEFAULT_PARTITION


class ResultContract(_Model):
    """What a run's final answer must be: ``text``, ``auto`` (JSON when it parses) or ``json``
    (JSON, valid for ``schema`` when one is given: a JSON Schema, checked with ``jsonschema``
    where requests enter, see `otherone.result_contracts`)."""

    kind: Literal["text", "auto", "json"] = "auto"
    json_schema: dict[str, JsonValue] | None = Field(default=None, alias="schema")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _schema_only_for_json(self) -> Self:
        if self.json_schema is not None and self.kind != "json":
            raise ValueError("schema is only allowed with kind 'json'")
        return self


class AgentRunRequest(_Model):
    """Start a root run of ``entry_agent`` with ``input``."""

    entry_agent: AgentId
    input: str | tuple[InputMessage, ...]
    session: SessionTarget = Field(default_factory=SessionTarget)
    runtime_context: RuntimeContext = Field(default_factory=RuntimeContext)
    limits: RunLimitOverrides | None = None
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    event_visibility: EventVisibility = "all"
    include_thinking_events: bool = False
    #: What the run's final answer must be (None: text). A violation is told to the model, which
    #: answers again up to ``output_retries`` times; then the run ends `invalid_agent_output`.
    result_contract: ResultContract | None = None
    output_retries: OutputRetries | None = None
    #: The model profile the entry agent runs on, among those it allows (its own and its
    #: ``models``); None: its own. Another is refused (`invalid_request`).
    model: ModelProfileId | None = None
    #: Tools the client runs itself (a front end's: AG-UI's ``tools``), offered to the entry
    #: agent beside its own; a call waits for the client's result (`otherone.client_tools`).
    client_tools: tuple[ClientTool, ...] | None = None

    #: The front end's state (AG-UI's ``state``), which the entry agent reads with its turn
    #: and may replace with `ui.set_state` (`otherone.shared_state`); None: none shared.
    shared_state: dict[str, JsonValue] | None = None

    @field_validator("shared_state")
    @classmethod
    def _state_fits(cls, value: dict[str, JsonValue] | None) -> Any:
        return None if value is None else check_state(value)

    @field_validator("client_tools")
    @classmethod
    def _client_tools_fit(cls, value: tuple[ClientTool, ...] | None) -> Any:
        return None if value is None else check_client_tools(value)

    #: Where a signed POST carries the run's record when it ends (`otherone.webhooks`); None:
    #: the entry agent's default (its definition's ``webhook``), if any. Roots only.
    webhook: WebhookUrl | None = None

    @field_validator("input")
    @classmethod
    def _input_present(cls, value: str | tuple[InputMessage, ...]) -> Any:
        if isinstance(value, str):
            return _bounded_text(value)
        if not value:
            raise ValueError("must contain at least one message")
        _check_unicode(value)
        if not any(message.role == "user" and message.has_content for message in value):
            raise ValueError("must contain a non-empty user message")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_small(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        _check_json(value)
        if len(json.dumps(value, default=str).encode()) > 16 * 1024:
            raise ValueError("must be at most 16 KiB as JSON")
        return value

    def fingerprint(self) -> str:
        """Hash of everything that defines the run; equal requests share an idempotency key.

        Fields added later are left out while unset, so a request's fingerprint stays what it
        was when the run started (a start retried across an upgrade is still "the same")."""
        unset_later = {name for name in _LATER_FIELDS if getattr(self, name) is None}
        fields = self.model_dump(mode="json", exclude=unset_later)
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


#: `AgentRunRequest` fields added after runs were started by key (see `fingerprint`).
_LATER_FIELDS = (
    "result_contract",
    "output_retries",
    "model",
    "client_tools",
    "webhook",
    "shared_state",
)


class AgentCallRequest(_Model):
    """A call from one agent (or trusted code) to another."""

    target: AgentId
    task: str
    context: dict[str, JsonValue] | None = None
    result_contract: ResultContract = Field(default_factory=ResultContract)
    #: Times the child may answer again after breaking the contract (None: the runtime's).
    output_retries: OutputRetries | None = None
    max_iterations: Annotated[int, Field(gt=0)] | None = None
    timeout: PositiveDuration | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    #: The model profile the target runs on, among those it allows (its own and its
    #: ``models``); None: its own.
    model: ModelProfileId | None = None
    #: Images and files the child's input carries after its task (`otherone.parts`): stored
    #: references (of the caller's partition, the only one the child reads) or http(s) URLs;
    #: `AgentClient.call_agent` stores bytes and files first. Empty: text only.
    parts: tuple[Part, ...] = ()

    _valid_unicode = field_validator("task")(_check_unicode)
    _valid_json = field_validator("context", "metadata")(_check_json)


class RunOutcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    BUDGET_EXCEEDED = "budget_exceeded"


class RunStatus(StrEnum):
    CREATED = "created"
    RUNNING = "running"
    WAITING_FOR_CHILD = "waiting_for_child"
    #: A tool call of the run waits for a person's decision (or answer); nothing runs.
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    #: The run sleeps (`time.sleep` / `time.wake_at`) on a durable timer; a message wakes it.
    SLEEPING = "sleeping"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    BUDGET_EXCEEDED = "budget_exceeded"

    @property
    def is_terminal(self) -> bool:
        return self not in (
            RunStatus.CREATED,
            RunStatus.RUNNING,
            RunStatus.WAITING_FOR_CHILD,
            RunStatus.WAITING_FOR_APPROVAL,
            RunStatus.SLEEPING,
        )


class AgentFailure(_Model):
    """Why a run did not complete: a stable code, a message for humans, and retryability."""

    code: FailureCode
    message: str
    retryable: bool = False


class RunUsage(_Model):
    """What a run's own calls used (a tree's usage is the sum of its runs')."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    #: The parts of ``input_tokens`` read from and written to the providers' prompt caches.
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    #: Exact US dollars of the model calls (`otherone.pricing`; a decimal string in JSON);
    #: None when none was priced.
    cost: Money | None = None
    model_calls: int = 0
    tool_calls: int = 0
    agent_calls: int = 0
    duration_millis: int = 0
    #: The run's turns by the model profile that answered them (a fallback's answers are
    #: its own profile's); empty in usage recorded before it was counted.
    models: dict[str, int] = Field(default_factory=dict)


class ArtifactRef(_Model):
    """A stored blob (in our store's artifacts table, scoped by partition), passed by reference."""

    artifact_id: str
    #: The tenant the blob belongs to (every store read is scoped by it).
    partition_key: str
    name: str
    media_type: str
    size_bytes: int


#: Finish reasons of an answer that ended as the model meant it to (providers' spellings).
NORMAL_FINISH_REASONS = frozenset(
    {"stop", "end_turn", "stop_sequence", "tool_calls", "tool_use", "function_call"}
)


class AgentOutput(_Model):
    """A run's output: text, or JSON when a result contract asked for (or detected) it.

    An output bigger than the runtime policy's `inline_payload_bytes` travels through Temporal as
    an `artifact` reference with `value` None; `AgentClient` results carry the value again
    (read from the store), see `AgentClient.resolve_output`.
    """

    type: Literal["text", "json"] = "text"
    value: JsonValue = None
    artifact: ArtifactRef | None = None
    #: Set only when the model's last answer did not end normally, so a cut answer is not
    #: taken for a whole one: ``length`` (cut at the model's ``max_tokens``),
    #: ``content_filter``, ``refusal``, or the provider's own reason. None for a normal end.
    finish_reason: str | None = None

    @property
    def is_reference(self) -> bool:
        """True while the value is only referenced (stored as `artifact`), not carried."""
        return self.artifact is not None and self.value is None

    @property
    def text(self) -> str:
        if self.is_reference:
            assert self.artifact is not None
            return (
                f"[output of {self.artifact.size_bytes} bytes stored as artifact "
                f"{self.artifact.artifact_id}; an AgentClient with the store reads it]"
            )
        if self.type == "text" and isinstance(self.value, str):
            return self.value
        return json.dumps(self.value, ensure_ascii=False)

    def encoded(self) -> bytes:
        """The value as stored in an artifact: UTF-8 text, or JSON."""
        return self.text.encode()

    def with_stored_value(self, content: bytes) -> AgentOutput:
        """This output with the value read back from its artifact."""
        text = content.decode()
        value: JsonValue = text if self.type == "text" else json.loads(text)
        return self.model_copy(update={"value": value})


class AgentRunResult(_Model):
    run_id: str
    root_run_id: str
    agent_id: str
    session_id: str
    outcome: RunOutcome
    failure: AgentFailure | None = None
    output: AgentOutput | None = None
    usage: RunUsage = Field(default_factory=RunUsage)
    artifacts: tuple[JsonValue, ...] = ()
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    #: What this run's tree left of its budget (a caller takes it back).
    budget_remaining: TreeBudget | None = None
    #: Model turns taken, the definition version of ``agent_id`` it ran, its handoffs (oldest
    #: first) and when it started (its first history's start: a run continues as new): what a
    #: finished run's `RunRecord` shows without the store.
    iteration: int = 0
    started_at: datetime | None = None
    agent_definition_version: int | None = None
    handoffs: tuple[HandoffStep, ...] = ()
    #: MCP servers the agent was granted tools of that offered none when the run started
    #: (server -> why: it could not start, or not list its tools); as on the run's record.
    mcp_unavailable: dict[str, str] = Field(default_factory=dict)
    #: The run and turn this root was forked from (`AgentClient.fork`); None: not a fork.
    forked_from: ForkOrigin | None = None

    @property
    def text(self) -> str | None:
        return None if self.output is None else self.output.text


class AgentCallResult(_Model):
    schema_version: Literal[1] = 1
    call_id: str
    target: str
    run_id: str | None = None
    outcome: RunOutcome
    failure: AgentFailure | None = None
    output: AgentOutput | None = None
    usage: RunUsage = Field(default_factory=RunUsage)
    artifacts: tuple[JsonValue, ...] = ()


class HandoffStep(_Model):
    """One handoff of a run (``agent.handoff``): who handed the conversation to whom, at which
    turn of the run, under which context policy, and why."""

    from_agent: str
    to_agent: str
    #: The tool call that handed off.
    call_id: str
    turn: int
    context: HandoffContext
    reason: str | None = None


class ForkOrigin(_Model):
    """Where a forked run came from (`AgentClient.fork`): the root run it was forked from and
    the turn (1-based, see `otherone.client.forks`) it re-ran."""

    run_id: str
    turn: Annotated[int, Field(gt=0)]


class RunRecord(_Model):
    """What a run is doing now (the workflow's query) or how it ended."""

    run_id: str
    root_run_id: str
    parent_run_id: str | None = None
    agent_call_id: str | None = None
    agent_id: str
    agent_definition_version: int | None = None
    session_id: str | None = None
    partition_key: str = DEFAULT_PARTITION
    status: RunStatus
    depth: int = 0
    iteration: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    usage: RunUsage = Field(default_factory=RunUsage)
    failure: AgentFailure | None = None
    output: AgentOutput | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    #: The run's handoffs so far, oldest first (``agent_id`` is the agent it was handed to last).
    handoffs: tuple[HandoffStep, ...] = ()
    #: MCP servers the agent was granted tools of that offered none when the run started
    #: (server -> why: it could not start, or not list its tools); the run went on without them.
    mcp_unavailable: dict[str, str] = Field(default_factory=dict)
    #: The Temporal execution of the run's id this record is of: the first run id of its
    #: workflow's execution chain (continue-as-new and reset keep it). A run id is used once:
    #: a later execution of the same workflow id is refused (`run_id_used`), so it names the
    #: execution `otherone show` shows. None: not known (recorded before it was kept).
    execution_id: str | None = None
    #: The run and turn this root was forked from (`AgentClient.fork`); None: not a fork.
    forked_from: ForkOrigin | None = None
    #: The configuration snapshot the run's definitions were frozen in, as its start stored
    #: it (a fork with the original definition runs in it). None: not known (the record of a
    #: run's workflow, or stored before it was kept).
    snapshot_version: str | None = None


STATUS_FOR_OUTCOME: dict[RunOutcome, RunStatus] = {
    RunOutcome.COMPLETED: RunStatus.COMPLETED,
    RunOutcome.FAILED: RunStatus.FAILED,
    RunOutcome.CANCELLED: RunStatus.CANCELLED,
    RunOutcome.TIMED_OUT: RunStatus.TIMED_OUT,
    RunOutcome.BUDGET_EXCEEDED: RunStatus.BUDGET_EXCEEDED,
}

__all__ = [
    "AgentCallRequest",
    "AgentCallResult",
    "AgentFailure",
    "AgentOutput",
    "AgentRunRequest",
    "AgentRunResult",
    "ArtifactRef",
    "EventVisibility",
    "ForkOrigin",
    "HandoffStep",
    "InputMessage",
    "ResultContract",
    "RunOutcome",
    "RunRecord",
    "RunStatus",
    "RunUsage",
    "RuntimeContext",
    "SessionTarget",
    "timedelta",
]
