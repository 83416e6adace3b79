"""`HookPolicy`: which lifecycle hooks an agent's model and tool calls go through, declared per
agent and in the runtime policy (Python and TOML). Pure data: the functions are registered on
the worker (`otherone.hooks`) and named here.

Order: the runtime policy's hooks first, then the agent's (a name in both runs once), each one
given what the one before returned.
"""

from __future__ import annotations

from otherone.guardrail_policy import GuardrailNames, merged
from otherone.run_types import FrozenModel

#: The stages a hook can be declared for.
HOOK_STAGES = ("before_model_call", "before_tool_call", "after_tool_call")


class HookPolicy(FrozenModel):
    """Hooks by stage (names of registered hooks, run in this order)."""

    #: Inside the model-call activity, on the request about to go to the provider (every
    #: attempt, compaction summaries excluded): may rewrite its messages and tools (e.g.
    #: redact), add metadata (in the `model_started` event) or refuse (the run fails).
    before_model_call: GuardrailNames = ()
    #: Inside the tool activity, before the tool runs: may rewrite the arguments or refuse
    #: (the model sees the refusal; the tool never runs).
    before_tool_call: GuardrailNames = ()
    #: Inside the tool activity, on a successful result before it is stored and shown to the
    #: model: may rewrite it (e.g. redact).
    after_tool_call: GuardrailNames = ()

    @property
    def empty(self) -> bool:
        return not (self.before_model_call or self.before_tool_call or self.after_tool_call)

    def names(self) -> list[tuple[str, str]]:
        return [(stage, name) for stage in HOOK_STAGES for name in getattr(self, stage)]


def stage_names(first: HookPolicy, then: HookPolicy, stage: str) -> GuardrailNames:
    """The hooks of ``stage`` in the order they run (``first``'s, then ``then``'s)."""
    names: GuardrailNames = merged(getattr(first, stage), getattr(then, stage))
    return names


__all__ = ["HOOK_STAGES", "HookPolicy", "stage_names"]
