"""JSON Schema validation whose regular expressions cannot stall the worker.

A result contract's schema comes with the run's request (any caller, any tenant); its
``pattern``s run on the model's answer. Python's `re` backtracks: ``^(\\w+\\s?)*$`` takes
seconds on a 27-character sentence and hours on a longer one, holding the interpreter (and so
every run of the worker) meanwhile. jsonschema calls `re.search` itself, so the keywords that
match patterns (``pattern``, ``patternProperties``, ``additionalProperties`` next to
``patternProperties``) are replaced by ones that match with the `regex` module under one time
budget for the whole validation; a pattern that runs past it is reported as a mismatch that
names it. ``unevaluatedProperties`` next to ``patternProperties`` also matches patterns inside
jsonschema: such schemas are refused where contracts enter
(`otherone.result_contracts.schema_problem`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import regex
from jsonschema import validators
from jsonschema.exceptions import ValidationError

#: Seconds all the pattern matches of one validation may take together.
PATTERN_BUDGET_SECONDS = 0.5


class PatternTimeout(Exception):
    """A pattern ran past the validation's budget."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def search(self, pattern: str, text: str) -> bool:
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            return regex.search(pattern, text, timeout=left) is not None
        except TimeoutError:
            raise PatternTimeout(pattern) from None


def bounded_validator(schema: dict[str, Any], seconds: float = PATTERN_BUDGET_SECONDS) -> Any:
    """A validator for ``schema`` (its declared draft, else 2020-12) whose pattern matches
    share ``seconds``; `PatternTimeout` when they run out."""
    budget = _Budget(seconds)

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "string") and not budget.search(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(
        validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():
                if budget.search(patrn, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    def additional_properties(
        validator: Any, additional: Any, instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        properties = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extras = [
            key
            for key in instance
            if key not in properties and not any(budget.search(p, key) for p in patterns)
        ]
        if validator.is_type(additional, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], additional, path=extra)
        elif not additional and extras:
            named = ", ".join(repr(extra) for extra in sorted(extras))
            if patterns:
                yield ValidationError(
                    f"{named} do(es) not match any of the regexes: "
                    + ", ".join(repr(p) for p in sorted(patterns))
                )
            else:
                yield ValidationError(f"Additional properties are not allowed ({named} unexpected)")

    base = validators.validator_for(schema, default=validators.Draft202012Validator)
    bounded = validators.extend(  # type: ignore[no-untyped-call]
        base,
        {
            "pattern": pattern,
            "patternProperties": pattern_properties,
            "additionalProperties": additional_properties,
        },
    )
    return bounded(schema)
