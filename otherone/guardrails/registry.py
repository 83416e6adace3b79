"""`GuardrailRegistry`: the guardrails a worker can run, by name; `load_guardrail`: one named
by configuration as ``"package.module:attribute"``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from otherone.guardrails.decorator import guardrail
from otherone.guardrails.spec import GuardrailDefinitionError, GuardrailSpec


def as_spec(candidate: GuardrailSpec | Callable[..., Any]) -> GuardrailSpec:
    return candidate if isinstance(candidate, GuardrailSpec) else guardrail(candidate)


class GuardrailRegistry:
    """Registered guardrails by name; a duplicate name is a configuration error."""

    def __init__(self, guardrails: Iterable[GuardrailSpec | Callable[..., Any]] = ()) -> None:
        self._guardrails: dict[str, GuardrailSpec] = {}
        for candidate in guardrails:
            self.register(candidate)

    def register(self, candidate: GuardrailSpec | Callable[..., Any]) -> GuardrailSpec:
        spec = as_spec(candidate)
        if spec.name in self._guardrails:
            raise GuardrailDefinitionError(
                f"guardrail {spec.name!r}: a guardrail with this name is registered"
            )
        self._guardrails[spec.name] = spec
        return spec

    def get(self, name: str) -> GuardrailSpec | None:
        return self._guardrails.get(name)

    def names(self) -> list[str]:
        return sorted(self._guardrails)

    def __contains__(self, name: object) -> bool:
        return name in self._guardrails

    def __len__(self) -> int:
        return len(self._guardrails)

    def __iter__(self) -> Iterator[GuardrailSpec]:
        return iter([self._guardrails[name] for name in self.names()])


def load_guardrail(reference: str) -> GuardrailSpec:
    """Import a guardrail from ``"package.module:attribute"``; every failure names it."""
    module_name, separator, attribute = reference.partition(":")
    if not separator or not module_name.strip() or not attribute.strip():
        raise GuardrailDefinitionError(
            f"guardrail reference {reference!r}: expected the form 'package.module:attribute'"
        )
    try:
        target: Any = importlib.import_module(module_name.strip())
    except Exception as exc:
        raise GuardrailDefinitionError(
            f"guardrail reference {reference!r}: importing {module_name!r} failed: {exc!r}"
        ) from None
    for part in attribute.strip().split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise GuardrailDefinitionError(
                f"guardrail reference {reference!r}: {module_name!r} has no attribute {attribute!r}"
            ) from None
    try:
        return as_spec(target)
    except GuardrailDefinitionError as exc:
        raise GuardrailDefinitionError(
            f"guardrail reference {reference!r}: {exc.message}"
        ) from None
