"""Tool names on the wire: provider-safe, decoded back exactly, collisions refused at load."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otherone.config import RuntimeConfig
from otherone.definitions import ModelProfile
from otherone.errors import ConfigurationError
from otherone.tools import TOOL_NAME_PATTERN, ToolSpec, tool
from otherone.wire_names import (
    WIRE_NAME_PATTERN,
    WireNames,
    check_wire_names,
    encode_tool_name,
    find_wire_name_collision,
)

SAFE = re.compile(WIRE_NAME_PATTERN)
tool_names = st.from_regex(TOOL_NAME_PATTERN, fullmatch=True)


@pytest.mark.parametrize(
    ("name", "wire"),
    [
        ("get_weather", "get_weather"),
        ("search-web", "search-web"),
        ("agent.call", "agent__call"),
        ("memory.recall", "memory__recall"),
        ("memory.store", "memory__store"),
        ("mcp.github.search", "mcp__github__search"),
    ],
)
def test_encoding(name: str, wire: str) -> None:
    assert encode_tool_name(name) == wire
    assert WireNames([name]).decode(wire) == name


def test_long_names_are_shortened_with_a_hash() -> None:
    name = "a." * 31 + "b"  # 63 characters, 125 once dots are doubled
    wire = encode_tool_name(name)
    assert len(wire) == 64 and SAFE.match(wire)
    assert wire != encode_tool_name("a." * 30 + "bb.b")
    assert WireNames([name]).decode(wire) == name


@given(names=st.sets(tool_names, max_size=12))
def test_every_tool_name_encodes_safely_and_decodes_back(names: set[str]) -> None:
    table = WireNames(names)
    for name in names:
        assert SAFE.match(encode_tool_name(name))
    if find_wire_name_collision(names) is None:
        assert all(table.decode(table.encode(name)) == name for name in names)


def test_unknown_wire_names_come_back_unchanged() -> None:
    assert WireNames(["agent.call"]).decode("made_up") == "made_up"


def test_collisions_are_found() -> None:
    assert find_wire_name_collision(["a.b", "a__b"]) == ("a.b", "a__b", "a__b")
    with pytest.raises(ConfigurationError, match=re.escape("'agent.call' and 'agent__call'")):
        check_wire_names(["agent__call"])
    check_wire_names(["get_weather", "mcp.github.search"])


def test_a_colliding_tool_is_a_configuration_error_at_validation() -> None:
    @tool(name="github.search")
    def dotted(query: str) -> str:
        """Search."""
        return query

    @tool(name="github__search")
    def underscored(query: str) -> str:
        """Search."""
        return query

    config = RuntimeConfig(
        models=[ModelProfile(id="m", provider="openai", model="gpt-4.1")],
        tools=[dotted, underscored],
        source="otherone.toml",
    )
    with pytest.raises(ConfigurationError) as caught:
        config.validate()
    assert "table [runtime], field 'tools'" in str(caught.value)
    assert "'github.search' and 'github__search'" in str(caught.value)
    assert isinstance(config.tools.get("github.search"), ToolSpec)
