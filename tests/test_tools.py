"""The tool layer: schema derivation, argument validation, invocation, registry and loading.

Uses ``from __future__ import annotations`` on purpose: tools written that way have string
annotations, which the decorator must resolve. Types used in tool signatures therefore live at
module level (string annotations are resolved against the function's globals).
"""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import threading
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from otherone.errors import ConfigurationError
from otherone.tools import (
    RESERVED_TOOL_NAMES,
    ToolContext,
    ToolDefinitionError,
    ToolError,
    ToolErrorKind,
    ToolRegistry,
    ToolSpec,
    load_tool,
    tool,
)

# --------------------------------------------------------------------------- helpers


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    city: str = "Paris"


class Person(BaseModel):
    name: str
    address: Address


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Pair:
    left: int
    right: str


class Opaque:
    """Not describable as JSON schema."""


def make_context(**overrides: Any) -> ToolContext:
    values: dict[str, Any] = {
        "tool_call_id": "call-1",
        "tool_name": "test.tool",
        "run_id": "run-1",
        "root_run_id": "root-1",
        "agent_id": "agent",
        "session_id": "session",
        "partition_key": "tenant",
    }
    return ToolContext(**{**values, **overrides})


def props(spec: ToolSpec) -> dict[str, Any]:
    properties: dict[str, Any] = spec.parameters["properties"]
    return properties


@tool
def add(a: int, b: int = 2) -> int:
    """Add two integers."""
    return a + b


@tool(name="web.search")
async def search(query: str, limit: int = 3) -> list[str]:
    """Search the web.

    Returns result titles.
    """
    await asyncio.sleep(0)
    return [f"{query}-{index}" for index in range(limit)]


@tool
def no_arguments() -> str:
    """Return a constant."""
    return "ok"


# --------------------------------------------------------------------------- schema


def test_sync_schema_has_required_defaults_and_no_extras() -> None:
    assert add.name == "add"
    assert add.description == "Add two integers."
    assert add.is_async is False
    assert add.context_parameter is None
    assert add.parameters == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 2}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert (add.timeout_seconds, add.max_attempts) == (60.0, 3)


def test_async_tool_with_dotted_name_and_first_paragraph_description() -> None:
    assert search.is_async is True
    assert search.name == "web.search"
    assert search.description == "Search the web."
    assert search.parameters["required"] == ["query"]


def test_no_arguments_schema_is_an_empty_object() -> None:
    assert no_arguments.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_definition_is_openai_style_and_a_copy() -> None:
    definition = add.definition()
    assert definition == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": add.parameters,
        },
    }
    definition["function"]["parameters"]["properties"].clear()
    assert props(add) != {}


def test_literal_optional_enum_union_and_containers() -> None:
    @tool
    def kinds(
        mode: Literal["fast", "slow"],
        color: Color,
        note: str | None = None,
        value: int | str = 0,
        tags: list[str] | None = None,
        weights: dict[str, float] | None = None,
        span: tuple[int, int] = (0, 1),
        point: Point | None = None,
    ) -> None:
        """Exercise many parameter types."""

    properties = props(kinds)
    assert properties["mode"] == {"enum": ["fast", "slow"], "type": "string"}
    assert properties["color"] == {"$ref": "#/$defs/Color"}
    assert kinds.parameters["$defs"]["Color"]["enum"] == ["red", "blue"]
    assert properties["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert properties["value"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert properties["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert properties["weights"]["anyOf"][0]["additionalProperties"] == {"type": "number"}
    assert properties["span"]["prefixItems"] == [{"type": "integer"}, {"type": "integer"}]
    point = kinds.parameters["$defs"]["Point"]
    assert point["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}
    assert kinds.parameters["required"] == ["mode", "color"]


def test_nested_pydantic_model_uses_defs_without_titles() -> None:
    @tool
    def register_person(person: Person) -> str:
        """Register a person."""
        return person.address.city

    assert props(register_person) == {"person": {"$ref": "#/$defs/Person"}}
    defs = register_person.parameters["$defs"]
    assert set(defs) == {"Person", "Address"}
    assert defs["Address"] == {
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "city": {"type": "string", "default": "Paris"},
        },
        "required": ["street"],
    }
    assert "title" not in str(register_person.parameters)


def test_property_named_title_is_kept() -> None:
    @tool
    def rename(title: str) -> str:
        """Rename a document."""
        return title

    assert props(rename) == {"title": {"type": "string"}}


def test_descriptions_from_annotated_and_docstring_args() -> None:
    @tool
    def lookup(
        city: Annotated[str, Field(description="City name, in English.")],
        days: int = 1,
        units: Literal["metric", "imperial"] = "metric",
    ) -> str:
        """Look up the weather forecast.

        Uses a public weather service.

        Args:
            city: Overridden by the Annotated description.
            days (int): How many days
                ahead to forecast.
            units: Unit system.

        Returns:
            A short summary.
        """
        return city

    properties = props(lookup)
    assert lookup.description == "Look up the weather forecast."
    assert properties["city"]["description"] == "City name, in English."
    assert properties["days"]["description"] == "How many days ahead to forecast."
    assert properties["units"]["description"] == "Unit system."


def test_explicit_description_and_limits() -> None:
    @tool(description="Explicit.", timeout_seconds=5, max_attempts=1)
    def documented() -> None:
        """Docstring."""

    assert documented.description == "Explicit."
    assert (documented.timeout_seconds, documented.max_attempts) == (5.0, 1)


def test_parameters_shadowing_basemodel_attributes_work() -> None:
    @tool
    def encode(json: str, schema: int = 0, model_config: bool = False) -> list[Any]:
        """Names that clash with pydantic BaseModel attributes."""
        return [json, schema, model_config]

    assert set(props(encode)) == {"json", "schema", "model_config"}
    assert encode.validate_arguments({"json": "x", "schema": 2}) == {"json": "x", "schema": 2}


def test_hand_built_spec_still_validates_from_the_signature() -> None:
    spec = ToolSpec(
        name="manual",
        description="Built without the decorator.",
        parameters=add.parameters,
        function=add.function,
        is_async=False,
        context_parameter=None,
    )
    assert spec.validate_arguments('{"a": 1}') == {"a": 1}
    assert "a: Field required" in _invalid(spec, "{}").message


def test_spec_is_callable_like_the_function() -> None:
    assert add(1) == 3
    assert add(a=1, b=5) == 6


# --------------------------------------------------------------------------- definition errors


def _define(func: Callable[..., Any], **options: Any) -> ToolSpec:
    return tool(func, **options)


def test_missing_description_is_rejected() -> None:
    def silent(x: int) -> int:
        return x

    with pytest.raises(ToolDefinitionError, match=r"'silent'.*description"):
        _define(silent)


def test_missing_annotation_is_rejected_naming_the_parameter() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        """Untyped."""

    with pytest.raises(ToolDefinitionError, match=r"'untyped'.*'x'.*annotation"):
        _define(untyped)


def test_var_args_and_kwargs_are_rejected() -> None:
    def star(*items: int) -> None:
        """Star args."""

    def double_star(**options: int) -> None:
        """Keyword args."""

    with pytest.raises(ToolDefinitionError, match=r"'star'.*'items'"):
        _define(star)
    with pytest.raises(ToolDefinitionError, match=r"'double_star'.*'options'"):
        _define(double_star)


def test_non_schema_type_is_rejected_naming_the_parameter() -> None:
    def opaque(thing: Opaque) -> None:
        """Takes something opaque."""

    with pytest.raises(ToolDefinitionError, match=r"'opaque'.*'thing'.*JSON schema"):
        _define(opaque)


def test_bad_limits_are_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match="timeout_seconds"):
        _define(add.function, name="slow", timeout_seconds=0)
    with pytest.raises(ToolDefinitionError, match="max_attempts"):
        _define(add.function, name="retry", max_attempts=0)


def test_definition_error_is_a_configuration_and_value_error() -> None:
    assert issubclass(ToolDefinitionError, ConfigurationError)
    assert issubclass(ToolDefinitionError, ValueError)


@pytest.mark.parametrize(
    "name", ["mcp.github.search", "a", "_private", "x-y_z.1", "9lives", "a" * 64]
)
def test_valid_names(name: str) -> None:
    assert _define(add.function, name=name).name == name


@pytest.mark.parametrize(
    "name", ["", ".hidden", "-dash", "has space", "a/b", "a" * 65, "ünïcode", "a\n", "a:b"]
)
def test_invalid_names_are_rejected(name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="invalid name"):
        _define(add.function, name=name)


def test_lambda_needs_an_explicit_name() -> None:
    with pytest.raises(ToolDefinitionError, match="invalid name"):
        _define(lambda: None, description="Anonymous.")
    assert _define(lambda: None, name="anon", description="Anonymous.").name == "anon"


@pytest.mark.parametrize("name", sorted(RESERVED_TOOL_NAMES))
def test_reserved_names_are_rejected_unless_allowed(name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="reserved"):
        _define(add.function, name=name)
    assert _define(add.function, name=name, allow_reserved=True).name == name


# --------------------------------------------------------------------------- context


@tool(name="ctx.echo")
def echo_context(message: str, meta: ToolContext) -> dict[str, Any]:
    """Echo the message with call details."""
    return {"message": message, "key": meta.idempotency_key, "agent": meta.agent_id}


def test_context_parameter_is_detected_and_hidden_from_schema() -> None:
    assert echo_context.context_parameter == "meta"
    assert set(props(echo_context)) == {"message"}
    assert echo_context.parameters["required"] == ["message"]


async def test_context_is_injected() -> None:
    result = await echo_context.invoke({"message": "hi"}, make_context())
    assert result == {"message": "hi", "key": "run-1:call-1", "agent": "agent"}


async def test_model_cannot_supply_the_context() -> None:
    with pytest.raises(ToolError) as caught:
        await echo_context.invoke({"message": "hi", "meta": {}}, make_context())
    assert caught.value.kind is ToolErrorKind.INVALID_ARGUMENTS
    assert "meta" in caught.value.message


def test_optional_context_parameter_is_detected() -> None:
    @tool
    def maybe(ctx: ToolContext | None = None) -> None:
        """Optional context."""

    assert maybe.context_parameter == "ctx"
    assert props(maybe) == {}


def test_context_defaults_and_immutability() -> None:
    context = make_context()
    assert context.idempotency_key == "run-1:call-1"
    assert (context.attempt, context.metadata) == (1, {})
    assert make_context(idempotency_key="custom").idempotency_key == "custom"
    with pytest.raises(ValueError):
        context.attempt = 2  # type: ignore[misc]
    assert make_context(attempt=3).idempotency_key == "run-1:call-1"


# --------------------------------------------------------------------------- validation


def _invalid(spec: ToolSpec, arguments: Any) -> ToolError:
    with pytest.raises(ToolError) as caught:
        spec.validate_arguments(arguments)
    assert caught.value.kind is ToolErrorKind.INVALID_ARGUMENTS
    return caught.value


def test_validation_accepts_json_strings_and_mappings() -> None:
    assert add.validate_arguments('{"a": 1}') == {"a": 1}
    assert add.validate_arguments({"a": 1, "b": 4}) == {"a": 1, "b": 4}


@pytest.mark.parametrize("empty", ["", "  ", "null", None, {}])
def test_empty_arguments_mean_no_arguments(empty: Any) -> None:
    assert no_arguments.validate_arguments(empty) == {}


def test_missing_field_is_named() -> None:
    error = _invalid(add, "{}")
    assert "'add'" in error.message
    assert "a: Field required" in error.message


def test_wrong_type_is_named() -> None:
    assert "b: Input should be a valid integer" in _invalid(add, {"a": 1, "b": "many"}).message


def test_unknown_field_is_named() -> None:
    assert "extra: Extra inputs are not permitted" in _invalid(add, {"a": 1, "extra": 1}).message


def test_nested_field_path_is_named() -> None:
    @tool
    def register_person(person: Person) -> None:
        """Register a person."""

    error = _invalid(register_person, {"person": {"name": "Ada", "address": {}}})
    assert "person.address.street: Field required" in error.message


@pytest.mark.parametrize("text", ['{"a": 1', "not json", "{'a': 1}"])
def test_malformed_json_is_invalid_arguments(text: str) -> None:
    assert "not valid JSON" in _invalid(add, text).message


@pytest.mark.parametrize("text", ["[1, 2]", '"a"', "3"])
def test_non_object_json_is_invalid_arguments(text: str) -> None:
    assert "expected a JSON object" in _invalid(add, text).message


def test_validated_values_have_the_annotated_types() -> None:
    @tool
    def place(person: Person, color: Color, span: tuple[int, int]) -> None:
        """Typed arguments."""

    arguments = place.validate_arguments(
        '{"person": {"name": "Ada", "address": {"street": "Main"}}, "color": "red", "span": [1, 2]}'
    )
    assert arguments["person"] == Person(name="Ada", address=Address(street="Main"))
    assert arguments["color"] is Color.RED
    assert arguments["span"] == (1, 2)


# --------------------------------------------------------------------------- invocation


async def test_async_tool_is_awaited_and_defaults_apply() -> None:
    assert await search.invoke('{"query": "q"}', make_context()) == ["q-0", "q-1", "q-2"]
    assert await search.invoke({"query": "q", "limit": 1}, make_context()) == ["q-0"]


async def test_sync_tool_runs_in_a_thread_without_blocking_the_loop() -> None:
    release = threading.Event()
    loop_thread = threading.get_ident()

    @tool
    def blocking() -> dict[str, bool]:
        """Block until the event loop releases it."""
        released = release.wait(timeout=5)
        return {"released": released, "in_loop_thread": threading.get_ident() == loop_thread}

    async def release_soon() -> None:
        await asyncio.sleep(0.01)
        release.set()

    result, _ = await asyncio.gather(blocking.invoke({}, make_context()), release_soon())
    assert result == {"released": True, "in_loop_thread": False}


@pytest.mark.parametrize("kind", list(ToolErrorKind))
async def test_tool_error_propagates_with_its_kind(kind: ToolErrorKind) -> None:
    @tool
    def failing() -> None:
        """Always fails."""
        raise ToolError("nope", kind)

    with pytest.raises(ToolError) as caught:
        await failing.invoke({}, make_context())
    assert (caught.value.kind, caught.value.message) == (kind, "nope")


async def test_unexpected_exceptions_propagate_unchanged() -> None:
    @tool
    async def broken() -> None:
        """Always breaks."""
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await broken.invoke({}, make_context())


def test_tool_error_helpers_and_pickling() -> None:
    assert ToolError("x").kind is ToolErrorKind.RECOVERABLE
    helpers = {
        ToolError.recoverable: ToolErrorKind.RECOVERABLE,
        ToolError.invalid_arguments: ToolErrorKind.INVALID_ARGUMENTS,
        ToolError.permission_denied: ToolErrorKind.PERMISSION_DENIED,
        ToolError.timed_out: ToolErrorKind.TIMED_OUT,
        ToolError.cancelled: ToolErrorKind.CANCELLED,
        ToolError.fatal: ToolErrorKind.FATAL,
    }
    for helper, kind in helpers.items():
        error = helper("msg")
        assert (error.kind, error.message, str(error)) == (kind, "msg", "msg")
    restored = pickle.loads(pickle.dumps(ToolError.permission_denied("denied")))
    assert (restored.kind, restored.message) == (ToolErrorKind.PERMISSION_DENIED, "denied")
    assert ToolErrorKind("fatal") == "fatal"


async def test_structured_results_become_json_data() -> None:
    @tool
    def structured() -> dict[str, Any]:
        """Return rich values."""
        return {
            "model": Address(street="Main"),
            "dataclass": Pair(left=1, right="r"),
            "enum": Color.BLUE,
            "tuple": (1, 2),
        }

    assert await structured.invoke({}, make_context()) == {
        "model": {"street": "Main", "city": "Paris"},
        "dataclass": {"left": 1, "right": "r"},
        "enum": "blue",
        "tuple": [1, 2],
    }


async def test_non_serialisable_result_is_fatal() -> None:
    @tool
    def unserialisable() -> object:
        """Return something that is not JSON."""
        return {"lock": threading.Lock()}

    with pytest.raises(ToolError) as caught:
        await unserialisable.invoke({}, make_context())
    assert caught.value.kind is ToolErrorKind.FATAL
    assert "'unserialisable'" in caught.value.message


# --------------------------------------------------------------------------- registry


def test_registry_registers_specs_and_plain_callables() -> None:
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    registry = ToolRegistry([search, add])
    spec = registry.register(multiply)
    assert isinstance(spec, ToolSpec) and spec.name == "multiply"
    assert registry.names() == ["add", "multiply", "web.search"]
    assert len(registry) == 3
    assert "web.search" in registry and "missing" not in registry
    assert registry.get("add") is add and registry.get("missing") is None
    assert [item.name for item in registry] == registry.names()


def test_registry_definitions_are_sorted_and_filterable() -> None:
    registry = ToolRegistry([search, add, no_arguments])
    names = [item["function"]["name"] for item in registry.definitions()]
    assert names == ["add", "no_arguments", "web.search"]
    selected = registry.definitions(["web.search", "add", "add"])
    assert [item["function"]["name"] for item in selected] == ["add", "web.search"]
    with pytest.raises(KeyError, match="nope"):
        registry.definitions(["add", "nope"])


def test_registry_rejects_duplicates() -> None:
    registry = ToolRegistry([add])
    with pytest.raises(ToolDefinitionError, match="'add'"):
        registry.register(add)
    with pytest.raises(ToolDefinitionError, match="'add'"):
        ToolRegistry([add, tool(add.function)])


def test_registry_rejects_reserved_names() -> None:
    builtin = tool(add.function, name="agent.call", allow_reserved=True)
    with pytest.raises(ToolDefinitionError, match="reserved"):
        ToolRegistry().register(builtin)


def test_registry_rejects_bad_plain_callables() -> None:
    def undocumented(x: int) -> int:
        return x

    with pytest.raises(ToolDefinitionError, match="description"):
        ToolRegistry([undocumented])


# --------------------------------------------------------------------------- load_tool


@pytest.fixture
def toolbox_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``toolbox`` importable whether or not ``tests`` is a package."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


@pytest.mark.usefixtures("toolbox_importable")
async def test_load_tool_wraps_a_plain_function() -> None:
    spec = load_tool("toolbox:greet")
    assert spec.name == "greet"
    assert spec.description == "Greet someone by name."
    assert props(spec)["name"]["description"] == "Who to greet."
    assert await spec.invoke('{"name": "Ada", "excited": true}', make_context()) == "Hello, Ada!"


@pytest.mark.usefixtures("toolbox_importable")
def test_load_tool_returns_a_decorated_spec_and_follows_dotted_attributes() -> None:
    shout = load_tool("toolbox:shout")
    assert (shout.name, shout.timeout_seconds) == ("text.shout", 5.0)
    assert load_tool("toolbox:shout") is shout
    assert load_tool("toolbox:Namespace.double")(value=2) == 4


@pytest.mark.parametrize(
    "reference", ["toolbox", "toolbox:", ":greet", "", "toolbox:greet:extra", "toolbox.greet"]
)
def test_load_tool_rejects_bad_format(reference: str) -> None:
    with pytest.raises(ToolDefinitionError, match=r"package\.module:attribute") as caught:
        load_tool(reference)
    assert repr(reference) in str(caught.value)


@pytest.mark.usefixtures("toolbox_importable")
@pytest.mark.parametrize(
    ("reference", "fragment"),
    [
        ("otherone_no_such_module:tool", "No module named 'otherone_no_such_module'"),
        ("toolbox:missing", "has no attribute 'missing'"),
        ("toolbox:Namespace.missing", "has no attribute 'Namespace.missing'"),
        ("toolbox:NOT_CALLABLE", "not callable"),
        ("toolbox:undocumented", "description"),
    ],
)
def test_load_tool_error_paths_name_the_reference(reference: str, fragment: str) -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        load_tool(reference)
    assert repr(reference) in str(caught.value)
    assert fragment in str(caught.value)


def test_a_tool_module_that_exits_on_import_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module calling `sys.exit(3)` on import ended the CLI silently with exit 3 (which
    reads as "run not found")."""
    (tmp_path / "exiting_tools.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ToolDefinitionError, match=r"'exiting_tools' called exit\(3\)"):
        load_tool("exiting_tools:anything")
