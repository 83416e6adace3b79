"""`ToolSpec`: one tool's schema, function and limits, and the rules on tool names."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from otherone.parts import returns_images
from otherone.tools.calls import _describe_validation_error, _to_json, parse_arguments
from otherone.tools.context import ToolContext
from otherone.tools.docstrings import _docstring_arguments
from otherone.tools.errors import ToolError
from otherone.tools.schema import _build_arguments_model
from otherone.tools.signature import _tool_parameters

#: Tool names: a provider-safe first character, then letters, digits, ``_``, ``.`` and ``-``.
#: Dots allow namespacing (``mcp.github.search``); provider adapters encode them on the wire.
TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,63}$"

#: Names of the runtime's built-in tools; a user tool may never shadow them.
RESERVED_TOOL_NAMES = frozenset(
    {
        "agent.call",
        "agent.handoff",
        "agent.spawn",
        "agent.await",
        "agent.status",
        "agent.cancel",
        "memory.recall",
        "memory.store",
        "human.ask",
        "time.sleep",
        "time.wake_at",
        "ui.set_state",
    }
)

#: When a call needs a person's approval: ``"always"``, ``"never"``, or a predicate over the
#: validated arguments (keyword name -> value), evaluated on a worker, never in a workflow.
Approval = Literal["always", "never"] | Callable[[dict[str, Any]], bool]

DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """Immutable description of one registered tool: its schema, its function and its limits.

    Build it with :func:`tool`. It is callable like the original function, so decorated tools stay
    directly testable.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    is_async: bool
    context_parameter: str | None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    arguments_model: type[BaseModel] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )
    approval: Approval = "never"
    #: How long a person has to decide (None: until the run's deadline), and what then happens.
    approval_timeout_seconds: float | None = None
    approval_on_timeout: Literal["deny", "fail"] = "deny"
    #: Guardrails (names) on every call's arguments, after the policy's and the agent's.
    guardrails: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Derive the validating model when a spec is built by hand rather than by ``tool()``."""
        if self.arguments_model is None:
            parameters = _tool_parameters(self.name, self.function)
            docs = _docstring_arguments(inspect.getdoc(self.function) or "")
            model = _build_arguments_model(self.name, parameters, docs)
            object.__setattr__(self, "arguments_model", model)

    @property
    def approval_mode(self) -> Literal["always", "never", "predicate"]:
        """The approval rule as data (what a runtime snapshot records)."""
        return "predicate" if callable(self.approval) else self.approval

    def needs_approval(self, arguments: Mapping[str, Any] | str | None) -> bool:
        """Whether this call needs a person's yes (evaluated on a worker, outside workflows).

        Arguments that do not validate never run, so they need no approval; a predicate that
        raises asks for one (fail safe).
        """
        if not callable(self.approval):
            return self.approval == "always"
        try:
            kwargs = self.validate_arguments(arguments)
        except ToolError:
            return False
        try:
            return bool(self.approval(kwargs))
        except Exception:
            return True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the undecorated function, so decorated tools remain ordinary functions."""
        return self.function(*args, **kwargs)

    def definition(self) -> dict[str, Any]:
        """The OpenAI-style function definition offered to models (a copy: safe to mutate)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    def validate_arguments(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Parse and validate model-supplied arguments into keyword arguments for the function.

        Only arguments the model actually sent are returned, so the function's own defaults apply
        to the rest exactly as in a direct call. Raises ``ToolError(INVALID_ARGUMENTS)`` naming
        every bad field, which goes back to the model so it can correct the call.
        """
        data = parse_arguments(self.name, arguments)
        model = self._model()
        try:
            validated = model.model_validate(data)
        except ValidationError as exc:
            raise ToolError.invalid_arguments(_describe_validation_error(self.name, exc)) from None
        sent = validated.model_fields_set
        return {
            field.alias or key: getattr(validated, key)
            for key, field in model.model_fields.items()
            if key in sent
        }

    async def invoke(self, arguments: Mapping[str, Any] | str | None, context: ToolContext) -> Any:
        """Validate, inject the context, run the function and return a JSON-ready result.

        Sync functions run in a worker thread so a blocking tool never stalls the event loop that
        heartbeats and runs other tool calls. ``ToolError`` and unexpected exceptions propagate
        unchanged: the activity layer classifies them.
        """
        kwargs = self.validate_arguments(arguments)
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = context
        if self.is_async:
            result = await self.function(**kwargs)
        else:
            result = await asyncio.to_thread(self.function, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        if returns_images(result):  # stored by the tool activity, then referenced
            return result
        return _to_json(self.name, result)

    def _model(self) -> type[BaseModel]:
        """The arguments model; always set after ``__post_init__``."""
        assert self.arguments_model is not None
        return self.arguments_model
