"""Loading ``otherone.toml``: the example, every table, and errors that name file, table, field."""

from __future__ import annotations

import sys
import textwrap
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from otherone.definitions import AccessPolicy, AgentDefinition, ContextTransferPolicy, MemoryPolicy
from otherone.errors import ConfigurationError
from otherone.examples import EXAMPLE_CONFIG
from otherone.examples.tools import get_weather
from otherone.toml_config import load_config, parse_config

FIXTURES = Path(__file__).parent / "fixtures" / "config"

MINIMAL = """
[models.demo]
provider = "scripted"
model = "demo-1"

[agents.assistant]
description = "Helps"
system_prompt = "Be nice."
"""


@pytest.fixture(autouse=True)
def _restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a config may add its directory to sys.path; keep that inside each test."""
    monkeypatch.setattr(sys, "path", [*sys.path])


def write(directory: Path, body: str, name: str = "otherone.toml") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def write_tool_module(directory: Path) -> str:
    """A tool module with a unique name (sys.modules is process-wide) next to the config."""
    module = f"cfg_tools_{uuid.uuid4().hex[:12]}"
    source = '''
        from otherone.tools import tool


        @tool
        def echo(text: str) -> str:
            """Echo the text back."""
            return text
    '''
    write(directory, source, f"{module}.py")
    return module


def config_error(path: Path) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        load_config(path)
    error = info.value
    shown_context = error.__context__ is not None and not error.__suppress_context__
    assert error.__cause__ is None and not shown_context, "no chained (pydantic) traceback"
    assert str(path) in str(error)
    return error


def assert_names(error: ConfigurationError, table: str | None, field: str | None) -> None:
    message = str(error)
    assert (error.table, error.field) == (table, field), message
    if table is not None:
        assert f"[{table}]" in message
    if field is not None:
        assert f"'{field}'" in message
    assert "pydantic" not in message.lower() and "Traceback" not in message


# --------------------------------------------------------------------------- the example


def test_example_config_loads_and_snapshots() -> None:
    config = load_config(EXAMPLE_CONFIG)

    snapshot = config.snapshot()

    assert config.source == str(EXAMPLE_CONFIG)
    assert snapshot.default_model == "demo"
    assert set(snapshot.agents) == {"assistant", "researcher", "writer", "coordinator", "clerk"}
    assert set(snapshot.tools) == {"get_weather", "add"}
    assert config.tools.names() == ["add", "get_weather"]
    assert snapshot.agents["assistant"].limits.max_iterations == 5
    assert snapshot.agents["assistant"].tools == AccessPolicy.allow("get_weather", "add")
    assert snapshot.limits.run_timeout == timedelta(minutes=5)
    assert snapshot.limits.root_timeout == timedelta(minutes=15)
    assert set(snapshot.models) == {"demo"}  # real profiles are added by the reader (README)
    assert len(snapshot.version) == 32


def test_example_script_is_a_weather_conversation_using_the_tool_result() -> None:
    demo = load_config(EXAMPLE_CONFIG).models["demo"]
    first, second = demo.script["assistant"]

    assert [(call.name, call.arguments) for call in first.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert second.chunks is not None and len(second.chunks) > 2
    weather = get_weather("Paris")
    assert weather["condition"] in second.full_text
    assert f"{weather['temperature_c']} °C" in second.full_text
    assert get_weather("Paris") == weather  # deterministic


def test_example_team_calls_researcher_and_writer_in_parallel() -> None:
    config = load_config(EXAMPLE_CONFIG)
    snapshot = config.snapshot()
    coordinator = snapshot.agents["coordinator"]
    script = config.models["demo"].script

    assert coordinator.callable_agents == AccessPolicy.allow("researcher", "writer")
    assert coordinator.model_overrides.parallel_tool_calls is True
    assert [agent.id for agent in snapshot.reachable_agents(coordinator)] == [
        "researcher",
        "writer",
    ]
    first, final = script["coordinator"]
    assert [(call.name, call.id) for call in first.tool_calls] == [
        ("agent.call", "call_research"),
        ("agent.call", "call_write"),
    ]
    targets = [
        call.arguments.get("agent") if isinstance(call.arguments, dict) else None
        for call in first.tool_calls
    ]
    assert targets == ["researcher", "writer"]
    assert final.chunks is not None and not final.tool_calls
    # The researcher looks the weather up, then reports it; the writer answers at once.
    lookup, report = script["researcher"]
    assert [(call.name, call.arguments) for call in lookup.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert snapshot.agents["researcher"].tools == AccessPolicy.allow("get_weather")
    (note,) = script["writer"]
    assert note.chunks is not None and not note.tool_calls
    weather = get_weather("Paris")
    for text in (report.full_text, final.full_text):
        assert weather["condition"] in text and f"{weather['temperature_c']} °C" in text
    assert note.full_text in final.full_text  # the coordinator passes the writer's note on


def test_fixture_with_every_table_loads() -> None:
    config = load_config(FIXTURES / "full.toml")

    snapshot = config.snapshot()
    helper = snapshot.agents["helper"]
    assert snapshot.default_model == "local.small"
    assert set(snapshot.tools) == {"shout", "whisper"}
    assert snapshot.policy.tools == AccessPolicy.allow("shout", "whisper")
    assert snapshot.policy.allow_recursive_calls is True
    assert helper.system_prompt == (FIXTURES / "prompts" / "helper.md").read_text()
    assert helper.callable_agents == AccessPolicy.allow("critic")
    assert helper.memory is MemoryPolicy.READ_ONLY_SHARED
    assert helper.context == ContextTransferPolicy(kind="parent_summary")
    assert helper.model_overrides.temperature == 0.1
    assert snapshot.agents["critic"].model == "inherit"
    assert snapshot.models["script"].script["helper"][1].full_text == "HI"
    assert snapshot.models["local.small"].other == {"keep_alive": "5m"}


def test_parse_config_from_a_mapping(tmp_path: Path) -> None:
    data = {
        "models": {"m": {"provider": "scripted", "model": "x"}},
        "agents": {"a": {"description": "d", "system_prompt": "s", "model": "m"}},
    }

    config = parse_config(data, source="inline.toml", base_dir=tmp_path)

    assert config.source == "inline.toml"
    assert config.agents["a"].model == "m"
    assert config.tools.names() == []


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("90", timedelta(seconds=90)),
        ("1.5", timedelta(seconds=1.5)),
        ('"PT2M"', timedelta(minutes=2)),
        ('"P1DT1H"', timedelta(days=1, hours=1)),
    ],
)
def test_durations_in_seconds_or_iso_8601(tmp_path: Path, value: str, expected: timedelta) -> None:
    path = write(tmp_path, f"[limits]\nrun_timeout = {value}\n{MINIMAL}")

    assert load_config(path).limits.run_timeout == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"none"', AccessPolicy.none()),
        ('"all"', AccessPolicy.all()),
        ('["assistant"]', AccessPolicy.allow("assistant")),
        ("[]", AccessPolicy(mode="allow")),
    ],
)
def test_policy_shorthands(tmp_path: Path, value: str, expected: AccessPolicy) -> None:
    path = write(tmp_path, f"[policy]\ncallable_agents = {value}\n{MINIMAL}")
    config = load_config(path)

    assert config.policy.callable_agents == expected
    assert config.policy.tools == AccessPolicy.all()


def test_agent_policy_shorthands(tmp_path: Path) -> None:
    body = MINIMAL + 'tools = "all"\ncallable_agents = ["assistant"]\nskills = "none"\n'
    agent = load_config(write(tmp_path, body)).agents["assistant"]

    assert agent.tools == AccessPolicy.all()
    assert agent.callable_agents == AccessPolicy.allow("assistant")
    assert agent.skills == AccessPolicy.none()


def test_system_prompt_file_is_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_dir = tmp_path / "project"
    write(config_dir, "You are a pirate.\n", "prompts/pirate.md")
    body = MINIMAL.replace('system_prompt = "Be nice."', 'system_prompt_file = "prompts/pirate.md"')
    path = write(config_dir, body)
    monkeypatch.chdir(tmp_path)  # not the config's directory

    config = load_config(Path("project") / "otherone.toml")

    assert config.agents["assistant"].system_prompt == "You are a pirate.\n"
    assert path.exists()


def test_tool_module_next_to_the_config_is_importable(tmp_path: Path) -> None:
    module = write_tool_module(tmp_path)
    path = write(tmp_path, f'[runtime]\ntools = ["{module}:echo"]\n{MINIMAL}tools = ["echo"]\n')

    config = load_config(path)
    load_config(path)  # a second load does not add the directory twice

    assert config.tools.names() == ["echo"]
    assert config.agents["assistant"].tools == AccessPolicy.allow("echo")
    assert sys.path.count(str(tmp_path.resolve())) == 1


def test_a_plain_function_is_registered_as_a_tool() -> None:
    config = load_config(FIXTURES / "full.toml")

    whisper = config.tools.get("whisper")
    assert whisper is not None and whisper("HeLLo") == "hello"


# --------------------------------------------------------------------------- file errors


def test_missing_file(tmp_path: Path) -> None:
    error = config_error(tmp_path / "nope.toml")

    assert "not found" in str(error)
    assert_names(error, None, None)


def test_invalid_toml_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '[runtime]\ndefault_model = "demo"\ntools = [oops]\n')

    error = config_error(path)

    assert "not valid TOML" in str(error)
    assert "line 3, column" in str(error)


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "otherone.toml"
    path.write_bytes(b'[runtime]\ndefault_model = "\xff"\n')

    assert "UTF-8" in str(config_error(path))


# --------------------------------------------------------------------------- table errors

CASES = {
    "unknown top-level table": (
        MINIMAL + "[extras]\nx = 1\n",
        "extras",
        None,
        "unknown top-level table",
    ),
    "unknown key in runtime": (
        '[runtime]\ndefault = "demo"\n' + MINIMAL,
        "runtime",
        "default",
        "Extra inputs are not permitted",
    ),
    "unknown key in an agent": (
        MINIMAL + 'colour = "red"\n',
        "agents.assistant",
        "colour",
        "Extra inputs are not permitted",
    ),
    "unknown key in agent limits": (
        MINIMAL + "[agents.assistant.limits]\nmax_iters = 3\n",
        "agents.assistant",
        "limits.max_iters",
        "Extra inputs are not permitted",
    ),
    "wrong type in agent limits": (
        MINIMAL + '[agents.assistant.limits]\nmax_iterations = "five"\n',
        "agents.assistant",
        "limits.max_iterations",
        "valid integer",
    ),
    # Not coerced (a user found these loaded as 5 and true): a string or a number where the
    # file means a count or a switch is a mistake to name.
    "a number as text": (
        MINIMAL + '[agents.assistant.limits]\nmax_iterations = "5"\n',
        "agents.assistant",
        "limits.max_iterations",
        "valid integer",
    ),
    "a number as a switch": (
        MINIMAL + "ask_human = 1\n",
        "agents.assistant",
        "ask_human",
        "valid boolean",
    ),
    "a switch as a count": (
        "[limits]\nmax_depth = true\n" + MINIMAL,
        "limits",
        "max_depth",
        "valid integer",
    ),
    "out of range in agent limits": (
        MINIMAL + "[agents.assistant.limits]\nmax_iterations = 0\n",
        "agents.assistant",
        "limits.max_iterations",
        "greater than 0",
    ),
    "wrong type in limits": (
        '[limits]\nmax_depth = "deep"\n' + MINIMAL,
        "limits",
        "max_depth",
        "valid integer",
    ),
    "bad duration": (
        '[limits]\nrun_timeout = "soon"\n' + MINIMAL,
        "limits",
        "run_timeout",
        "duration",
    ),
    "non-positive duration": (
        "[limits]\nrun_timeout = 0\n" + MINIMAL,
        "limits",
        "run_timeout",
        "greater than zero",
    ),
    "bad policy shorthand": (
        '[policy]\ntools = "some"\n' + MINIMAL,
        "policy",
        "tools",
        "must be 'none', 'all' or a list of names (e.g. [\"some\"])",
    ),
    "policy flag of the wrong type": (
        '[policy]\nallow_recursive_calls = "maybe"\n' + MINIMAL,
        "policy",
        "allow_recursive_calls",
        "valid boolean",
    ),
    "union type is reported at the field": (
        MINIMAL + "model_overrides = { tool_choice = 3 }\n",
        "agents.assistant",
        "model_overrides.tool_choice",
        "valid string or Input should be a valid dictionary",
    ),
    "scripted turn of the wrong type": (
        MINIMAL + "[[models.demo.script.assistant]]\ntext = 3\n",
        "models.demo",
        "script.assistant.0.text",
        "valid string",
    ),
    "script for a non-agent key": (
        MINIMAL + '[[models.demo.script."Not An Agent"]]\ntext = "hi"\n',
        "models.demo",
        "script.Not An Agent",
        "should match pattern",
    ),
    "unknown provider": (
        MINIMAL.replace('"scripted"', '"skynet"'),
        "models.demo",
        "provider",
        "'openai', 'anthropic'",
    ),
    "missing description": (
        MINIMAL.replace('description = "Helps"\n', ""),
        "agents.assistant",
        "description",
        "Field required",
    ),
    "invalid agent id": (
        MINIMAL.replace("[agents.assistant]", "[agents.Assistant]"),
        "agents.Assistant",
        None,
        "not a valid agent id",
    ),
    "invalid agent id needing quotes": (
        MINIMAL.replace("[agents.assistant]", '[agents."my agent"]'),
        'agents."my agent"',
        None,
        "not a valid agent id",
    ),
    "invalid model id": (
        MINIMAL.replace("[models.demo]", '[models."-demo"]'),
        "models.-demo",
        None,
        "not a valid model id",
    ),
    "id inside an agent table": (
        MINIMAL + 'id = "other"\n',
        "agents.assistant",
        "id",
        "the table key is the id",
    ),
    "id inside a model table": (
        MINIMAL.replace('model = "demo-1"', 'model = "demo-1"\nid = "demo"'),
        "models.demo",
        "id",
        "the table key is the id",
    ),
    "agent that is not a table": (
        '[models.demo]\nprovider = "scripted"\nmodel = "m"\n[agents]\nassistant = "helper"\n',
        "agents",
        "assistant",
        "must be a table",
    ),
    "both prompts": (
        MINIMAL + 'system_prompt_file = "p.md"\n',
        "agents.assistant",
        "system_prompt_file",
        "not both",
    ),
    "missing prompt file": (
        MINIMAL.replace("system_prompt =", "system_prompt_file =").replace("Be nice.", "no.md"),
        "agents.assistant",
        "system_prompt_file",
        "prompt file not found",
    ),
    "tool reference without a colon": (
        '[runtime]\ntools = ["mytools.get_weather"]\n' + MINIMAL,
        "runtime",
        "tools.0",
        "'package.module:attribute'",
    ),
    "tool reference to a missing module": (
        '[runtime]\ntools = ["otherone.examples.tools:add", "no_such_module_x:f"]\n' + MINIMAL,
        "runtime",
        "tools.1",
        "no_such_module_x",
    ),
    "tool reference to a missing attribute": (
        '[runtime]\ntools = ["otherone.examples.tools:nope"]\n' + MINIMAL,
        "runtime",
        "tools.0",
        "has no attribute",
    ),
    "tool reference to a non-callable": (
        '[runtime]\ntools = ["otherone.examples.tools:__all__"]\n' + MINIMAL,
        "runtime",
        "tools.0",
        "not callable",
    ),
    "same tool twice": (
        '[runtime]\ntools = ["otherone.examples.tools:add", "otherone.examples.tools:add"]\n'
        + MINIMAL,
        "runtime",
        "tools.1",
        "registered",
    ),
    "tools not a list": (
        '[runtime]\ntools = "otherone.examples.tools:add"\n' + MINIMAL,
        "runtime",
        "tools",
        "valid list",
    ),
    "unknown default model": (
        '[runtime]\ndefault_model = "gpt"\n' + MINIMAL,
        "runtime",
        "default_model",
        "not a declared model",
    ),
    "agent with an unknown model": (
        MINIMAL + 'model = "gpt"\n',
        "agents.assistant",
        "model",
        "unknown model 'gpt'",
    ),
    "agent with an unknown tool": (
        MINIMAL + 'tools = ["get_weather"]\n',
        "agents.assistant",
        "tools",
        "unknown tool 'get_weather'",
    ),
    "agent calling an unknown agent": (
        MINIMAL + 'callable_agents = ["researcher"]\n',
        "agents.assistant",
        "callable_agents",
        "unknown agent 'researcher'",
    ),
    "policy naming an unknown tool": (
        '[policy]\ntools = ["get_weather"]\n' + MINIMAL,
        "policy",
        "tools",
        "unknown tool 'get_weather'",
    ),
    "true for a count (pydantic reads it as 1)": (
        "[limits]\nmax_model_calls = true\n" + MINIMAL,
        "limits",
        "max_model_calls",
        "not true/false",
    ),
    "true for a duration (pydantic reads it as 1 s)": (
        "[limits]\nrun_timeout = true\n" + MINIMAL,
        "limits",
        "run_timeout",
        "not true/false",
    ),
    "true for a temperature": (
        MINIMAL.replace('model = "demo-1"', 'model = "demo-1"\ntemperature = true'),
        "models.demo",
        "temperature",
        "not true/false",
    ),
    "no models at all": (
        '[agents.a]\ndescription = "d"\nsystem_prompt = "s"\n',
        "models",
        None,
        "at least one model",
    ),
}


@pytest.mark.parametrize(("body", "table", "field", "fragment"), CASES.values(), ids=CASES.keys())
def test_errors_name_file_table_and_field(
    tmp_path: Path, body: str, table: str, field: str | None, fragment: str
) -> None:
    error = config_error(write(tmp_path, body))

    assert_names(error, table, field)
    assert fragment in str(error)


def test_inline_api_key_is_rejected_without_echoing_it(tmp_path: Path) -> None:
    body = MINIMAL + '[models.gpt]\nprovider = "openai"\nmodel = "x"\napi_key = "sk-TOPSECRET"\n'

    error = config_error(write(tmp_path, body))

    assert_names(error, "models.gpt", "api_key")
    assert "api_key_env" in str(error)
    assert "TOPSECRET" not in str(error)


def test_secret_in_the_wrong_field_is_not_echoed(tmp_path: Path) -> None:
    body = (
        MINIMAL + '[models.gpt]\nprovider = "openai"\nmodel = "x"\napi_key_env = "sk-TOPSECRET"\n'
    )

    error = config_error(write(tmp_path, body))

    assert_names(error, "models.gpt", "api_key_env")
    assert "TOPSECRET" not in str(error)


def test_several_problems_are_all_listed(tmp_path: Path) -> None:
    body = MINIMAL + "[agents.assistant.limits]\nmax_iterations = 0\ntimeout_millis = -1\n"

    error = config_error(write(tmp_path, body))

    assert_names(error, "agents.assistant", "limits.max_iterations")
    assert "limits.timeout_millis" in str(error)


def test_an_agent_without_a_system_prompt_has_none_as_in_python(tmp_path: Path) -> None:
    """TOML and Python agree: `AgentDefinition(system_prompt=...)` defaults to no prompt."""
    config = load_config(write(tmp_path, MINIMAL.replace('system_prompt = "Be nice."\n', "")))
    assert (
        config.agents["assistant"].system_prompt
        == AgentDefinition(id="assistant", description="d").system_prompt
    )
