"""`HookRegistry`: the hooks a worker can run, by name; `load_hook`: one named by
configuration as ``"package.module:attribute"``; `run_stage`: a stage's hooks in order."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from otherone.hooks.spec import (
    HookDefinitionError,
    HookFailed,
    HookRefusal,
    HookSpec,
    View,
    hook,
)


def as_spec(candidate: HookSpec | Callable[..., Any]) -> HookSpec:
    spec: HookSpec = candidate if isinstance(candidate, HookSpec) else hook(candidate)
    return spec


class HookRegistry:
    """Registered hooks by name; a duplicate name is a configuration error."""

    def __init__(self, hooks: Iterable[HookSpec | Callable[..., Any]] = ()) -> None:
        self._hooks: dict[str, HookSpec] = {}
        for candidate in hooks:
            self.register(candidate)

    def register(self, candidate: HookSpec | Callable[..., Any]) -> HookSpec:
        spec = as_spec(candidate)
        if spec.name in self._hooks:
            raise HookDefinitionError(f"hook {spec.name!r}: a hook with this name is registered")
        self._hooks[spec.name] = spec
        return spec

    def get(self, name: str) -> HookSpec | None:
        return self._hooks.get(name)

    def names(self) -> list[str]:
        return sorted(self._hooks)

    def __contains__(self, name: object) -> bool:
        return name in self._hooks


async def run_stage(registry: HookRegistry, names: Iterable[str], stage: str, view: View) -> View:
    """``view`` through the named hooks in order (each gets the previous one's result).
    Raises `HookRefusal` (a hook refused) or `HookFailed` (one raised, returned the wrong type,
    or is not registered on this worker)."""
    for name in names:
        spec = registry.get(name)
        if spec is None:
            raise HookFailed(f"hook '{name}' ({stage}) is not registered on this worker")
        try:
            view = await spec.apply(stage, view)
        except HookRefusal as refusal:
            refusal.hook = name
            raise
    return view


def load_hook(reference: str) -> HookSpec:
    """Import a hook from ``"package.module:attribute"``; every failure names it."""
    module_name, separator, attribute = reference.partition(":")
    if not separator or not module_name.strip() or not attribute.strip():
        raise HookDefinitionError(
            f"hook reference {reference!r}: expected the form 'package.module:attribute'"
        )
    try:
        target: Any = importlib.import_module(module_name.strip())
    except Exception as exc:
        raise HookDefinitionError(
            f"hook reference {reference!r}: importing {module_name!r} failed: {exc!r}"
        ) from None
    for part in attribute.strip().split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise HookDefinitionError(
                f"hook reference {reference!r}: {module_name!r} has no attribute {attribute!r}"
            ) from None
    try:
        return as_spec(target)
    except HookDefinitionError as exc:
        raise HookDefinitionError(f"hook reference {reference!r}: {exc.message}") from None
