"""`GuardrailPolicy`: which guardrails check an agent's runs, declared per agent and in the
runtime policy (Python and TOML). Pure data: the functions themselves are registered on the
worker (`otherone.guardrails`), like tools, and named here.

The runtime policy's guardrails run first, then the agent's (a name in both runs once). Modes
left unset (None) on an agent take the runtime policy's, then the defaults below.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from otherone.run_types import FrozenModel

#: A guardrail's name: like a tool's (letters, digits, ``_``, ``.``, ``-``).
GUARDRAIL_NAME_PATTERN = r"^[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,63}$"
GuardrailName = Annotated[str, StringConstraints(pattern=GUARDRAIL_NAME_PATTERN)]
GuardrailNames = tuple[GuardrailName, ...]

#: Input guardrails run ``before`` the model call (a trip bills no model call) or in
#: ``parallel`` with it (a trip cancels it).
InputMode = Literal["before", "parallel"]
#: A tripped output guardrail fails the run, or asks the model for another answer (taking one
#: of the run's ``output_retries``; none left: the run fails).
OutputTrip = Literal["fail", "retry"]
#: A tripped tool guardrail turns the call into a refusal the model sees (a tripped result
#: guardrail: the result is withheld from it), or fails the run.
ToolTrip = Literal["refuse", "fail"]

DEFAULT_INPUT_MODE: InputMode = "before"
DEFAULT_OUTPUT_TRIP: OutputTrip = "fail"
DEFAULT_TOOL_TRIP: ToolTrip = "refuse"


class GuardrailPolicy(FrozenModel):
    """Guardrails by where they check: the run's input, its final answer, its tool calls."""

    #: On a root's input and every user message the run takes, before its model sees them.
    input: GuardrailNames = ()
    #: On the run's final answer (roots and children), after its result contract passed.
    output: GuardrailNames = ()
    #: On the arguments of every tool call, before the tool runs.
    tool: GuardrailNames = ()
    #: On the arguments of one tool's calls (tool name -> guardrails), after ``tool``'s.
    tools: dict[Annotated[str, StringConstraints(min_length=1, max_length=130)], GuardrailNames] = (
        Field(default_factory=dict)
    )
    #: On the result of every tool call, after the tool ran and before the model sees it.
    tool_result: GuardrailNames = ()
    #: On the results of one tool's calls (tool name -> guardrails), after ``tool_result``'s.
    tool_results: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=130)], GuardrailNames
    ] = Field(default_factory=dict)
    input_mode: InputMode | None = None
    on_output_trip: OutputTrip | None = None
    on_tool_trip: ToolTrip | None = None

    @property
    def empty(self) -> bool:
        return not (
            self.input
            or self.output
            or self.tool
            or self.tools
            or self.tool_result
            or self.tool_results
        )

    def names(self) -> list[tuple[str, str]]:
        """Every guardrail named, with the field naming it (for error messages)."""
        named = [
            (field, name) for field in ("input", "output", "tool") for name in getattr(self, field)
        ]
        named += [(f"tools.{tool}", name) for tool, names in self.tools.items() for name in names]
        return named


def merged(first: GuardrailNames, then: GuardrailNames) -> GuardrailNames:
    """``first``'s names, then ``then``'s not already in it (order kept)."""
    return (*first, *(name for name in then if name not in first))


__all__ = [
    "DEFAULT_INPUT_MODE",
    "DEFAULT_OUTPUT_TRIP",
    "DEFAULT_TOOL_TRIP",
    "GUARDRAIL_NAME_PATTERN",
    "GuardrailName",
    "GuardrailNames",
    "GuardrailPolicy",
    "InputMode",
    "OutputTrip",
    "ToolTrip",
    "merged",
]
