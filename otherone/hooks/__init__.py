"""Lifecycle hooks: functions on a model request before it goes to the provider, and on a tool
call before it runs and after it returned, for audit, redaction and policy.

A hook takes the call's view (`ModelCallView`, `ToolCallView`) and returns it, rewritten or
not; raising `HookRefusal` refuses the call. Hooks are registered on the worker like tools
(``RuntimeConfig(hooks=[...])``, ``[runtime] hooks`` in TOML) and named per stage, per agent
and in the runtime policy (`otherone.hook_policy`). They run inside the model-call and tool
activities, so a retried attempt runs them again and the workflow's history never depends on
them. Built-in: `otherone.hooks.builtin.redact_pii`.
"""

from __future__ import annotations

from otherone.hook_policy import HOOK_STAGES, HookPolicy
from otherone.hooks.registry import HookRegistry, load_hook, run_stage
from otherone.hooks.spec import (
    HookDefinitionError,
    HookFailed,
    HookRefusal,
    HookSpec,
    ModelAnswerView,
    ModelCallView,
    RunView,
    ToolCallView,
    hook,
)

__all__ = [
    "HOOK_STAGES",
    "HookDefinitionError",
    "HookFailed",
    "HookPolicy",
    "HookRefusal",
    "HookRegistry",
    "HookSpec",
    "ModelAnswerView",
    "ModelCallView",
    "RunView",
    "ToolCallView",
    "hook",
    "load_hook",
    "run_stage",
]
