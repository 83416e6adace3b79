"""Which model profile answers an agent's turns: its own, one a request chooses among those the
agent allows (`AgentDefinition.models`), and the profiles that answer a turn its own could not
(`ModelProfile.fallbacks`).

Pure functions over the declared profiles, shared by the configuration's checks
(`RuntimeConfig.validate`), the snapshot (`RuntimeSnapshot.resolve_model`, `model_chain`) and
the clients that refuse a request before it starts (`check_against_config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # clients check requests without loading the definitions
    from otherone.definitions import AgentDefinition, ModelProfile


class ModelNotAllowedError(ValueError):
    """A request chose a model its agent does not allow (`AgentDefinition.models`)."""


def allowed_models(agent: AgentDefinition, own: str) -> tuple[str, ...]:
    """The profiles a request may choose for ``agent``, given its own (resolved) model: that
    one first, then its ``models``."""
    return (own, *(name for name in agent.models if name != own))


def model_choice_problem(agent: AgentDefinition, requested: str, own: str) -> str | None:
    """Why a request may not run ``agent`` on ``requested`` (None: it may), given its own
    (resolved) model."""
    allowed = allowed_models(agent, own)
    if requested in allowed:
        return None
    return (
        f"model '{requested}' is not allowed for agent '{agent.id}' (allowed: "
        f"{', '.join(allowed)}); list it in the agent's models to allow it"
    )


def chosen_model(
    agent: AgentDefinition,
    own: ModelProfile,
    requested: str | None,
    models: Mapping[str, ModelProfile],
) -> ModelProfile:
    """The profile the agent runs on: ``requested`` when it allows it (its own, or one of its
    ``models``), its ``own`` when nothing is requested; `ModelNotAllowedError` otherwise."""
    if requested is None or requested == own.id:
        return own
    problem = model_choice_problem(agent, requested, own.id)
    chosen = models.get(requested)
    if problem is not None or chosen is None:
        raise ModelNotAllowedError(problem or f"model '{requested}' is not declared")
    return chosen


def model_chain(models: Mapping[str, ModelProfile], profile: ModelProfile) -> list[ModelProfile]:
    """``profile``, then the profiles that answer a turn it could not, in order: each of its
    fallbacks followed by that one's own (depth first), each profile once."""
    chain: list[ModelProfile] = []

    def visit(current: ModelProfile) -> None:
        if any(seen.id == current.id for seen in chain):
            return
        chain.append(current)
        for name in current.fallbacks:
            fallback = models.get(name)
            if fallback is not None:
                visit(fallback)

    visit(profile)
    return chain


def fallbacks_problem(models: Mapping[str, ModelProfile], profile: ModelProfile) -> str | None:
    """Why ``profile``'s ``fallbacks`` cannot be (None: they can): an undeclared profile, or
    a chain of fallbacks that comes back to it (itself included)."""
    for name in profile.fallbacks:
        if name not in models:
            return f"unknown model '{name}' (fallbacks name declared model profiles)"
    cycle = _cycle(models, profile.id)
    if cycle is None:
        return None
    if len(cycle) == 2:
        return f"profile '{profile.id}' cannot be its own fallback"
    return "a cycle of fallbacks: " + " -> ".join(cycle)


def agent_models_problem(
    models: Mapping[str, ModelProfile], agent: AgentDefinition, own: str | None
) -> str | None:
    """Why the agent's ``models`` cannot be (None: they can): an undeclared profile, or its
    own model (``own``; None: ``inherit``, its caller's) left out."""
    for name in agent.models:
        if name not in models:
            return f"unknown model '{name}'"
    if agent.models and own is not None and own not in agent.models:
        return (
            f"must include the agent's own model '{own}' (a request may choose among these, "
            "and its own model is one of them)"
        )
    return None


def _cycle(models: Mapping[str, ModelProfile], start: str) -> list[str] | None:
    """A chain of fallbacks from ``start`` that comes back to it (its ids, ``start`` first and
    last), or None."""

    def walk(current: str, path: list[str]) -> list[str] | None:
        profile = models.get(current)
        for name in profile.fallbacks if profile is not None else ():
            if name == start:
                return [*path, name]
            if name not in path:
                found = walk(name, [*path, name])
                if found is not None:
                    return found
        return None

    return walk(start, [start])
