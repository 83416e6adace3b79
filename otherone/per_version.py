"""What a runtime snapshot works out for one of its agents, kept per snapshot version.

Every model turn asks its snapshot for the agent's tools, handoff targets, reachable agents and
skills; their policies cannot change within a version (the version is the snapshot's content
hash: `otherone.config.RuntimeSnapshot.with_version`), so each is worked out once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from otherone.definitions import AgentDefinition

T = TypeVar("T")

#: By (version, agent id, what): the answers, as tuples (callers get lists of their own).
_KEPT: dict[tuple[str, str, str], tuple[Any, ...]] = {}
KEPT_LIMIT = 4096


class Versioned(Protocol):
    @property
    def version(self) -> str: ...

    @property
    def agents(self) -> Mapping[str, AgentDefinition]: ...


S = TypeVar("S", bound=Versioned)


def kept_per_version(
    method: Callable[[S, AgentDefinition], list[T]],
) -> Callable[[S, AgentDefinition], list[T]]:
    """``method(snapshot, agent)``, worked out once per snapshot version and agent. Only for the
    snapshot's own agent object: a changed copy of it is worked out anew every time."""
    kind = method.__name__

    @functools.wraps(method)
    def kept(snapshot: S, agent: AgentDefinition) -> list[T]:
        if not snapshot.version or snapshot.agents.get(agent.id) is not agent:
            return method(snapshot, agent)
        key = (snapshot.version, agent.id, kind)
        found = _KEPT.get(key)
        if found is None:
            if len(_KEPT) >= KEPT_LIMIT:
                _KEPT.clear()  # versions come and go with deploys: start over
            found = _KEPT[key] = tuple(method(snapshot, agent))
        return list(found)

    return kept
