"""Declarations: agents, model profiles, the runtime policy and limits.

These are the seed's `AgentDefinition`, `ModelProfile`, `RuntimePolicy` and `RuntimeLimits`, as
frozen pydantic models so that a declaration is validated once, at load time, and can be hashed
into a `RuntimeSnapshot` that a run keeps for its whole life.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from datetime import timedelta
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    JsonValue,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)

from otherone.credentials import (
    credential_paths,
    is_credential_value,
    nested_credential_paths,
    url_credential_parts,
)
from otherone.guardrail_policy import GuardrailPolicy
from otherone.hook_policy import HookPolicy
from otherone.mcp_prompts import McpPromptRef
from otherone.partition_limits import PartitionCaps
from otherone.run_types import AGENT_ID_PATTERN as AGENT_ID_PATTERN
from otherone.run_types import NOT_A_BOOL
from otherone.run_types import PROFILE_ID_PATTERN as PROFILE_ID_PATTERN
from otherone.run_types import AgentId as AgentId
from otherone.run_types import FrozenModel as _Frozen
from otherone.run_types import HandoffContext as HandoffContext
from otherone.run_types import ModelProfileId as ModelProfileId
from otherone.run_types import Money as Money
from otherone.run_types import PositiveCount as _PositiveCount
from otherone.run_types import PositiveDuration as PositiveDuration
from otherone.run_types import RunLimitOverrides as RunLimitOverrides
from otherone.run_types import TreeBudget as TreeBudget
from otherone.webhooks import WebhookUrl

ENV_VAR_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
_GLOB = re.compile(r"[*?\[]")


def is_glob(pattern: str) -> bool:
    """Whether a policy entry is a glob (``*``, ``?``, ``[...]``) rather than one name."""
    return bool(_GLOB.search(pattern))


#: The `model` value of an agent that means "use the calling agent's model".
INHERIT_MODEL = "inherit"

MAX_DESCRIPTION_BYTES = 1024
MAX_SYSTEM_PROMPT_BYTES = 128 * 1024


def _max_utf8_bytes(limit: int) -> AfterValidator:
    def check(value: str) -> str:
        size = len(value.encode("utf-8"))
        if size > limit:
            raise ValueError(f"must be at most {limit} bytes (UTF-8), got {size}")
        return value

    return AfterValidator(check)


def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


_Temperature = Annotated[float, Field(ge=0, le=2), AfterValidator(_finite), NOT_A_BOOL]
_TopP = Annotated[float, Field(gt=0, le=1), AfterValidator(_finite), NOT_A_BOOL]
_DelaySeconds = Annotated[float, Field(ge=0, le=86_400), AfterValidator(_finite), NOT_A_BOOL]
_ChunkDelaySeconds = Annotated[float, Field(ge=0, le=60), AfterValidator(_finite), NOT_A_BOOL]


def credentials_refused_message(paths: list[str]) -> str:
    """Why ``other`` entries holding credentials are refused (names the entries, never values)."""
    return f"must not carry credentials ({', '.join(paths)}): " + _USE_KEY_ENV


def metadata_refused_message(paths: list[str]) -> str:
    """Why ``metadata`` entries holding credentials are refused (names them, never values)."""
    return (
        f"must not carry credentials ({', '.join(paths)}): metadata is stored with every run's "
        "snapshot; keep secrets in the worker's environment or secrets file"
    )


def secret_name_refused(example: str) -> str:
    """Why a credential written where the *name* of a secret belongs is refused (the value
    itself is never shown: it is the secret)."""
    return (
        "looks like a credential, not the name of one (the value is not shown): name a worker "
        f"environment variable or secrets-file entry that holds it, e.g. {example}"
    )


def _checked_other(other: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """``other`` ends up in the stored runtime snapshot: no header or option may hold a key.
    Its transport keys are checked here too (they failed every run, at its first call)."""
    paths = credential_paths(other)
    if paths:
        raise ValueError(credentials_refused_message(paths))
    timeout = other.get("timeout")
    if "timeout" in other and (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError("timeout (seconds of silence allowed in a stream) must be a number > 0")
    headers = other.get("extra_headers")
    if "extra_headers" in other and not (
        isinstance(headers, dict) and all(isinstance(value, str) for value in headers.values())
    ):
        raise ValueError("extra_headers must be a table of strings")
    return other


def _checked_metadata(metadata: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """An agent's metadata is stored in the snapshot too: no key may hide in it."""
    paths = nested_credential_paths(metadata)
    if paths:
        raise ValueError(metadata_refused_message(paths))
    return metadata


def _check_http_url(url: str) -> None:
    """ValueError unless ``url`` is an http(s) URL with a host and a valid port."""
    try:
        parts = urllib.parse.urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        raise ValueError("must be an http:// or https:// URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ValueError("must be an http:// or https:// URL (e.g. http://127.0.0.1:11434/v1)")


def url_credentials_refused(url: str, remedy: str) -> None:
    """Refuse a URL carrying a credential (user information, a key in its query, path or
    fragment), saying where it is but not what, and how to send it instead (``remedy``)."""
    found = url_credential_parts(url)
    if found:
        raise ValueError(f"must not carry credentials ({', '.join(found)}): {remedy}")


def _no_url_credentials(url: str | None) -> str | None:
    """A base URL ends up in the stored snapshot and in error messages: no user information,
    and no key in its query, path or fragment (``?key=…``; ``?api-version=…`` is fine)."""
    if url is not None:
        _check_http_url(url)
        url_credentials_refused(url, _USE_KEY_ENV)
    return url


def refuse_secret_value(example: str) -> BeforeValidator:
    """For a field holding the *name* of a secret: a value that is a credential itself is
    refused before the name pattern (which a ``ghp_…`` or opaque key matches), in words that
    say what to write instead (``example``)."""

    def check(value: Any) -> Any:
        if isinstance(value, str) and is_credential_value(value):
            raise ValueError(secret_name_refused(example))
        return value

    return BeforeValidator(check)


_USE_KEY_ENV = (
    "keys are never written in configuration; set api_key_env to the name of the environment "
    "variable that holds it"
)
#: A model's base URL: anything httpx can call, without credentials.
BaseUrl = Annotated[str, AfterValidator(_no_url_credentials)]
#: ``api_key_env``: the name of the variable (or secrets-file entry) holding the key.
KeyEnvName = Annotated[
    str,
    StringConstraints(pattern=ENV_VAR_PATTERN),
    refuse_secret_value('api_key_env = "OPENAI_API_KEY" and export OPENAI_API_KEY=...'),
]


#: A profile's or an override's ``other`` table (extra body options and transport settings).
OtherOptions = Annotated[dict[str, JsonValue], AfterValidator(_checked_other)]


class AccessPolicy(_Frozen):
    """Which names (tools, skills, agents) are reachable: ``none`` (default), ``allow``, ``all``.

    In TOML and Python it can be written as ``"none"``, ``"all"`` or a list of names (= allow).
    Names may be shell-style globs (``mcp.git.*``), the way MCP tools are usually granted.
    """

    mode: Literal["none", "allow", "all"] = "none"
    names: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _from_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value not in ("none", "all"):
                # "allow" alone grants nothing; a name alone is a list that lost its brackets.
                example = '["a_tool", "mcp.git.*"]' if value == "allow" else f'["{value}"]'
                raise ValueError(
                    f"must be 'none', 'all' or a list of names (e.g. {example}), not '{value}'"
                )
            return {"mode": value}
        if isinstance(value, list | tuple | set | frozenset):
            return {"mode": "allow", "names": tuple(sorted(set(value)))}
        return value

    @model_validator(mode="after")
    def _names_only_for_allow(self) -> Self:
        if self.mode != "allow" and self.names:
            raise ValueError(f"names are only meaningful with mode 'allow', not '{self.mode}'")
        return self

    @classmethod
    def allow(cls, *names: str) -> AccessPolicy:
        return cls(mode="allow", names=tuple(sorted(set(names))))

    @classmethod
    def all(cls) -> AccessPolicy:
        return cls(mode="all")

    @classmethod
    def none(cls) -> AccessPolicy:
        return cls(mode="none")

    def allows(self, name: str) -> bool:
        """Whether ``name`` is reachable; an entry may be a glob (``mcp.git.*``)."""
        if self.mode == "all":
            return True
        if self.mode != "allow":
            return False
        return name in self.names or any(
            fnmatchcase(name, entry) for entry in self.names if is_glob(entry)
        )


class MemoryPolicy(StrEnum):
    DISABLED = "disabled"
    READ_ONLY_SHARED = "read_only_shared"
    READ_WRITE_SHARED = "read_write_shared"
    PRIVATE_AGENT = "private_agent"


class ContextTransferPolicy(_Frozen):
    """What a child sees of its caller: only the explicit context, or also a parent excerpt."""

    kind: Literal["explicit_only", "parent_summary", "parent_window"] = "explicit_only"
    max_tokens: Annotated[int, Field(strict=True, ge=0, le=1_000_000)] = 0

    @model_validator(mode="before")
    @classmethod
    def _from_shorthand(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value


class HandoffPolicy(_Frozen):
    """Which agents this one may hand its conversation to (``agent.handoff``), and how.

    ``context``: ``full`` (the session as it is), ``summary`` (a model-written summary of it
    replaces what came before the handoff) or ``last_turns`` (only the last ``last_turns``
    user turns stay visible). ``model_may_choose_context``: the model may pick another of the
    three for one handoff (the tool then offers a ``context`` argument).
    """

    agents: AccessPolicy = Field(default_factory=AccessPolicy)
    context: HandoffContext = "full"
    last_turns: Annotated[int, Field(strict=True, ge=1, le=1000)] = 3
    model_may_choose_context: StrictBool = False


class ModelOverrides(_Frozen):
    """Per-agent generation settings that win over the model profile's defaults."""

    context_length: Annotated[int, Field(strict=True, gt=0)] | None = None
    max_tokens: Annotated[int, Field(strict=True, gt=0)] | None = None
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    tool_choice: str | dict[str, JsonValue] | None = None
    parallel_tool_calls: StrictBool | None = None
    other: OtherOptions = Field(default_factory=dict)


class AgentLimits(_Frozen):
    """Per-agent limits; each can only tighten the runtime's."""

    max_iterations: Annotated[int, Field(strict=True, gt=0, le=10_000)] | None = None
    timeout_millis: Annotated[int, Field(strict=True, gt=0)] | None = None
    max_result_bytes: Annotated[int, Field(strict=True, gt=0)] | None = None


#: What happens when nobody decides an approval in time: the call is denied (the model is told
#: so) or the run fails.
ApprovalTimeoutEffect = Literal["deny", "fail"]
#: Who may decide: client identities (empty: anyone who can reach the run's tenant).
Approvers = tuple[Annotated[str, StringConstraints(min_length=1, max_length=256)], ...]


class ApprovalRule(_Frozen):
    """When a tool call needs a person's yes, set per agent or by the runtime policy.

    Written ``"always"`` / ``"never"`` or as a table ``{ mode = "always", timeout = "PT1H",
    on_timeout = "fail", approvers = ["alice"] }``. Predicates over the arguments are declared
    on the tool itself (``@tool(approval=...)``): configuration holds data, not code.
    """

    mode: Literal["always", "never"] = "always"
    timeout: PositiveDuration | None = None
    on_timeout: ApprovalTimeoutEffect = "deny"
    approvers: Approvers = ()

    @model_validator(mode="before")
    @classmethod
    def _from_shorthand(cls, value: Any) -> Any:
        return {"mode": value} if isinstance(value, str) else value


#: Keys of an approval table: a tool name, ``agent.call`` (every target), ``agent.call:<agent>``
#: (one target) or ``human.ask`` (only its timeout applies: a question always waits).
ApprovalRules = dict[Annotated[str, StringConstraints(min_length=1, max_length=130)], ApprovalRule]


class AgentDefinition(_Frozen):
    """One peer agent: any agent can be the entry of a run or, when allowed, be called."""

    id: AgentId
    description: Annotated[
        str, StringConstraints(min_length=1), _max_utf8_bytes(MAX_DESCRIPTION_BYTES)
    ]
    system_prompt: Annotated[str, _max_utf8_bytes(MAX_SYSTEM_PROMPT_BYTES)] = ""
    version: Annotated[int, Field(strict=True, ge=1)] = 1
    #: None = the runtime's default model, ``"inherit"`` = the caller's, else a profile id.
    model: str | None = None
    #: Model profiles a request may choose for this agent (`AgentRunRequest.model`,
    #: ``otherone run --model``, an agent call's ``model``). Its own model is always allowed
    #: (and must be listed when this is set); empty: only its own.
    models: tuple[ModelProfileId, ...] = ()
    model_overrides: ModelOverrides = Field(default_factory=ModelOverrides)
    tools: AccessPolicy = Field(default_factory=AccessPolicy)
    skills: AccessPolicy = Field(default_factory=AccessPolicy)
    callable_agents: AccessPolicy = Field(default_factory=AccessPolicy)
    memory: MemoryPolicy = MemoryPolicy.DISABLED
    context: ContextTransferPolicy = Field(default_factory=ContextTransferPolicy)
    limits: AgentLimits = Field(default_factory=AgentLimits)
    #: Free-form data kept with the definition (and so in every snapshot): no credentials.
    metadata: Annotated[dict[str, JsonValue], AfterValidator(_checked_metadata)] = Field(
        default_factory=dict
    )
    #: Tool calls of this agent that need a person's approval (by tool name, see ApprovalRules).
    approval: ApprovalRules = Field(default_factory=dict)
    #: Offer the built-in ``human.ask`` tool: the model may ask the user and wait for the answer.
    ask_human: StrictBool = False
    #: Offer the built-in ``agent.handoff`` tool (root runs only): hand the conversation over.
    handoff: HandoffPolicy = Field(default_factory=HandoffPolicy)
    #: Offer ``agent.spawn`` / ``agent.await`` / ``agent.status`` / ``agent.cancel`` (background
    #: agent calls, same targets and checks as ``agent.call``) when some agent is reachable.
    spawn: StrictBool = False
    #: Spawned children still running when this agent's run completes: ``cancel`` them, or
    #: ``wait`` for them (bounded by the run's deadline). Any other ending cancels them.
    spawned_on_exit: Literal["cancel", "wait"] = "cancel"
    #: Offer ``time.sleep`` / ``time.wake_at`` (when the runtime policy allows it): the model
    #: may pause its run for a while (a durable timer, bounded by ``max_sleep`` and the run's
    #: deadline), woken early by a user message.
    sleep: StrictBool = False
    #: Guardrails on this agent's input, answers and tool calls (after the runtime policy's).
    guardrails: GuardrailPolicy = Field(default_factory=GuardrailPolicy)
    #: Lifecycle hooks of this agent's model and tool calls (after the runtime policy's).
    hooks: HookPolicy = Field(default_factory=HookPolicy)
    #: The completion webhook of root runs of this agent that name none (`otherone.webhooks`):
    #: a signed POST of the run's record when it ends. Runs it is called by (children) send none.
    webhook: WebhookUrl | None = None
    #: An MCP server prompt whose text follows ``system_prompt`` (`otherone.mcp_prompts`),
    #: fetched when a root run's snapshot is made and kept in it.
    instructions_from: McpPromptRef | None = None

    @field_validator("description")
    @classmethod
    def _description_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("model")
    @classmethod
    def _model_reference(cls, value: str | None) -> str | None:
        if (
            value is not None
            and value != INHERIT_MODEL
            and not re.fullmatch(PROFILE_ID_PATTERN, value)
        ):
            raise ValueError(f"'{value}' is not a valid model profile id")
        return value

    @field_validator("models")
    @classmethod
    def _models_once(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"lists {', '.join(repeated)} more than once")
        return value


Provider = Literal["openai", "anthropic", "openrouter", "local", "scripted"]


class ScriptedToolCall(_Frozen):
    """A tool call the scripted model makes."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    arguments: dict[str, JsonValue] | str = Field(default_factory=dict)
    id: str | None = None


class ScriptedFailure(_Frozen):
    """Make the scripted model fail, like a provider would, on the first ``attempts`` attempts."""

    message: str = "scripted provider failure"
    retryable: StrictBool = True
    attempts: Annotated[int, Field(strict=True, ge=1)] = 1


class ScriptedTurn(_Frozen):
    """One model response of the scripted provider.

    ``text`` is streamed in ``chunks`` when given (their concatenation is the text), so streaming
    code paths are exercised offline; ``delay_seconds`` waits before answering (heartbeating, so
    a cancelled run stops it); ``fail`` makes the first attempts fail.
    """

    text: str = ""
    chunks: tuple[str, ...] | None = None
    thinking: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    delay_seconds: _DelaySeconds = 0.0
    chunk_delay_seconds: _ChunkDelaySeconds = 0.0
    fail: ScriptedFailure | None = None
    input_tokens: Annotated[int, Field(strict=True, ge=0)] | None = None
    output_tokens: Annotated[int, Field(strict=True, ge=0)] | None = None
    #: How the answer ends, as a provider reports it (e.g. ``length``: cut at max_tokens);
    #: default ``tool_calls`` when it calls tools, else ``stop``.
    finish_reason: Literal["stop", "length", "content_filter", "refusal"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_shorthand(cls, value: Any) -> Any:
        return {"text": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _chunks_match_text(self) -> Self:
        if self.chunks is not None and self.text and "".join(self.chunks) != self.text:
            raise ValueError("chunks must concatenate to text (or leave text empty)")
        return self

    @property
    def full_text(self) -> str:
        return "".join(self.chunks) if self.chunks is not None else self.text


class ModelPrices(_Frozen):
    """US dollars per million tokens: prompt tokens read fresh (``input``), answer tokens
    (``output``), prompt tokens read from the provider's cache (``cache_read``) and written
    to it (``cache_write``). A cache price left out is the ``input`` price (no discount)."""

    input: Money
    output: Money
    cache_read: Money | None = None
    cache_write: Money | None = None


class ModelProfile(_Frozen):
    """A model to call. The API key is only ever a *reference*, resolved on the worker."""

    id: ModelProfileId
    provider: Provider
    model: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    base_url: BaseUrl | None = None
    #: Name of the environment variable holding the API key (read inside the activity).
    api_key_env: KeyEnvName | None = None
    context_length: Annotated[int, Field(strict=True, gt=0)] | None = None
    max_tokens: Annotated[int, Field(strict=True, gt=0)] | None = None
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    other: OtherOptions = Field(default_factory=dict)
    #: Limits of the provider account behind this profile, held by the whole fleet (every
    #: worker sharing the store; `otherone.store.capacity`): calls in flight at once, calls
    #: started in any minute, tokens (input + output) used in any minute. None: no limit.
    max_concurrent_calls: _PositiveCount | None = None
    requests_per_minute: _PositiveCount | None = None
    tokens_per_minute: Annotated[int, Field(strict=True, gt=0)] | None = None
    #: What the model's tokens cost; None: the maintained table of `genai-prices` for known
    #: models (`otherone.pricing`), else the calls are not priced (no cost).
    prices: ModelPrices | None = None
    #: Prompt caching: for ``anthropic``, breakpoints on the tools, system prompt and
    #: conversation (``None``, the default: on; ``false``: none). OpenAI caches long prompts
    #: by itself (its cached tokens are reported and priced either way).
    prompt_cache: StrictBool | None = None
    #: Attempts of one model call on this profile (Temporal retries the retryable failures:
    #: 408/409/429/5xx, refused or dropped connections, timeouts) before the call fails, or
    #: its ``fallbacks`` answer. None: 5.
    max_attempts: Annotated[int, Field(strict=True, ge=1, le=20)] | None = None
    #: Profiles that answer a turn this one could not (its call failed for a reason its
    #: attempts did not fix: an outage, 5xx/429, a timeout, an overloaded provider), in order;
    #: a fallback's own fallbacks follow it. Errors another provider would repeat (a bad
    #: request, a rejected key) do not fall back. The next turn tries this profile again.
    fallbacks: tuple[ModelProfileId, ...] = ()
    #: What the model takes in besides text: ``image``, ``file`` (PDF). None (the default):
    #: everything (``["text", "image", "file"]``); ``["text"]`` for a model without vision, so
    #: an image is refused before the call instead of by a provider 400
    #: (`otherone.model_modalities`).
    input_modalities: tuple[Literal["text", "image", "file"], ...] | None = None
    #: Scripted provider only: the turns each agent plays, by agent id.
    script: dict[AgentId, tuple[ScriptedTurn, ...]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_inline_secret(cls, value: Any) -> Any:
        if isinstance(value, dict) and "api_key" in value:
            raise ValueError(
                "api_key must not be written in configuration; set api_key_env to the name of "
                "the environment variable that holds it"
            )
        return value

    @model_validator(mode="after")
    def _script_only_for_scripted(self) -> Self:
        if self.script and self.provider != "scripted":
            raise ValueError("script is only allowed for provider 'scripted'")
        if self.id == INHERIT_MODEL:
            raise ValueError(f"'{INHERIT_MODEL}' is reserved and cannot be a profile id")
        return self

    @field_validator("fallbacks")
    @classmethod
    def _fallbacks_once(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"lists {', '.join(repeated)} more than once")
        return value


class RuntimePolicy(_Frozen):
    """Global allowlists; an agent's effective access is the intersection with its own policy."""

    tools: AccessPolicy = Field(default_factory=AccessPolicy.all)
    skills: AccessPolicy = Field(default_factory=AccessPolicy.all)
    callable_agents: AccessPolicy = Field(default_factory=AccessPolicy.all)
    #: Agents any agent may hand a conversation to (intersected with the agent's own policy).
    handoff_agents: AccessPolicy = Field(default_factory=AccessPolicy.all)
    allow_recursive_calls: StrictBool = False
    #: Whether agents that ask for it (``spawn = true``) get the background agent-call tools.
    allow_spawn: StrictBool = True
    #: Whether agents that ask for it (``sleep = true``) get ``time.sleep`` / ``time.wake_at``.
    allow_sleep: StrictBool = True
    #: A run continues as new (a fresh Temporal history, same run id) after this many turns,
    #: or earlier when Temporal suggests it.
    continue_as_new_after_turns: Annotated[int, Field(strict=True, gt=0, le=100_000)] = 500
    #: Outputs bigger than this are stored as artifacts and travel through Temporal by reference
    #: (well under Temporal's 2 MB payload limit; tool results always travel by reference).
    inline_payload_bytes: Annotated[int, Field(strict=True, ge=1024, le=1024 * 1024)] = 256 * 1024
    #: The model profile that writes compaction summaries (e.g. a cheaper one); None: the
    #: compacting agent's own model.
    summary_model: ModelProfileId | None = None
    #: Approval rules that apply to every agent and win over the agents' and tools' own.
    approval: ApprovalRules = Field(default_factory=dict)
    #: Times a run may answer again when its final answer breaks its result contract (the
    #: problem is told to the model; each retry is a turn: it counts against max_iterations and
    #: the model-call and token budgets). A request's or agent call's ``output_retries`` wins.
    output_retries: Annotated[int, Field(strict=True, ge=0, le=10)] = 2
    #: Guardrails of every agent (they run before the agent's own; its modes win when set).
    guardrails: GuardrailPolicy = Field(default_factory=GuardrailPolicy)
    #: Lifecycle hooks of every agent's model and tool calls (they run before the agent's).
    hooks: HookPolicy = Field(default_factory=HookPolicy)
    #: Completion webhooks (`otherone.webhooks`): attempts of one delivery, and the wait before
    #: the first retry (doubled each time, at most 5 minutes). 8 attempts from 2 s: the last
    #: one about 4 minutes after the first.
    webhook_attempts: Annotated[int, Field(strict=True, ge=1, le=20)] = 8
    webhook_first_retry: PositiveDuration = timedelta(seconds=2)


#: `RuntimeLimits.max_sleep` unless configured.
DEFAULT_MAX_SLEEP = timedelta(days=7)


class RuntimeLimits(_Frozen):
    """Limits of one root run tree (all finite). Durations accept seconds or ISO 8601."""

    max_depth: Annotated[int, Field(strict=True, ge=0, le=64)] = 3
    max_total_runs: _PositiveCount = 32
    max_children_per_run: _PositiveCount = 8
    max_concurrent_model_calls: _PositiveCount = 4
    max_concurrent_tool_calls: _PositiveCount = 8
    max_iterations_per_run: _PositiveCount = 12
    max_model_calls: _PositiveCount = 64
    max_tool_calls: _PositiveCount = 128
    max_agent_calls: _PositiveCount = 32
    #: Handoffs of one root run (``agent.handoff``); the one past it is refused to the model.
    max_handoffs: Annotated[int, Field(strict=True, ge=0, le=1000)] = 5
    max_context_transfer_bytes: Annotated[int, Field(strict=True, gt=0, le=1024 * 1024)] = 64 * 1024
    max_result_bytes: Annotated[int, Field(strict=True, gt=0, le=1024 * 1024)] = 256 * 1024
    #: Tool results up to this many bytes (with the call's arguments) travel in the workflow's
    #: history instead of being stored by the tool activity (one store write less per call; the
    #: entry is written with the run's next ones). 0: every tool result is stored first and
    #: only referenced, so none appears in Temporal's history or Web UI.
    inline_tool_result_bytes: Annotated[int, Field(strict=True, ge=0, le=64 * 1024)] = 2048
    run_timeout: PositiveDuration = timedelta(minutes=5)
    root_timeout: PositiveDuration = timedelta(minutes=15)
    #: The longest one ``time.sleep`` / ``time.wake_at`` may pause a run (a longer one is
    #: refused to the model, as is one past the run's deadline).
    max_sleep: PositiveDuration = DEFAULT_MAX_SLEEP
    token_budget: Annotated[int, Field(strict=True, gt=0)] | None = None
    #: US dollars the tree's model calls may cost together (priced by their profiles'
    #: `ModelPrices`; calls of an unpriced profile cost nothing here); None: unlimited. The
    #: call that passes it ends its run `budget_exceeded`.
    cost_budget: Money | None = None
    #: UTF-8 bytes of the final answers of all the tree's runs together (a typed result counts
    #: its JSON text), the seed's output budget (`budget.add_output_bytes`); None: unlimited.
    #: The answer that passes it ends its run `budget_exceeded`.
    max_output_bytes: Annotated[int, Field(strict=True, gt=0)] | None = None
    #: Caps of single partitions on the fleet's calls (TOML ``[partitions.<key>]``; the key
    #: ``"*"``: every partition without its own), `otherone.partition_limits`.
    partitions: PartitionCaps = {}

    def tightened(self, overrides: RunLimitOverrides | None) -> RuntimeLimits:
        """Apply per-request overrides; raise ValueError naming the field if one would loosen."""
        if overrides is None:
            return self
        changes: dict[str, Any] = {}
        for name, value in overrides.model_dump(exclude_none=True).items():
            current = getattr(self, name)
            if current is not None and value > current:
                raise ValueError(
                    f"limits.{name}: override {value} is above the runtime limit {current}; "
                    "overrides can only tighten"
                )
            changes[name] = value
        return self.model_copy(update=changes)
