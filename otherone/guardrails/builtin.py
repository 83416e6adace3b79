"""Built-in guardrails, made by factories (each returns a `GuardrailSpec` to register).

- `no_credentials`: an input (or output) guardrail that trips on a text carrying an API key,
  token or private key (the shapes `otherone.hooks.builtin.redact_pii` redacts).
- `argument_allowlist`: a tool guardrail that trips when a tool call's argument takes a value
  not on its list (``{"pay": {"to": ["alice", "bob"]}}``).
- `agent_guardrail` / `topic_guardrail`: a check made by an agent (e.g. on a cheap model): the
  guardrail's activity runs the agent as a run of its own (same tenant, same task queue) whose
  typed answer (`AgentVerdict`) decides. The run's id follows from the check (idempotency
  key), so a retried attempt joins the same judge run instead of paying for another.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

from pydantic import BaseModel, JsonValue
from temporalio import activity

from otherone.guardrails.decorator import make_spec
from otherone.guardrails.spec import GuardrailCheck, GuardrailResult, GuardrailSpec
from otherone.hooks.builtin import PATTERNS


def _no_credentials(check: GuardrailCheck) -> GuardrailResult:
    """Trips on a text carrying a credential: it must not reach the model (or leave it)."""
    kinds = dict(PATTERNS)
    found = len(kinds["secret"].findall(check.text))
    if found:
        return GuardrailResult.trip(f"the {check.kind} carries {found} credential(s)")
    return GuardrailResult.passed()


#: Ready to name in configuration: ``"otherone.guardrails.builtin:no_credentials"``.
no_credentials = make_spec(_no_credentials, "no_credentials", 5.0, 1)

#: An agent-backed check takes longer than a function: a whole (small) agent run.
AGENT_GUARDRAIL_TIMEOUT_SECONDS = 120.0


def argument_allowlist(
    name: str, allowed: Mapping[str, Mapping[str, Collection[JsonValue]]]
) -> GuardrailSpec:
    """A tool guardrail: for each tool named, each argument named may only take the listed
    values (an argument left out passes; tools not named pass)."""
    rules = {
        tool: {arg: list(values) for arg, values in args.items()} for tool, args in allowed.items()
    }

    def check_arguments(check: GuardrailCheck) -> GuardrailResult:
        arguments = check.arguments or {}
        for argument, values in rules.get(check.tool_name or "", {}).items():
            if argument in arguments and arguments[argument] not in values:
                return GuardrailResult.trip(
                    f"argument '{argument}' of tool '{check.tool_name}' may not be "
                    f"{json.dumps(arguments[argument])} (allowed: {json.dumps(values)})",
                    {"tool": check.tool_name, "argument": argument},
                )
        return GuardrailResult.passed()

    return make_spec(check_arguments, name, 5.0, 1)


class AgentVerdict(BaseModel):
    """What a guardrail agent answers (its run's result contract)."""

    allowed: bool
    reason: str = ""


def agent_guardrail(
    name: str,
    agent_id: str,
    *,
    instructions: str = "Decide whether the text below is allowed.",
    timeout_seconds: float = AGENT_GUARDRAIL_TIMEOUT_SECONDS,
    max_attempts: int = 3,
) -> GuardrailSpec:
    """A guardrail decided by agent ``agent_id`` (declared like any agent; give it a cheap
    model and a system prompt saying what is allowed). It is asked ``instructions`` plus the
    checked text, must answer `AgentVerdict` as JSON, and ``allowed: false`` trips with its
    reason."""

    async def ask_agent(check: GuardrailCheck) -> GuardrailResult:
        verdict = await _ask(name, agent_id, instructions, check)
        if verdict.allowed:
            return GuardrailResult.passed()
        return GuardrailResult.trip(verdict.reason or f"agent '{agent_id}' refused it")

    return make_spec(ask_agent, name, timeout_seconds, max_attempts)


def topic_guardrail(
    name: str,
    agent_id: str,
    *,
    timeout_seconds: float = AGENT_GUARDRAIL_TIMEOUT_SECONDS,
    max_attempts: int = 3,
) -> GuardrailSpec:
    """An input guardrail keeping a conversation on its topics: agent ``agent_id``'s system
    prompt says which topics are allowed."""
    instructions = (
        "Decide whether the user's message below stays within the topics you allow. "
        'Answer {"allowed": true} or {"allowed": false, "reason": "<why>"}.'
    )
    return agent_guardrail(
        name,
        agent_id,
        instructions=instructions,
        timeout_seconds=timeout_seconds,
        max_attempts=max_attempts,
    )


async def _ask(name: str, agent_id: str, instructions: str, check: GuardrailCheck) -> AgentVerdict:
    """Run the judge agent as a root run of its own (joined again by a retried attempt)."""
    # Imported here: the client side is only needed on workers that run such a guardrail.
    from otherone.client.agent_client import AgentClient, build_request

    client = activity.client()
    info = activity.info()
    described = await client.get_workflow_handle(info.workflow_id or "").describe()
    agents = AgentClient(client, task_queue=described.task_queue)
    subject = check.text if check.kind != "tool" else f"{check.tool_name}({check.text})"
    request = build_request(
        entry_agent=agent_id,
        input=f"{instructions}\n\n<{check.kind}>\n{subject}\n</{check.kind}>",
        idempotency_key=f"guardrail:{name}:{check.run_id}:{check.kind}:{check.turn}:"
        f"{check.tool_call_id or ''}",
        runtime_context={"partition_key": check.partition_key},
        metadata={"guardrail": name, "checked_run_id": check.run_id},
    )
    return await agents.run(request, output_type=AgentVerdict)
