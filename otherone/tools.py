"""The tool layer: plain Python callables exposed to models as JSON-schema described functions.

A user tool is an ordinary function, sync or async, decorated with :func:`tool`. The decorator
derives the model-facing JSON schema from the type hints (and the docstring), so the schema can
never drift from the code that runs. The same pydantic model that produced the schema validates
the model's arguments, so "what the model was told" and "what is accepted" are one thing.

Tools run inside Temporal activities (not here). This module therefore does no I/O at import time,
and everything it hands back across the activity boundary is plain JSON data: activity results
travel through Temporal's payload converter, and a value that cannot be serialised there would fail
in a far less readable place.

Errors are split in two on purpose:

* :class:`ToolDefinitionError` — the tool itself is declared wrongly. Raised when the tool is
  defined or registered (worker start-up), never while a run is going, and it is a
  :class:`~otherone.errors.ConfigurationError` so start-up reports it like any other bad config.
* :class:`ToolError` — a classified failure of one call. Every kind except ``fatal`` is returned
  to the model as the tool result so it can correct itself; ``fatal`` ends the run.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import importlib
import inspect
import json
import re
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin, overload

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.fields import FieldInfo

from otherone.errors import ConfigurationError

__all__ = [
    "RESERVED_TOOL_NAMES",
    "TOOL_NAME_PATTERN",
    "Approval",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolErrorKind",
    "ToolRegistry",
    "ToolSpec",
    "load_tool",
    "tool",
]

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
    }
)

#: When a call needs a person's approval: ``"always"``, ``"never"``, or a predicate over the
#: validated arguments (keyword name -> value), evaluated on a worker, never in a workflow.
Approval = Literal["always", "never"] | Callable[[dict[str, Any]], bool]

DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_ATTEMPTS = 3

_TOOL_NAME_RE = re.compile(TOOL_NAME_PATTERN)
_ARGS_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Params)\s*:\s*$")
_ANY_SECTION_RE = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_ARG_ENTRY_RE = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")
_MAX_REPORTED_PROBLEMS = 10

# JSON-schema keys whose value maps *names* to schemas: their keys are never schema keywords.
_SCHEMA_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
# JSON-schema keys whose value is data, not a schema: never rewritten.
_SCHEMA_DATA_KEYS = frozenset({"default", "const", "enum", "examples", "required"})


# --------------------------------------------------------------------------- errors


class ToolErrorKind(StrEnum):
    """How a tool call failed; decides whether the model sees the error or the run ends."""

    RECOVERABLE = "recoverable"
    INVALID_ARGUMENTS = "invalid_arguments"
    PERMISSION_DENIED = "permission_denied"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    FATAL = "fatal"


class ToolError(Exception):
    """Raised by a tool to report a classified failure (goes back to the model unless FATAL).

    Any *other* exception escaping a tool is treated as unexpected and retried by Temporal (up to
    the tool's ``max_attempts``), so raise ``ToolError`` for failures that retrying cannot fix.
    """

    def __init__(self, message: str, kind: ToolErrorKind = ToolErrorKind.RECOVERABLE) -> None:
        super().__init__(message)
        self.message = message
        self.kind = ToolErrorKind(kind)

    def __reduce__(self) -> tuple[Any, ...]:
        """Keep ``kind`` across pickling (the default would rebuild from ``args`` only)."""
        return (type(self), (self.message, self.kind))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, kind={self.kind.value!r})"

    @classmethod
    def recoverable(cls, message: str) -> ToolError:
        """A failure the model may work around (try other input, another tool, or give up)."""
        return cls(message, ToolErrorKind.RECOVERABLE)

    @classmethod
    def invalid_arguments(cls, message: str) -> ToolError:
        """The arguments were well-typed but unacceptable; the model should fix and retry."""
        return cls(message, ToolErrorKind.INVALID_ARGUMENTS)

    @classmethod
    def permission_denied(cls, message: str) -> ToolError:
        """The caller may not do this; the model is told so instead of the run crashing."""
        return cls(message, ToolErrorKind.PERMISSION_DENIED)

    @classmethod
    def timed_out(cls, message: str) -> ToolError:
        """The tool gave up waiting on something it depends on."""
        return cls(message, ToolErrorKind.TIMED_OUT)

    @classmethod
    def cancelled(cls, message: str) -> ToolError:
        """The work was cancelled on purpose (not by the run's own cancellation)."""
        return cls(message, ToolErrorKind.CANCELLED)

    @classmethod
    def fatal(cls, message: str) -> ToolError:
        """Continuing the run makes no sense; it ends with failure code ``tool_error``."""
        return cls(message, ToolErrorKind.FATAL)


class ToolDefinitionError(ConfigurationError, ValueError):
    """A tool is declared wrongly; the message names the tool and, when relevant, the parameter.

    A ``ConfigurationError`` so worker start-up reports it like any other bad declaration, and a
    ``ValueError`` for callers that only know the standard library.
    """


# --------------------------------------------------------------------------- context


class ToolContext(BaseModel):
    """What a tool may know about the call it serves; injected into a ``ToolContext`` parameter.

    ``idempotency_key`` is stable across Temporal retries of the same call (it defaults to
    ``f"{run_id}:{tool_call_id}"``), so a tool with side effects can de-duplicate them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_call_id: str
    tool_name: str
    run_id: str
    root_run_id: str
    agent_id: str
    session_id: str
    partition_key: str
    idempotency_key: str = ""
    attempt: int = Field(default=1, ge=1)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _default_idempotency_key(cls, data: Any) -> Any:
        """Derive the key from run and call ids so every caller computes the same one."""
        if isinstance(data, Mapping) and not data.get("idempotency_key"):
            data = {**data, "idempotency_key": f"{data.get('run_id')}:{data.get('tool_call_id')}"}
        return data


# --------------------------------------------------------------------------- spec


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
        return _to_json(self.name, result)

    def _model(self) -> type[BaseModel]:
        """The arguments model; always set after ``__post_init__``."""
        assert self.arguments_model is not None
        return self.arguments_model


# --------------------------------------------------------------------------- decorator


@overload
def tool(
    func: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    allow_reserved: bool = False,
    approval: Approval = "never",
    approval_timeout_seconds: float | None = None,
    approval_on_timeout: Literal["deny", "fail"] = "deny",
) -> ToolSpec: ...


@overload
def tool(
    func: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    allow_reserved: bool = False,
    approval: Approval = "never",
    approval_timeout_seconds: float | None = None,
    approval_on_timeout: Literal["deny", "fail"] = "deny",
) -> Callable[[Callable[..., Any]], ToolSpec]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    allow_reserved: bool = False,
    approval: Approval = "never",
    approval_timeout_seconds: float | None = None,
    approval_on_timeout: Literal["deny", "fail"] = "deny",
) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
    """Turn a typed function into a :class:`ToolSpec`; usable as ``@tool`` or ``@tool(...)``.

    The description defaults to the docstring's first paragraph (a tool without one is rejected:
    the model would not know when to use it). Parameter descriptions come from a Google-style
    ``Args:`` section and from ``Annotated[..., Field(description=...)]``. ``allow_reserved`` is
    for the runtime's own built-in tools only.

    ``approval`` makes calls wait for a person: ``"always"``, ``"never"`` (default) or a
    predicate over the validated arguments, e.g. ``lambda args: args["amount"] > 100``. A person
    then has ``approval_timeout_seconds`` (None: the run's deadline) before the call is denied
    or the run fails (``approval_on_timeout``).
    """

    def decorate(function: Callable[..., Any]) -> ToolSpec:
        spec = _make_spec(
            function,
            name=name,
            description=description,
            timeout_seconds=timeout_seconds,
            max_attempts=max_attempts,
            allow_reserved=allow_reserved,
        )
        _check_approval(spec.name, approval, approval_timeout_seconds, approval_on_timeout)
        return dataclasses.replace(
            spec,
            approval=approval,
            approval_timeout_seconds=approval_timeout_seconds,
            approval_on_timeout=approval_on_timeout,
        )

    return decorate if func is None else decorate(func)


def _make_spec(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    timeout_seconds: float,
    max_attempts: int,
    allow_reserved: bool,
) -> ToolSpec:
    """Do the work of :func:`tool`: inspect, check and describe one function."""
    if isinstance(function, ToolSpec):
        function = function.function
    if not callable(function):
        raise ToolDefinitionError(f"tool {name or function!r}: {function!r} is not callable")
    tool_name = _check_name(name if name is not None else _function_name(function), allow_reserved)
    _check_limits(tool_name, timeout_seconds, max_attempts)
    doc = inspect.getdoc(function) or ""
    parameters = _tool_parameters(tool_name, function)
    model = _build_arguments_model(tool_name, parameters, _docstring_arguments(doc))
    return ToolSpec(
        name=tool_name,
        description=_tool_description(tool_name, description, doc),
        parameters=_parameters_schema(tool_name, model),
        function=function,
        is_async=_is_async(function),
        context_parameter=_context_parameter(tool_name, function),
        timeout_seconds=float(timeout_seconds),
        max_attempts=max_attempts,
        arguments_model=model,
    )


def _check_approval(
    name: str, approval: Any, timeout_seconds: float | None, on_timeout: Any
) -> None:
    """An approval rule is "always", "never" or a callable; its timeout positive and finite."""
    if not callable(approval) and approval not in ("always", "never"):
        raise ToolDefinitionError(
            f"tool {name!r}: approval must be 'always', 'never' or a predicate over the arguments"
        )
    if timeout_seconds is not None and not (0 < timeout_seconds < float("inf")):
        raise ToolDefinitionError(f"tool {name!r}: approval_timeout_seconds must be positive")
    if on_timeout not in ("deny", "fail"):
        raise ToolDefinitionError(f"tool {name!r}: approval_on_timeout must be 'deny' or 'fail'")


def _function_name(function: Callable[..., Any]) -> str:
    """The default tool name; objects without ``__name__`` (partials) must be given one."""
    name = getattr(function, "__name__", None)
    if not isinstance(name, str):
        raise ToolDefinitionError(f"tool {function!r}: has no __name__; pass name=...")
    return name


def _check_name(name: str, allow_reserved: bool = False) -> str:
    """Reject names providers cannot carry and names that would shadow built-in tools."""
    if not isinstance(name, str) or not _TOOL_NAME_RE.fullmatch(name):
        raise ToolDefinitionError(f"tool {name!r}: invalid name, must match {TOOL_NAME_PATTERN}")
    if name in RESERVED_TOOL_NAMES and not allow_reserved:
        raise ToolDefinitionError(f"tool {name!r}: the name is reserved for a built-in tool")
    return name


def _check_limits(name: str, timeout_seconds: float, max_attempts: int) -> None:
    """Catch limits Temporal would reject later, when the first call is already running."""
    if not timeout_seconds > 0:
        raise ToolDefinitionError(f"tool {name!r}: timeout_seconds must be > 0")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ToolDefinitionError(f"tool {name!r}: max_attempts must be an integer >= 1")


def _is_async(function: Callable[..., Any]) -> bool:
    """Whether calling the function returns a coroutine (also for objects with async __call__)."""
    if inspect.iscoroutinefunction(function):
        return True
    return inspect.iscoroutinefunction(getattr(function, "__call__", None))  # noqa: B004


def _tool_description(name: str, explicit: str | None, doc: str) -> str:
    """The explicit description, else the docstring's first paragraph; one is required."""
    text = (explicit or "").strip() or _first_paragraph(doc)
    if not text:
        raise ToolDefinitionError(
            f"tool {name!r}: missing description; add a docstring or pass description=..."
        )
    return text


def _first_paragraph(doc: str) -> str:
    """The docstring summary, unwrapped into one line; empty if it opens with a section."""
    paragraph = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    lines = [line.strip() for line in paragraph.splitlines()]
    if not lines or _ANY_SECTION_RE.match(lines[0]):
        return ""
    return " ".join(line for line in lines if line)


def _docstring_arguments(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section (continuation lines joined)."""
    descriptions: dict[str, str] = {}
    lines = iter(doc.splitlines())
    for line in lines:
        if _ARGS_SECTION_RE.match(line.strip()):
            _read_args_section(lines, descriptions)
    return descriptions


def _read_args_section(lines: Iterator[str], descriptions: dict[str, str]) -> None:
    """Consume the indented entries after an ``Args:`` header, up to the next dedent."""
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            return
        entry = _ARG_ENTRY_RE.match(line.strip())
        if entry and (entry_indent is None or indent <= entry_indent):
            entry_indent, current = indent, entry["name"]
            descriptions[current] = entry["text"].strip()
        elif current is not None:
            descriptions[current] = f"{descriptions[current]} {line.strip()}".strip()


# --------------------------------------------------------------------------- signature


def _signature(name: str, function: Callable[..., Any]) -> inspect.Signature:
    """The signature with string annotations evaluated (``from __future__ import annotations``)."""
    try:
        return inspect.signature(function, eval_str=True)
    except Exception as exc:
        raise ToolDefinitionError(f"tool {name!r}: cannot read its signature: {exc}") from exc


def _tool_parameters(name: str, function: Callable[..., Any]) -> list[inspect.Parameter]:
    """The model-facing parameters: every parameter except the injected ``ToolContext``."""
    parameters = []
    for parameter in _signature(name, function).parameters.values():
        _check_parameter(name, parameter)
        if not _is_context_annotation(parameter.annotation):
            parameters.append(parameter)
    return parameters


def _check_parameter(name: str, parameter: inspect.Parameter) -> None:
    """Only named, annotated parameters can be described to a model and passed by keyword."""
    where = f"tool {name!r}: parameter {parameter.name!r}"
    if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
        raise ToolDefinitionError(f"{where}: *args/**kwargs cannot be described as JSON schema")
    if parameter.kind is parameter.POSITIONAL_ONLY:
        raise ToolDefinitionError(f"{where}: positional-only parameters are not supported")
    if parameter.annotation is parameter.empty:
        raise ToolDefinitionError(f"{where}: missing type annotation")


def _context_parameter(name: str, function: Callable[..., Any]) -> str | None:
    """The name of the parameter annotated ``ToolContext`` (any name), if there is one."""
    found = [
        parameter.name
        for parameter in _signature(name, function).parameters.values()
        if _is_context_annotation(parameter.annotation)
    ]
    if len(found) > 1:
        raise ToolDefinitionError(f"tool {name!r}: more than one ToolContext parameter: {found}")
    return found[0] if found else None


def _is_context_annotation(annotation: Any) -> bool:
    """``ToolContext``, ``ToolContext | None`` or an ``Annotated`` form of either."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_context_annotation(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return len(members) == 1 and _is_context_annotation(members[0])
    return isinstance(annotation, type) and issubclass(annotation, ToolContext)


# --------------------------------------------------------------------------- schema


def _build_arguments_model(
    name: str, parameters: list[inspect.Parameter], docs: Mapping[str, str]
) -> type[BaseModel]:
    """One pydantic model for all parameters: it both produces the schema and validates calls.

    Fields get neutral internal names and the parameter name as alias, so parameters such as
    ``json``, ``schema`` or ``_private`` cannot clash with ``BaseModel`` attributes.
    """
    fields: dict[str, Any] = {}
    for index, parameter in enumerate(parameters):
        _check_schema_able(name, parameter)
        fields[f"arg{index}"] = (parameter.annotation, _field_info(parameter, docs))
    try:
        return create_model(f"{name}.arguments", __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {name!r}: cannot build its arguments model: {exc}"
        ) from exc


def _field_info(parameter: inspect.Parameter, docs: Mapping[str, str]) -> FieldInfo:
    """Alias, default and (unless ``Annotated`` already gives one) the docstring description."""
    default = ... if parameter.default is parameter.empty else parameter.default
    description = docs.get(parameter.name)
    if description and not _has_annotated_description(parameter.annotation):
        info: FieldInfo = Field(default, alias=parameter.name, description=description)
        return info
    info = Field(default, alias=parameter.name)
    return info


def _has_annotated_description(annotation: Any) -> bool:
    """Whether ``Annotated[..., Field(description=...)]`` already describes the parameter."""
    if get_origin(annotation) is not Annotated:
        return False
    return any(isinstance(meta, FieldInfo) and meta.description for meta in get_args(annotation))


def _check_schema_able(name: str, parameter: inspect.Parameter) -> None:
    """Fail at definition time, naming the parameter, if its type has no JSON schema."""
    try:
        TypeAdapter(parameter.annotation).json_schema()
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {name!r}: parameter {parameter.name!r} has type {parameter.annotation!r}, "
            f"which cannot be described as JSON schema: {exc}"
        ) from exc


def _parameters_schema(name: str, model: type[BaseModel]) -> dict[str, Any]:
    """The model-facing schema: an object with properties, required and no extra properties."""
    try:
        raw = _strip_titles(model.model_json_schema(by_alias=True))
    except Exception as exc:
        raise ToolDefinitionError(f"tool {name!r}: cannot produce a JSON schema: {exc}") from exc
    schema: dict[str, Any] = {
        "type": "object",
        "properties": raw.get("properties", {}),
        "required": raw.get("required", []),
        "additionalProperties": False,
    }
    if "$defs" in raw:
        schema["$defs"] = raw["$defs"]
    return schema


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's generated ``title`` keywords: noise for a model, and tokens on every call.

    Property names and data (defaults, enums) are left alone even when they are spelled "title".
    """
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_NAME_MAPS and isinstance(value, dict):
            cleaned[key] = {member: _strip_titles(sub) for member, sub in value.items()}
        elif key in _SCHEMA_DATA_KEYS:
            cleaned[key] = value
        else:
            cleaned[key] = _strip_titles(value)
    return cleaned


# --------------------------------------------------------------------------- calls


def parse_arguments(name: str, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """A tool call's arguments as an object: a mapping, or the raw JSON text a model produced
    (blank or ``null`` means none); anything else is `ToolError` (``invalid_arguments``)."""
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ToolError.invalid_arguments(
            f"invalid arguments for tool {name!r}: not valid JSON ({exc})"
        ) from None
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise ToolError.invalid_arguments(
            f"invalid arguments for tool {name!r}: expected a JSON object, "
            f"got {type(parsed).__name__}"
        )
    return parsed


def _describe_validation_error(name: str, error: ValidationError) -> str:
    """One line per problem, each naming the field path, so the model can fix its call."""
    problems = []
    for item in error.errors(include_url=False)[:_MAX_REPORTED_PROBLEMS]:
        location = ".".join(str(part) for part in item["loc"]) or "(arguments)"
        problems.append(f"{location}: {item['msg']}")
    more = error.error_count() - len(problems)
    if more > 0:
        problems.append(f"... and {more} more")
    return f"invalid arguments for tool {name!r}: " + "; ".join(problems)


@cache
def _result_adapter() -> TypeAdapter[Any]:
    """Built lazily: keeps import cheap and side-effect free."""
    return TypeAdapter(Any)


def _to_json(name: str, result: Any) -> Any:
    """Plain JSON data for Temporal's payload converter (models, dataclasses, enums, dates...).

    A result that cannot be serialised is a bug in the tool that retrying will not fix: FATAL.
    """
    try:
        data = _result_adapter().dump_python(result, mode="json")
        json.dumps(data, allow_nan=False)
    except Exception as exc:
        raise ToolError.fatal(
            f"tool {name!r} returned a result that is not JSON-serialisable "
            f"({type(result).__name__}): {exc}"
        ) from exc
    return data


# --------------------------------------------------------------------------- registry


def _as_spec(candidate: ToolSpec | Callable[..., Any]) -> ToolSpec:
    """Registries accept ready specs and plain functions alike."""
    return candidate if isinstance(candidate, ToolSpec) else tool(candidate)


class ToolRegistry:
    """The user tools a worker can run, by name. Built-in (reserved) names are never accepted."""

    def __init__(self, tools: Iterable[ToolSpec | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, ToolSpec] = {}
        for candidate in tools:
            self.register(candidate)

    def register(self, tool: ToolSpec | Callable[..., Any]) -> ToolSpec:
        """Add a tool; a duplicate or reserved name is a configuration error, not an override."""
        spec = _as_spec(tool)
        if spec.name in RESERVED_TOOL_NAMES:
            raise ToolDefinitionError(
                f"tool {spec.name!r}: the name is reserved for a built-in tool"
            )
        if spec.name in self._tools:
            raise ToolDefinitionError(f"tool {spec.name!r}: a tool with this name is registered")
        self._tools[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec | None:
        """The tool with this name, or ``None`` (the caller then answers: permission denied)."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """All registered names, sorted, so snapshots and prompts are deterministic."""
        return sorted(self._tools)

    def definitions(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Model-facing definitions in sorted name order (all, or the given names).

        Unknown names raise ``KeyError``: filtering by policy is the caller's job, and silently
        dropping a tool would hide a configuration mistake.
        """
        selected = self.names() if names is None else sorted(set(names))
        unknown = [name for name in selected if name not in self._tools]
        if unknown:
            raise KeyError(f"unknown tools: {', '.join(unknown)}")
        return [self._tools[name].definition() for name in selected]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter([self._tools[name] for name in self.names()])


# --------------------------------------------------------------------------- loading


def load_tool(reference: str) -> ToolSpec:
    """Import a tool from ``"package.module:attribute"`` (attribute may be dotted).

    This is how configuration names tools, so every failure says which reference was wrong.
    """
    module_name, attribute = _split_reference(reference)
    target = _resolve_attribute(reference, _import_module(reference, module_name), attribute)
    if isinstance(target, ToolSpec):
        return target
    if not callable(target):
        raise ToolDefinitionError(
            f"tool reference {reference!r}: {type(target).__name__} object is not callable"
        )
    try:
        return _as_spec(target)
    except ToolDefinitionError as exc:
        raise ToolDefinitionError(f"tool reference {reference!r}: {exc.message}") from exc


def _split_reference(reference: str) -> tuple[str, str]:
    """Check the ``module:attribute`` shape before importing anything."""
    module_name, separator, attribute = (
        reference.partition(":") if isinstance(reference, str) else ("", "", "")
    )
    if not separator or not module_name.strip() or not attribute.strip() or ":" in attribute:
        raise ToolDefinitionError(
            f"tool reference {reference!r}: expected the form 'package.module:attribute'"
        )
    return module_name.strip(), attribute.strip()


def _import_module(reference: str, module_name: str) -> types.ModuleType:
    """Import the module, reporting a missing or broken one against the reference."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ToolDefinitionError(f"tool reference {reference!r}: {exc}") from exc
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool reference {reference!r}: importing {module_name!r} failed: {exc!r}"
        ) from exc


def _resolve_attribute(reference: str, module: types.ModuleType, attribute: str) -> Any:
    """Follow a possibly dotted attribute path inside the module."""
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ToolDefinitionError(
                f"tool reference {reference!r}: {module.__name__!r} has no attribute {attribute!r}"
            ) from None
    return target
