"""A declared runtime (agents, models, tools, policy, limits) and its immutable snapshot.

`RuntimeConfig` is what a worker is configured with, in Python or from ``otherone.toml``.
`RuntimeSnapshot` is the serialisable, secret-free view of it with a content hash as version: a
root run fixes one snapshot when it starts and every descendant uses that one, even if the
worker's configuration changes while the run is in flight.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue

from otherone.config_guardrails import GuardrailSchema, guardrail_problem, hook_problem
from otherone.credentials import (
    agent_credential_paths,
    profile_credential_paths,
)
from otherone.definitions import (
    DEFAULT_MAX_SLEEP,
    INHERIT_MODEL,
    AgentDefinition,
    MemoryPolicy,
    ModelProfile,
    RuntimeLimits,
    RuntimePolicy,
)
from otherone.errors import ConfigurationError, FailureCode, OtheroneError
from otherone.guardrail_policy import GuardrailPolicy
from otherone.guardrails import GuardrailDefinitionError, GuardrailRegistry, GuardrailSpec
from otherone.hook_policy import HookPolicy
from otherone.hooks import HookDefinitionError, HookRegistry, HookSpec
from otherone.mcp_prompts import McpInstructions
from otherone.mcp_resources import McpServerResources
from otherone.mcp_servers import MCP_PREFIX, McpServer, is_glob, parse_mcp_name, secret_fields
from otherone.model_choices import (
    ModelNotAllowedError,
    agent_models_problem,
    chosen_model,
    fallbacks_problem,
    model_chain,
)
from otherone.per_version import kept_per_version
from otherone.runs import unstorable_part
from otherone.skills import Skill, SkillRegistry
from otherone.tools import RESERVED_TOOL_NAMES, ToolDefinitionError, ToolRegistry, ToolSpec
from otherone.wire_names import check_wire_names

AGENT_CALL_TOOL = "agent.call"
#: Background agent calls: start a child and go on; await, inspect or cancel it by handle.
AGENT_SPAWN_TOOL = "agent.spawn"
AGENT_AWAIT_TOOL = "agent.await"
AGENT_STATUS_TOOL = "agent.status"
AGENT_CANCEL_TOOL = "agent.cancel"
SPAWN_TOOLS = frozenset({AGENT_SPAWN_TOOL, AGENT_AWAIT_TOOL, AGENT_STATUS_TOOL, AGENT_CANCEL_TOOL})
MEMORY_RECALL_TOOL = "memory.recall"
MEMORY_STORE_TOOL = "memory.store"
HUMAN_ASK_TOOL = "human.ask"
HANDOFF_TOOL = "agent.handoff"
#: Durable sleep: pause the run for a duration, or until a time (`otherone.workflows.sleeps`).
SLEEP_TOOL = "time.sleep"
WAKE_AT_TOOL = "time.wake_at"
SLEEP_TOOLS = frozenset({SLEEP_TOOL, WAKE_AT_TOOL})


class AgentNotFoundError(OtheroneError):
    code = FailureCode.AGENT_NOT_FOUND

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"agent '{agent_id}' is not defined")
        self.agent_id = agent_id


class ToolSchema(BaseModel):
    """What a run needs to know of a tool: its model-facing definition and execution settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    parameters: dict[str, JsonValue]
    timeout_seconds: float
    max_attempts: int
    #: The tool's own approval rule (a predicate is evaluated by the worker that has the tool).
    approval: Literal["always", "never", "predicate"] = "never"
    approval_timeout_seconds: float | None = None
    approval_on_timeout: Literal["deny", "fail"] = "deny"
    #: The tool's own guardrails on its arguments (`@tool(guardrails=...)`).
    guardrails: tuple[str, ...] = ()

    @classmethod
    def of(cls, spec: ToolSpec) -> ToolSchema:
        return cls(
            name=spec.name,
            description=spec.description,
            parameters=spec.parameters,
            timeout_seconds=spec.timeout_seconds,
            max_attempts=spec.max_attempts,
            approval=spec.approval_mode,
            approval_timeout_seconds=spec.approval_timeout_seconds,
            approval_on_timeout=spec.approval_on_timeout,
            guardrails=spec.guardrails,
        )

    def definition(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class McpToolRef(BaseModel):
    """Which server runs an ``mcp.<server>.<tool>`` tool, and the tool's name on that server."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: str
    tool: str


class McpServerTools(BaseModel):
    """What discovery found on one MCP server when the snapshot was made.

    ``tools_hash`` is the SHA-256 of the server's tool list as listed (names, descriptions,
    schemas), so "did the server change its tools?" is one comparison; ``error`` says why a
    server contributed no tools (it could not start or list them).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tools_hash: str = ""
    tools: tuple[str, ...] = ()
    error: str | None = None


class RuntimeSnapshot(BaseModel):
    """Agents, models (no secrets), tool schemas, policy and limits, with a version hash.

    MCP tools are in ``tools`` like any other (their schema is the server's input schema);
    ``mcp_tools`` says which server runs each, ``mcp_servers`` what discovery found.

    A version names one content: the store keeps one snapshot per version, and what a snapshot
    works out per agent is kept per version (`otherone.per_version`). A changed copy must be
    versioned again (``copy.with_version()``, as `with_mcp` does), never keep the original's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    version: str = ""
    default_model: str
    agents: dict[str, AgentDefinition]
    models: dict[str, ModelProfile]
    tools: dict[str, ToolSchema]
    skills: dict[str, Skill] = {}
    policy: RuntimePolicy
    limits: RuntimeLimits
    mcp_servers: dict[str, McpServerTools] = {}
    mcp_tools: dict[str, McpToolRef] = {}
    #: Server -> its resources as listed when the snapshot was made (`otherone.mcp_resources`).
    mcp_resources: dict[str, McpServerResources] = {}
    #: Agent -> the text of its ``instructions_from`` MCP prompt, fetched for this snapshot.
    mcp_instructions: dict[str, McpInstructions] = {}
    guardrails: dict[str, GuardrailSchema] = {}

    def with_version(self) -> RuntimeSnapshot:
        # Empty MCP and guardrail fields are left out, so snapshots without them keep the
        # versions they had.
        excluded: dict[str, Any] = {"version": True} | {
            name: True
            for name in (
                "mcp_servers",
                "mcp_tools",
                "mcp_resources",
                "mcp_instructions",
                "guardrails",
            )
            if not getattr(self, name)
        }
        # Likewise snapshots without partition caps, and those of runtimes that do not use
        # sleep (its limit at the default, no agent asking for it, the policy's default).
        unused_limits = {
            name
            for name, unused in (
                ("partitions", not self.limits.partitions),
                ("max_sleep", self.limits.max_sleep == DEFAULT_MAX_SLEEP),
            )
            if unused
        }
        if unused_limits:
            excluded["limits"] = unused_limits
        body = _without_unused_defaults(self.model_dump(mode="json", exclude=excluded))
        digest = hashlib.sha256(
            json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        return self.model_copy(update={"version": digest[:32]})

    def with_mcp(
        self,
        servers: Mapping[str, McpServerTools],
        schemas: Mapping[str, ToolSchema],
        refs: Mapping[str, McpToolRef],
        resources: Mapping[str, McpServerResources] | None = None,
        instructions: Mapping[str, McpInstructions] | None = None,
    ) -> RuntimeSnapshot:
        """This snapshot plus the MCP tools, resources and prompt instructions a worker
        discovered (a new version when they differ)."""
        return self.model_copy(
            update={
                "tools": {**self.tools, **schemas},
                "mcp_servers": dict(servers),
                "mcp_tools": dict(refs),
                "mcp_resources": dict(resources or {}),
                "mcp_instructions": dict(instructions or {}),
            }
        ).with_version()

    def agent(self, agent_id: str) -> AgentDefinition:
        try:
            return self.agents[agent_id]
        except KeyError:
            raise AgentNotFoundError(agent_id) from None

    def resolve_model(
        self,
        agent: AgentDefinition,
        caller_model: str | None = None,
        requested: str | None = None,
    ) -> ModelProfile:
        """The agent's model: the ``requested`` one (a request's choice among the agent's
        ``models``: `ModelNotAllowedError` otherwise), else its named profile, the caller's
        (``inherit``) or the default."""
        if agent.model == INHERIT_MODEL:
            own = self.models[caller_model or self.default_model]
        else:
            own = self.models[agent.model or self.default_model]
        return chosen_model(agent, own, requested, self.models)

    def model_chain(self, profile: ModelProfile) -> list[ModelProfile]:
        """``profile``, then the profiles that answer a turn it could not (`model_choices`)."""
        return model_chain(self.models, profile)

    @kept_per_version
    def tool_names_for(self, agent: AgentDefinition) -> list[str]:
        """Tools the agent may execute: its policy ∩ the runtime policy ∩ registered, + memory."""
        names = [
            name
            for name in self.tools
            if agent.tools.allows(name) and self.policy.tools.allows(name)
        ]
        if agent.memory is not MemoryPolicy.DISABLED:
            names.append(MEMORY_RECALL_TOOL)
        if agent.memory in (MemoryPolicy.READ_WRITE_SHARED, MemoryPolicy.PRIVATE_AGENT):
            names.append(MEMORY_STORE_TOOL)
        return sorted(names)

    @kept_per_version
    def handoff_targets(self, agent: AgentDefinition) -> list[AgentDefinition]:
        """Agents this one may hand its conversation to (its handoff policy ∩ the runtime's),
        never itself."""
        return [
            target
            for target_id, target in sorted(self.agents.items())
            if agent.handoff.agents.allows(target_id)
            and self.policy.handoff_agents.allows(target_id)
            and target_id != agent.id
        ]

    @kept_per_version
    def skill_names_for(self, agent: AgentDefinition) -> list[str]:
        """Skills the agent's prompt may list: its policy ∩ the runtime policy ∩ loaded."""
        return [
            name
            for name in sorted(self.skills)
            if agent.skills.allows(name) and self.policy.skills.allows(name)
        ]

    @kept_per_version
    def reachable_agents(self, agent: AgentDefinition) -> list[AgentDefinition]:
        """Agents this one may call (its policy ∩ runtime policy), never itself unless recursive."""
        return [
            target
            for target_id, target in sorted(self.agents.items())
            if agent.callable_agents.allows(target_id)
            and self.policy.callable_agents.allows(target_id)
            and (target_id != agent.id or self.policy.allow_recursive_calls)
        ]

    def may_spawn(self, agent: AgentDefinition) -> bool:
        """Whether the agent gets the background agent-call tools: it asks for them, the
        runtime policy allows them, and some agent is reachable (as for `agent.call`)."""
        return agent.spawn and self.policy.allow_spawn and bool(self.reachable_agents(agent))

    def may_sleep(self, agent: AgentDefinition) -> bool:
        """Whether the agent gets ``time.sleep`` / ``time.wake_at``: it asks for them and the
        runtime policy allows them."""
        return agent.sleep and self.policy.allow_sleep


_NO_GUARDRAILS = GuardrailPolicy().model_dump(mode="json")
_NO_HOOKS = HookPolicy().model_dump(mode="json")
_WEBHOOK_POLICY = {
    name: value
    for name, value in RuntimePolicy().model_dump(mode="json").items()
    if name.startswith("webhook_")
}
#: Fields added since the first snapshots, at the values that mean "not used": left out of a
#: snapshot's version, so a runtime that uses none of them keeps the version it had (runs
#: started before an upgrade find their snapshot under it).
_UNUSED_POLICY = {"allow_sleep": True, **_WEBHOOK_POLICY}
_UNUSED_AGENT = {"sleep": False, "webhook": None, "instructions_from": None}


def _without_unused_defaults(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a snapshot as JSON) without the later fields at their unused values."""
    for field, unused in _UNUSED_POLICY.items():
        if field in body["policy"] and body["policy"][field] == unused:
            del body["policy"][field]
    for agent in body["agents"].values():
        for field, unused in _UNUSED_AGENT.items():
            if field in agent and agent[field] == unused:
                del agent[field]
    for tool in body["tools"].values():
        if not tool.get("guardrails"):
            tool.pop("guardrails", None)
    for holder in [body["policy"], *body["agents"].values()]:
        for field, empty in (("guardrails", _NO_GUARDRAILS), ("hooks", _NO_HOOKS)):
            if holder.get(field) == empty:
                del holder[field]
    return body


class RuntimeConfig:
    """The declared runtime: the seed's `AgentRuntimeBuilder`, validated by `validate()`.

    ``source`` is the file it came from (for error messages).
    """

    def __init__(
        self,
        *,
        agents: Iterable[AgentDefinition] = (),
        models: Iterable[ModelProfile] = (),
        tools: Iterable[ToolSpec | Callable[..., Any]] = (),
        policy: RuntimePolicy | None = None,
        limits: RuntimeLimits | None = None,
        default_model: str | None = None,
        skills: SkillRegistry | None = None,
        source: str | None = None,
        mcp_servers: Iterable[McpServer] = (),
        guardrails: Iterable[GuardrailSpec | Callable[..., Any]] = (),
        hooks: Iterable[HookSpec | Callable[..., Any]] = (),
    ) -> None:
        self.source = source
        self.mcp_servers: dict[str, McpServer] = {}
        self.agents: dict[str, AgentDefinition] = {}
        self.models: dict[str, ModelProfile] = {}
        self.tools = ToolRegistry()
        self.guardrails = GuardrailRegistry()
        self.hooks = HookRegistry()
        self.policy = policy or RuntimePolicy()
        self.limits = limits or RuntimeLimits()
        self.default_model = default_model
        self.skills = skills or SkillRegistry()
        for agent in agents:
            self.add_agent(agent)
        for model in models:
            self.add_model(model)
        for tool_ in tools:
            self.add_tool(tool_)
        for server in mcp_servers:
            self.add_mcp_server(server)
        for check in guardrails:
            self.add_guardrail(check)
        for hook_ in hooks:
            self.add_hook(hook_)

    def add_mcp_server(self, server: McpServer) -> None:
        """Declare an MCP server; its tools are discovered by the worker for each new root run."""
        if server.name in self.mcp_servers:
            raise self._error(f"duplicate MCP server '{server.name}'", table=f"mcp.{server.name}")
        self._refuse_credentials(secret_fields(server), f"mcp.{server.name}")
        self.mcp_servers[server.name] = server

    def add_agent(self, agent: AgentDefinition) -> None:
        if agent.id in self.agents:
            raise self._error(f"duplicate agent id '{agent.id}'", table=f"agents.{agent.id}")
        self._require_utf8(agent, f"agents.{agent.id}")
        found = agent_credential_paths(
            {"model_overrides": {"other": agent.model_overrides.other}, "metadata": agent.metadata}
        )
        self._refuse_credentials(found, f"agents.{agent.id}")
        self.agents[agent.id] = agent

    def add_model(self, model: ModelProfile) -> None:
        if model.id in self.models:
            raise self._error(f"duplicate model id '{model.id}'", table=f"models.{model.id}")
        self._require_utf8(model, f"models.{model.id}")
        found = profile_credential_paths(
            {"other": model.other, "base_url": model.base_url, "api_key_env": model.api_key_env}
        )
        self._refuse_credentials(found, f"models.{model.id}")
        self.models[model.id] = model

    def _refuse_credentials(self, paths: list[str], table: str) -> None:
        """Validation already refuses these; checked again for definitions built without it
        (``model_construct``, ``model_copy(update=...)``), since a snapshot would store them."""
        if paths:
            raise self._error(
                f"must not carry credentials ({', '.join(paths)}): secrets are never written in "
                "configuration, only the names of the worker variables that hold them "
                "(api_key_env, an MCP server's env and headers_env)",
                table=table,
                field=paths[0],
            )

    def _require_utf8(self, definition: BaseModel, table: str) -> None:
        """Refuse text no snapshot could store (a lone surrogate, e.g. from undecodable bytes)
        here, instead of every run of the worker failing to save the snapshot."""
        found = unstorable_part(definition)
        if found is not None:
            path, problem = found
            raise self._error(problem, table=table, field=path)

    def add_tool(self, tool_: ToolSpec | Callable[..., Any]) -> ToolSpec:
        try:
            return self.tools.register(tool_)
        except ToolDefinitionError as error:
            raise self._error(str(error), table="runtime", field="tools") from error

    def add_guardrail(self, guardrail: GuardrailSpec | Callable[..., Any]) -> GuardrailSpec:
        """Register a guardrail (``@guardrail`` or a plain function over a GuardrailCheck)."""
        try:
            return self.guardrails.register(guardrail)
        except GuardrailDefinitionError as error:
            raise self._error(error.message, table="runtime", field="guardrails") from error

    def add_hook(self, hook_: HookSpec | Callable[..., Any]) -> HookSpec:
        """Register a lifecycle hook (``@hook`` or a plain function over a call's view)."""
        try:
            return self.hooks.register(hook_)
        except HookDefinitionError as error:
            raise self._error(error.message, table="runtime", field="hooks") from error

    def _error(
        self, message: str, *, table: str | None = None, field: str | None = None
    ) -> ConfigurationError:
        return ConfigurationError(message, file=self.source, table=table, field=field)

    def validate(self) -> None:
        """Check every cross reference; raise ConfigurationError naming table and field."""
        if not self.models:
            raise self._error("at least one model profile must be declared", table="models")
        if self.default_model is not None and self.default_model not in self.models:
            raise self._error(
                f"default_model '{self.default_model}' is not a declared model",
                table="runtime",
                field="default_model",
            )
        for name in self.tools.names():
            if name in RESERVED_TOOL_NAMES:
                raise self._error(
                    f"tool name '{name}' is reserved by Otherone", table="runtime", field="tools"
                )
            if name.startswith(MCP_PREFIX):
                raise self._error(
                    f"tool name '{name}': names starting with '{MCP_PREFIX}' are for the tools "
                    "of MCP servers",
                    table="runtime",
                    field="tools",
                )
        check_wire_names(self.tools.names(), source=self.source)
        for spec in self.tools:
            unknown = [name for name in spec.guardrails if name not in self.guardrails]
            if unknown:
                raise self._error(
                    f"tool '{spec.name}': unknown guardrail '{unknown[0]}'",
                    table="runtime",
                    field="tools",
                )
        for agent in self.agents.values():
            self._validate_agent(agent)
        for model in self.models.values():
            self._validate_script(model)
            self._validate_fallbacks(model)
        self._validate_policy()

    def _validate_fallbacks(self, model: ModelProfile) -> None:
        problem = fallbacks_problem(self.models, model)
        if problem is not None:
            raise self._error(problem, table=f"models.{model.id}", field="fallbacks")

    def own_model(self, agent: AgentDefinition) -> str | None:
        """The profile id the agent runs on when nothing chooses another (None: ``inherit``,
        its caller's)."""
        if agent.model == INHERIT_MODEL:
            return None
        return agent.model or self.default_model or next(iter(self.models), None)

    def _validate_script(self, model: ModelProfile) -> None:
        for agent_id in model.script:
            if agent_id not in self.agents:
                raise self._error(
                    f"script for unknown agent '{agent_id}'",
                    table=f"models.{model.id}",
                    field=f"script.{agent_id}",
                )

    def _validate_agent(self, agent: AgentDefinition) -> None:
        table = f"agents.{agent.id}"
        if agent.model not in (None, INHERIT_MODEL) and agent.model not in self.models:
            raise self._error(f"unknown model '{agent.model}'", table=table, field="model")
        self._validate_agent_models(agent, table)
        for name in agent.tools.names:
            self._check_tool_reference(name, table)
        for name in agent.callable_agents.names:
            if name not in self.agents:
                raise self._error(f"unknown agent '{name}'", table=table, field="callable_agents")
        for name in agent.skills.names:
            if name not in self.skills:
                raise self._error(f"unknown skill '{name}'", table=table, field="skills")
        for name in agent.handoff.agents.names:
            if name not in self.agents and not is_glob(name):
                raise self._error(f"unknown agent '{name}'", table=table, field="handoff.agents")
        self._validate_approval_keys(agent.approval, table)
        self._validate_guardrails(agent.guardrails, table)
        self._validate_hooks(agent.hooks, table)
        source = agent.instructions_from
        if source is not None and source.server not in self.mcp_servers:
            raise self._error(
                f"unknown MCP server '{source.server}' (declare it as [mcp.{source.server}])",
                table=table,
                field="instructions_from.server",
            )

    def _validate_hooks(self, policy: HookPolicy, table: str) -> None:
        problem = hook_problem(policy, self.hooks)
        if problem is not None:
            raise self._error(problem[0], table=table, field=problem[1])

    def _validate_guardrails(self, policy: GuardrailPolicy, table: str) -> None:
        problem = guardrail_problem(policy, self.guardrails, self.tools, self.mcp_servers)
        if problem is not None:
            raise self._error(problem[0], table=table, field=problem[1])

    def _validate_agent_models(self, agent: AgentDefinition, table: str) -> None:
        problem = agent_models_problem(self.models, agent, self.own_model(agent))
        if problem is not None:
            raise self._error(problem, table=table, field="models")

    def _validate_approval_keys(self, rules: dict[str, Any], table: str) -> None:
        """Approval rules name a registered tool, a built-in, or ``agent.call:<agent>``."""
        builtins = {
            AGENT_CALL_TOOL,
            HANDOFF_TOOL,
            HUMAN_ASK_TOOL,
            MEMORY_RECALL_TOOL,
            MEMORY_STORE_TOOL,
        }
        for key in rules:
            target = key.removeprefix(f"{AGENT_CALL_TOOL}:")
            if key != target and target in self.agents:
                continue
            mcp = parse_mcp_name(key)
            if mcp is not None and mcp[0] in self.mcp_servers:
                continue  # its tools are only known once a worker lists them
            if key not in self.tools and key not in builtins:
                raise self._error(
                    f"unknown tool '{key}' (a tool name, 'agent.call', "
                    "'agent.call:<agent id>', 'agent.handoff' or 'human.ask')",
                    table=table,
                    field=f"approval.{key}",
                )

    def _check_tool_reference(self, name: str, table: str) -> None:
        """A registered tool, a glob, or ``mcp.<declared server>.<tool or glob>``.

        MCP tools are only known once a worker has listed them, so their tool part is not
        checked here; the server part must name a declared server.
        """
        mcp = parse_mcp_name(name)
        if mcp is not None and not is_glob(mcp[0]):
            if mcp[0] not in self.mcp_servers:
                raise self._error(
                    f"'{name}' names MCP server '{mcp[0]}', which is not declared "
                    f"(declare it as [mcp.{mcp[0]}])",
                    table=table,
                    field="tools",
                )
            return
        if name not in self.tools and not is_glob(name):
            raise self._error(f"unknown tool '{name}'", table=table, field="tools")

    def _validate_policy(self) -> None:
        self._validate_approval_keys(self.policy.approval, "policy")
        self._validate_guardrails(self.policy.guardrails, "policy")
        self._validate_hooks(self.policy.hooks, "policy")
        summary_model = self.policy.summary_model
        if summary_model is not None and summary_model not in self.models:
            raise self._error(
                f"summary_model '{summary_model}' is not a declared model",
                table="policy",
                field="summary_model",
            )
        for name in self.policy.tools.names:
            self._check_tool_reference(name, "policy")
        for name in self.policy.callable_agents.names:
            if name not in self.agents:
                raise self._error(
                    f"unknown agent '{name}'", table="policy", field="callable_agents"
                )
        for name in self.policy.skills.names:
            if name not in self.skills:
                raise self._error(f"unknown skill '{name}'", table="policy", field="skills")
        for name in self.policy.handoff_agents.names:
            if name not in self.agents and not is_glob(name):
                raise self._error(f"unknown agent '{name}'", table="policy", field="handoff_agents")

    def snapshot(self) -> RuntimeSnapshot:
        """Validate and freeze into a versioned, secret-free snapshot."""
        self.validate()
        default_model = self.default_model or next(iter(self.models))
        return RuntimeSnapshot(
            default_model=default_model,
            agents=dict(self.agents),
            models=dict(self.models),
            tools={spec.name: ToolSchema.of(spec) for spec in self.tools},
            skills={skill.name: skill for skill in self.skills},
            policy=self.policy,
            limits=self.limits,
            guardrails={spec.name: GuardrailSchema.of(spec) for spec in self.guardrails},
        ).with_version()


__all__ = [
    "AGENT_AWAIT_TOOL",
    "AGENT_CALL_TOOL",
    "AGENT_CANCEL_TOOL",
    "AGENT_SPAWN_TOOL",
    "AGENT_STATUS_TOOL",
    "HANDOFF_TOOL",
    "HUMAN_ASK_TOOL",
    "MEMORY_RECALL_TOOL",
    "MEMORY_STORE_TOOL",
    "SLEEP_TOOL",
    "SLEEP_TOOLS",
    "SPAWN_TOOLS",
    "WAKE_AT_TOOL",
    "AgentNotFoundError",
    "GuardrailSchema",
    "McpServerTools",
    "McpToolRef",
    "ModelNotAllowedError",
    "RuntimeConfig",
    "RuntimeSnapshot",
    "ToolSchema",
]
