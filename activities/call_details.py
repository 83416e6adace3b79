"""What the Web UI shows on a child run's page (its static details), written when the call is
checked: the child's agent, model profile, tools offered, limits and who called it.

Built in `prepare_call` (which holds the snapshot) and carried to the workflow in the
`CallPlan`, so the child's start command takes it from history and stays deterministic.
"""

from __future__ import annotations

from datetime import timedelta

from otherone.config import (
    AGENT_CALL_TOOL,
    HUMAN_ASK_TOOL,
    SLEEP_TOOL,
    WAKE_AT_TOOL,
    RuntimeSnapshot,
)
from otherone.contracts import PrepareCallInput
from otherone.definitions import AgentDefinition

#: Tool names listed in full up to this many; more are counted (details stay short).
MAX_LISTED_TOOLS = 20


def child_details(
    snapshot: RuntimeSnapshot, target: AgentDefinition, input: PrepareCallInput
) -> str:
    """Markdown, one fact per line, like the root's (`AgentClient._details`)."""
    profile = snapshot.resolve_model(target, input.caller_model_profile_id)
    limits = input.limits
    max_iterations = min(
        target.limits.max_iterations or limits.max_iterations_per_run,
        limits.max_iterations_per_run,
        input.request.max_iterations or limits.max_iterations_per_run,
    )
    timeout = limits.run_timeout
    if target.limits.timeout_millis is not None:
        timeout = min(timeout, timedelta(milliseconds=target.limits.timeout_millis))
    if input.request.timeout is not None:
        timeout = min(timeout, input.request.timeout)
    caller = input.caller
    lines = [
        f"**agent** `{target.id}` (version {target.version})",
        f"**model** `{profile.id}` ({profile.provider}/{profile.model})",
        f"**tools** {_tools(snapshot, target)}",
        f"**limits** max_iterations {max_iterations}, timeout {timeout.total_seconds():g} s, "
        f"depth {caller.depth + 1} of {limits.max_depth}",
        f"**called by** `{caller.agent_id}` (run `{caller.run_id}`, call `{input.call_id}`)",
        f"**root run** `{caller.root_run_id}`",
        f"**partition** `{caller.partition_key}`",
    ]
    return "  \n".join(lines)


def _tools(snapshot: RuntimeSnapshot, target: AgentDefinition) -> str:
    shown = [f"`{name}`" for name in snapshot.tool_names_for(target)]
    reachable = [agent.id for agent in snapshot.reachable_agents(target)]
    if reachable:
        shown.append(f"`{AGENT_CALL_TOOL}` ({', '.join(reachable)})")
    if target.ask_human:
        shown.append(f"`{HUMAN_ASK_TOOL}`")
    if snapshot.may_sleep(target):
        shown += [f"`{SLEEP_TOOL}`", f"`{WAKE_AT_TOOL}`"]
    if not shown:
        return "none"
    more = len(shown) - MAX_LISTED_TOOLS
    listed = ", ".join(shown[:MAX_LISTED_TOOLS])
    return listed if more <= 0 else f"{listed} and {more} more"
