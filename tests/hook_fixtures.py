"""Hooks the hook tests register (importable by reference for the TOML test)."""

from __future__ import annotations

import json
from typing import Any

from otherone.hooks import (
    HookRefusal,
    ModelAnswerView,
    ModelCallView,
    RunView,
    ToolCallView,
    hook,
)

#: What the guarded tool did (appended only when it really ran).
TOOL_LEDGER: list[str] = []


@hook
def mark_policy(view: ModelCallView) -> ModelCallView:
    """Runs first (declared in the runtime policy)."""
    view.metadata = {**view.metadata, "order": ["policy"]}
    return view


@hook
async def mark_agent(view: ModelCallView) -> ModelCallView:
    """Runs second (declared on the agent); sees the first one's result."""
    order = list(view.metadata.get("order") or [])  # type: ignore[arg-type]
    view.metadata = {**view.metadata, "order": [*order, "agent"]}
    return view


@hook
def refuse_model(view: ModelCallView) -> ModelCallView:
    """Refuses every model call."""
    raise HookRefusal("no model calls on Sundays")


@hook
def returns_text(view: ModelCallView) -> Any:
    """Returns the wrong type."""
    return "oops"


@hook
def cap_amount(view: ToolCallView) -> ToolCallView:
    """Rewrites a transfer over 100 to 100; refuses one to 'mallory'."""
    arguments = json.loads(view.arguments)
    if arguments.get("to") == "mallory":
        raise HookRefusal("mallory is blocked")
    arguments["amount"] = min(int(arguments.get("amount", 0)), 100)
    view.arguments = json.dumps(arguments)
    return view


#: What the run-end audit hook saw: (run id, status, model calls).
RUN_ENDS: list[tuple[str, str | None, object]] = []


@hook
def audit_answer(view: ModelAnswerView) -> ModelAnswerView:
    """Notes the answer's length; refuses one that says 'forbidden'."""
    if "forbidden" in view.text:
        raise HookRefusal("the answer says a forbidden word")
    view.metadata = {**view.metadata, "chars": len(view.text)}
    return view


@hook
def closed_on_weekends(view: RunView) -> RunView:
    """Refuses runs whose request metadata says it is the weekend."""
    if view.metadata.get("day") == "sunday":
        raise HookRefusal("closed on Sundays")
    return view


@hook
def audit_end(view: RunView) -> RunView:
    """Records every run's end."""
    usage = view.usage or {}
    RUN_ENDS.append((view.run_id, view.status, usage.get("model_calls")))
    return view


@hook
def broken_end(view: RunView) -> RunView:
    """Raises at every run's end (must never block it)."""
    raise RuntimeError("audit log unreachable")
