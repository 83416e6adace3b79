"""The pluggable agent-call authorizer: a worker-side hook that may deny a call.

Configured on the worker (`build_worker(..., authorizer=...)`); it runs inside the activity that
checks a call, after the static checks (existence, policy, cycles, depth) passed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from otherone.definitions import AgentDefinition
from otherone.runs import AgentCallRequest


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
