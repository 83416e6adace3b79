"""AGENT.md definitions (`otherone.agent_files`): found next to otherone.toml, validated like
TOML agents, errors naming file and field, duplicates refused unless a precedence is set."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from temporalio.client import Client

from otherone.agent_files import load_agent_file
from otherone.client.agent_client import build_request
from otherone.errors import ConfigurationError
from otherone.runs import RunOutcome
from otherone.toml_config import load_config
from tests.harness import agent_env

CONFIG = """
[runtime]
default_model = "demo"
{runtime}

[models.demo]
provider = "scripted"
model = "demo-1"

[[models.demo.script.weather]]
text = "Sunny."

[agents.helper]
description = "From TOML"
system_prompt = "TOML prompt"
"""

WEATHER = """\
---
schema_version: 1
description: Answers questions about the weather
callable_agents: [helper]
limits:
  max_iterations: 3
---
You are a concise weather assistant.
"""


def project(tmp_path: Path, agents: dict[str, str], runtime: str = "") -> Path:
    """An otherone.toml with ``.otherone/agents/<id>/AGENT.md`` files next to it."""
    for agent_id, text in agents.items():
        folder = tmp_path / ".otherone" / "agents" / agent_id
        folder.mkdir(parents=True)
        (folder / "AGENT.md").write_text(text)
    config = tmp_path / "otherone.toml"
    config.write_text(CONFIG.format(runtime=runtime))
    return config


def test_agent_files_next_to_the_config_are_loaded(tmp_path: Path) -> None:
    config = load_config(project(tmp_path, {"weather": WEATHER}))
    weather = config.agents["weather"]
    assert weather.system_prompt == "You are a concise weather assistant."
    assert weather.description == "Answers questions about the weather"
    assert weather.limits.max_iterations == 3
    assert weather.callable_agents.allows("helper")
    assert config.agents["helper"].system_prompt == "TOML prompt"


async def test_a_file_defined_agent_runs(client: Client, task_queue: str, tmp_path: Path) -> None:
    config = load_config(project(tmp_path, {"weather": WEATHER}))
    async with agent_env(client, task_queue, config, tmp_path) as env:
        result = await env.agents.run(build_request(entry_agent="weather", input="Paris?"))
    assert result.outcome is RunOutcome.COMPLETED and result.text == "Sunny."


BAD_FILES = {
    "no front matter": ("You are nobody.\n", None, "missing front matter"),
    "unclosed": ("---\nschema_version: 1\n", None, "not closed"),
    "not a mapping": ("---\n- a\n---\nx\n", None, "must be a YAML mapping"),
    "no schema version": ("---\ndescription: d\n---\nx\n", "schema_version", "missing"),
    "future schema": ("---\nschema_version: 2\ndescription: d\n---\nx\n", "schema_version", "2"),
    "bad field": ("---\nschema_version: 1\ndescription: d\nlimits: 7\n---\nx\n", "limits", ""),
    "unknown field": ("---\nschema_version: 1\ndescription: d\nmodle: x\n---\nx\n", "modle", ""),
    "prompt field": (
        "---\nschema_version: 1\ndescription: d\nsystem_prompt: p\n---\nx\n",
        "system_prompt",
        "the text after the front matter is the prompt",
    ),
    "other id": ("---\nschema_version: 1\nid: other\ndescription: d\n---\nx\n", "id", "folder"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_agent_file_names_file_and_field(tmp_path: Path, case: str) -> None:
    text, field, words = BAD_FILES[case]
    config = project(tmp_path, {"weather": text})
    with pytest.raises(ConfigurationError) as raised:
        load_config(config)
    error = raised.value
    assert error.file == str(tmp_path / ".otherone" / "agents" / "weather" / "AGENT.md")
    assert error.field == field
    assert words in error.message


def test_a_folder_that_is_no_agent_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not a valid agent id") as raised:
        load_config(project(tmp_path, {"Weather Bot": WEATHER}))
    assert raised.value.field == "id"


def test_an_id_defined_twice_is_refused_unless_a_precedence_is_set(tmp_path: Path) -> None:
    helper = WEATHER.replace("callable_agents: [helper]\n", "")
    config = project(tmp_path, {"helper": helper, "weather": WEATHER})
    with pytest.raises(ConfigurationError) as raised:
        load_config(config)
    assert "also defined in" in raised.value.message and "[agents.helper]" in raised.value.message
    assert raised.value.file is not None and raised.value.file.endswith("helper/AGENT.md")
    for precedence, prompt in (
        ("file", "You are a concise weather assistant."),
        ("toml", "TOML prompt"),
    ):
        config.write_text(CONFIG.format(runtime=f'agent_file_precedence = "{precedence}"'))
        assert load_config(config).agents["helper"].system_prompt == prompt


def test_agent_dirs_name_the_folders(tmp_path: Path) -> None:
    folder = tmp_path / "team" / "weather"
    folder.mkdir(parents=True)
    (folder / "AGENT.md").write_text(WEATHER)
    config = tmp_path / "otherone.toml"
    config.write_text(CONFIG.format(runtime='agent_dirs = ["team"]'))
    assert "weather" in load_config(config).agents
    # One folder named twice is one set of agents (was: "defined by" the file itself).
    config.write_text(CONFIG.format(runtime='agent_dirs = ["team", "./team/"]'))
    assert "weather" in load_config(config).agents
    config.write_text(CONFIG.format(runtime='agent_dirs = ["team", "absent"]'))
    with pytest.raises(ConfigurationError) as raised:
        load_config(config)
    assert (raised.value.table, raised.value.field) == ("runtime", "agent_dirs.1")


def test_load_agent_file_in_python(tmp_path: Path) -> None:
    folder = tmp_path / "weather"
    folder.mkdir()
    (folder / "AGENT.md").write_text(textwrap.dedent(WEATHER))
    agent = load_agent_file(folder / "AGENT.md")
    assert agent.id == "weather" and agent.limits.max_iterations == 3
