"""What a declared runtime's guardrails and hooks must satisfy (`RuntimeConfig.validate`), and
what a snapshot keeps of a guardrail (`GuardrailSchema`)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from otherone.guardrail_policy import GuardrailPolicy
from otherone.guardrails import GuardrailRegistry, GuardrailSpec
from otherone.hook_policy import HookPolicy
from otherone.hooks import HookRegistry
from otherone.mcp_servers import McpServer, is_glob, parse_mcp_name
from otherone.tools import ToolRegistry

#: A problem found: (message, field inside the table).
Problem = tuple[str, str]


class GuardrailSchema(BaseModel):
    """What a run needs to know of a guardrail: how its activity is run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_seconds: float
    max_attempts: int

    @classmethod
    def of(cls, spec: GuardrailSpec) -> GuardrailSchema:
        return cls(timeout_seconds=spec.timeout_seconds, max_attempts=spec.max_attempts)


def guardrail_problem(
    policy: GuardrailPolicy,
    guardrails: GuardrailRegistry,
    tools: ToolRegistry,
    mcp_servers: Mapping[str, McpServer],
) -> Problem | None:
    """Every guardrail named is registered; every tool named is one an agent could call (a
    registered tool, a glob, or a declared MCP server's tool)."""
    for field, name in policy.names():
        if name not in guardrails:
            known = ", ".join(guardrails.names()) or "none registered"
            return f"unknown guardrail '{name}' (registered: {known})", f"guardrails.{field}"
    for field in ("tools", "tool_results"):
        for tool_name in getattr(policy, field):
            mcp = parse_mcp_name(tool_name)
            if mcp is not None and mcp[0] in mcp_servers:
                continue
            if tool_name not in tools and not is_glob(tool_name):
                return f"unknown tool '{tool_name}'", f"guardrails.{field}.{tool_name}"
    return None


def hook_problem(policy: HookPolicy, hooks: HookRegistry) -> Problem | None:
    """Every hook named is registered."""
    for stage, name in policy.names():
        if name not in hooks:
            known = ", ".join(hooks.names()) or "none registered"
            return f"unknown hook '{name}' (registered: {known})", f"hooks.{stage}"
    return None
