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
HOOK_STAGES = (
    "before_model_call",
    "after_model_call",
    "before_tool_call",
    "after_tool_call",
    "on_run_start",
    "on_run_end",
)


class HookPolicy(FrozenModel):
    """Hooks by stage (names of registered hooks, run in this order)."""

    #: Inside the model-call activity, on the request about to go to the provider (every
    #: attempt, compaction summaries excluded): may rewrite its messages and tools (e.g.
    #: redact), add metadata (in the `model_started` event) or refuse (the run fails).
    before_model_call: GuardrailNames = ()
    #: Inside the model-call activity, on the answer before it is stored (every attempt):
    #: audit only (it has already streamed to watchers); may add metadata (in the
    #: `model_completed` event) or refuse (the run fails, the answer is not kept).
    after_model_call: GuardrailNames = ()
    #: Inside the tool activity, before the tool runs: may rewrite the arguments or refuse
    #: (the model sees the refusal; the tool never runs).
    before_tool_call: GuardrailNames = ()
    #: Inside the tool activity, on a successful result before it is stored and shown to the
    #: model: may rewrite it (e.g. redact).
    after_tool_call: GuardrailNames = ()
    #: Inside `prepare_run`, before the run is recorded as running: may refuse (the run fails
    #: `hook_refused` before any model call).
    on_run_start: GuardrailNames = ()
    #: Inside `finish_run`, as the run's end is stored (at least once: the step may run again):
    #: audit only; a hook's error is an event, never blocks the end.
    on_run_end: GuardrailNames = ()

    @property
    def empty(self) -> bool:
        return not any(getattr(self, stage) for stage in HOOK_STAGES)

    def names(self) -> list[tuple[str, str]]:
        return [(stage, name) for stage in HOOK_STAGES for name in getattr(self, stage)]


def stage_names(first: HookPolicy, then: HookPolicy, stage: str) -> GuardrailNames:
    """The hooks of ``stage`` in the order they run (``first``'s, then ``then``'s)."""
    names: GuardrailNames = merged(getattr(first, stage), getattr(then, stage))
    return names


__all__ = ["HOOK_STAGES", "HookPolicy", "stage_names"]
