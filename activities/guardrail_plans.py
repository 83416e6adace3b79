"""A run's `GuardrailPlan`: the runtime policy's guardrails, then its agent's, resolved against
the snapshot by `prepare_run` (the workflow never reads configuration)."""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from otherone.config import RuntimeSnapshot
from otherone.contracts import GuardrailPlan, GuardrailSettings
from otherone.definitions import AgentDefinition
from otherone.guardrail_policy import (
    DEFAULT_INPUT_MODE,
    DEFAULT_OUTPUT_TRIP,
    DEFAULT_TOOL_TRIP,
    GuardrailNames,
    GuardrailPolicy,
    merged,
)


def guardrail_plan(
    snapshot: RuntimeSnapshot, agent: AgentDefinition, tool_names: Iterable[str]
) -> GuardrailPlan | None:
    """The plan's guardrails, or None when the run has none (its plan stays as before)."""
    runtime, own = snapshot.policy.guardrails, agent.guardrails
    tool_names = list(tool_names)
    declared_by_tools = {
        name: schema.guardrails
        for name in tool_names
        if (schema := snapshot.tools.get(name)) is not None and schema.guardrails
    }
    if runtime.empty and own.empty and not declared_by_tools:
        return None

    def settings(names: GuardrailNames) -> tuple[GuardrailSettings, ...]:
        return tuple(
            GuardrailSettings(
                name=name,
                timeout_seconds=snapshot.guardrails[name].timeout_seconds,
                max_attempts=snapshot.guardrails[name].max_attempts,
            )
            for name in names
        )

    every_call = merged(runtime.tool, own.tool)
    tools = {
        name: checks
        for name in tool_names
        if (
            checks := settings(
                merged(
                    merged(every_call, _for_tool(runtime, own, name, "tools")),
                    declared_by_tools.get(name, ()),
                )
            )
        )
    }
    every_result = merged(runtime.tool_result, own.tool_result)
    tool_results = {
        name: checks
        for name in tool_names
        if (checks := settings(merged(every_result, _for_tool(runtime, own, name, "tool_results"))))
    }
    return GuardrailPlan(
        input=settings(merged(runtime.input, own.input)),
        output=settings(merged(runtime.output, own.output)),
        tools=tools,
        tool_results=tool_results,
        input_mode=own.input_mode or runtime.input_mode or DEFAULT_INPUT_MODE,
        on_output_trip=own.on_output_trip or runtime.on_output_trip or DEFAULT_OUTPUT_TRIP,
        on_tool_trip=own.on_tool_trip or runtime.on_tool_trip or DEFAULT_TOOL_TRIP,
    )


def _for_tool(
    runtime: GuardrailPolicy, own: GuardrailPolicy, tool: str, field: str
) -> GuardrailNames:
    """The guardrails ``field`` declares for one tool (an entry may be a glob, ``mcp.git.*``)."""
    names: GuardrailNames = ()
    for policy in (runtime, own):
        per_tool: dict[str, GuardrailNames] = getattr(policy, field)
        for pattern, checks in per_tool.items():
            if pattern == tool or fnmatchcase(tool, pattern):
                names = merged(names, checks)
    return names
