"""The pluggable agent-call authorizer: a worker-side hook that may deny a call or a handoff.

Configured on the worker (`build_worker(..., authorizer=...)`). It judges every way one agent
reaches another: `agent.call` and `agent.spawn` (inside the activity that checks the call, after
the static checks — existence, policy, cycles, depth — passed) and `agent.handoff` (inside the
`hand_off` activity, before anything of the handoff is written; the policy and approval rules
were checked before). `CallerView.action` says which; a handoff's request is a
`HandoffRequest`, an `AgentCallRequest` whose ``task`` is the handing agent's message (empty
when it gave none), so an authorizer written for agent calls judges handoffs too, unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from otherone.definitions import AgentDefinition, HandoffContext
from otherone.runs import AgentCallRequest

#: What the calling agent asks for: a call it waits for, one it spawns, or a handoff.
AgentAction = Literal["call", "spawn", "handoff"]


@dataclass(frozen=True)
class CallerView:
    """What an authorizer may know about the calling run."""

    run_id: str
    root_run_id: str
    agent_id: str
    depth: int
    partition_key: str
    session_id: str
    ancestry: tuple[str, ...]
    #: `agent.call` (or a trusted call), `agent.spawn` or `agent.handoff`.
    action: AgentAction = "call"


class HandoffRequest(AgentCallRequest):
    """An `agent.handoff` as the authorizer sees it: ``target`` takes the conversation over;
    ``task`` is the handing agent's message for it (empty when it gave none)."""

    reason: str | None = None
    #: What the next agent will see of the conversation.
    handoff_context: HandoffContext = "full"


@dataclass(frozen=True)
class AuthorizationDecision:
    allowed: bool
    reason: str = ""

    @classmethod
    def allow(cls) -> AuthorizationDecision:
        return cls(True)

    @classmethod
    def deny(cls, reason: str) -> AuthorizationDecision:
        return cls(False, reason)


AgentCallAuthorizer = Callable[
    [CallerView, AgentDefinition, AgentCallRequest],
    Awaitable[AuthorizationDecision] | AuthorizationDecision,
]


async def decide(
    authorizer: AgentCallAuthorizer,
    caller: CallerView,
    target: AgentDefinition,
    request: AgentCallRequest,
) -> AuthorizationDecision:
    """The authorizer's decision (it may be sync or async)."""
    decision = authorizer(caller, target, request)
    if inspect.isawaitable(decision):
        decision = await decision
    return decision
