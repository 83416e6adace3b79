"""Skills: SKILL.md loading, validation naming the file, per-agent allowlists, the prompt block."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from temporalio.client import Client

from otherone.activities.context import system_prompt_for
from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig, RuntimeSnapshot
from otherone.definitions import AccessPolicy, AgentDefinition, ModelProfile, RuntimePolicy
from otherone.errors import ConfigurationError
from otherone.skills import Skill, SkillRegistry, format_skills_for_prompt, load_skill
from otherone.toml_config import load_config
from tests.harness import agent_env, scripted_config
from tests.providers import RecordingProvider

MODEL = ModelProfile(id="default", provider="scripted", model="test")


def write_skill(directory: Path, front_matter: str, body: str = "# Instructions\n") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "SKILL.md"
    path.write_text(f"---\n{textwrap.dedent(front_matter).strip()}\n---\n\n{body}", "utf-8")
    return path


def skill(name: str, *, hidden: bool = False) -> Skill:
    return Skill(
        name=name,
        description=f"{name} description",
        location=f"/skills/{name}/SKILL.md",
        disable_model_invocation=hidden,
    )


def snapshot_with(
    *agents: AgentDefinition, loaded: list[Skill], **policy: object
) -> RuntimeSnapshot:
    return RuntimeConfig(
        agents=agents,
        models=[MODEL],
        skills=SkillRegistry(loaded),
        policy=RuntimePolicy.model_validate(policy),
    ).snapshot()


def load_error(path: Path) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        load_skill(path)
    assert str(path) in str(info.value), "the error names the file"
    assert info.value.__cause__ is None
    return info.value


# --------------------------------------------------------------------------- loading


def test_front_matter_is_parsed(tmp_path: Path) -> None:
    path = write_skill(
        tmp_path / "pdf",
        """
        name: pdf-tools
        description: "Extract text and tables from PDF files: use for any PDF task."
        disable-model-invocation: true
        license: Apache-2.0
        """,
    )
    loaded = load_skill(path)
    assert loaded == Skill(
        name="pdf-tools",
        description="Extract text and tables from PDF files: use for any PDF task.",
        location=str(path.resolve()),
        disable_model_invocation=True,
    )


def test_name_defaults_to_the_directory_like_the_seed(tmp_path: Path) -> None:
    path = write_skill(tmp_path / "release-notes", "description: Write release notes")
    loaded = load_skill(path)
    assert (loaded.name, loaded.disable_model_invocation) == ("release-notes", False)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("# no front matter\n", "missing front matter"),
        ("---\nname: x\ndescription: y\n", "not closed"),
        ("---\nname: [unclosed\n---\n", "not valid YAML"),
        ("---\n- a\n- b\n---\n", "must be a YAML mapping"),
        ("---\nname: ok\n---\n", "Field required"),
        ("---\nname: Bad_Name\ndescription: d\n---\n", "should match pattern"),
        ("---\nname: ok\ndescription: '   '\n---\n", "at least 1 character"),
        ("---\nname: ok\ndescription: 42\n---\n", "valid string"),
        ("---\nname: ok\ndescription: d\ndisable-model-invocation: maybe\n---\n", "boolean"),
    ],
)
def test_invalid_front_matter_names_the_file(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "broken" / "SKILL.md"
    path.parent.mkdir()
    path.write_text(content, "utf-8")
    error = load_error(path)
    assert expected in str(error)


def test_invalid_field_is_named(tmp_path: Path) -> None:
    path = write_skill(tmp_path / "x", "name: x\ndescription: d\ndisable-model-invocation: maybe")
    assert load_error(path).field == "disable-model-invocation"


def test_description_longer_than_1024_characters_is_refused(tmp_path: Path) -> None:
    path = write_skill(tmp_path / "long", f"name: long\ndescription: {'d' * 1025}")
    assert load_error(path).field == "description"


def test_directories_hold_one_skill_per_subdirectory(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(root / "beta", "name: beta\ndescription: B")
    write_skill(root / "group" / "alpha", "name: alpha\ndescription: A")
    write_skill(root / ".hidden", "name: hidden\ndescription: H")
    write_skill(root / "node_modules" / "dep", "name: dep\ndescription: D")
    single = write_skill(tmp_path / "single", "name: single\ndescription: S")
    registry = SkillRegistry.load([root, single])
    assert registry.names() == ["alpha", "beta", "single"]
    own = SkillRegistry.load([tmp_path / "single"])
    assert own.names() == ["single"], "a directory holding a SKILL.md is that one skill"


def test_duplicate_skill_names_are_a_configuration_error(tmp_path: Path) -> None:
    write_skill(tmp_path / "one", "name: same\ndescription: first")
    second = write_skill(tmp_path / "two", "name: same\ndescription: second")
    with pytest.raises(ConfigurationError, match="duplicate skill name 'same'") as info:
        SkillRegistry.load([tmp_path])
    assert str(second.resolve()) in str(info.value)


def test_missing_skill_path_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="skill path not found"):
        SkillRegistry.load(["nowhere"], base_dir=tmp_path)


# --------------------------------------------------------------------------- policy and prompt


def test_agent_skill_policy_filters_the_runtime_skill_snapshot(tmp_path: Path) -> None:
    """The seed's test: the allowed skill's name and description reach the prompt."""
    path = write_skill(tmp_path, "name: test-skill\ndescription: Test skill description")
    agent = AgentDefinition(id="agent", description="agent", skills=["test-skill"])
    config = RuntimeConfig(agents=[agent], models=[MODEL], skills=SkillRegistry.load([path]))
    snapshot = config.snapshot()
    prompt = format_skills_for_prompt(
        snapshot.skills[name] for name in snapshot.skill_names_for(snapshot.agent("agent"))
    )
    assert "test-skill" in prompt
    assert "Test skill description" in prompt


def test_allowlist_is_agent_policy_intersected_with_runtime_policy() -> None:
    agents = (
        AgentDefinition(id="none", description="default policy: no skills"),
        AgentDefinition(id="some", description="d", skills=["alpha", "gamma"]),
        AgentDefinition(id="every", description="d", skills="all"),
    )
    skills = [skill("alpha"), skill("beta"), skill("gamma")]
    open_runtime = snapshot_with(*agents, loaded=skills)
    assert open_runtime.skill_names_for(open_runtime.agent("none")) == []
    assert open_runtime.skill_names_for(open_runtime.agent("some")) == ["alpha", "gamma"]
    assert open_runtime.skill_names_for(open_runtime.agent("every")) == ["alpha", "beta", "gamma"]
    strict = snapshot_with(*agents, loaded=skills, skills=AccessPolicy.allow("gamma", "beta"))
    assert strict.skill_names_for(strict.agent("some")) == ["gamma"]
    assert strict.skill_names_for(strict.agent("every")) == ["beta", "gamma"]


def test_system_prompt_lists_only_allowed_model_invocable_skills() -> None:
    agent = AgentDefinition(
        id="agent", description="d", system_prompt="You help.", skills=["alpha", "manual"]
    )
    other = AgentDefinition(id="other", description="d", system_prompt="Other.")
    snapshot = snapshot_with(
        agent, other, loaded=[skill("alpha"), skill("beta"), skill("manual", hidden=True)]
    )
    prompt = system_prompt_for(snapshot, snapshot.agent("agent"))
    assert prompt == (
        "You help.\n"
        "The following skills provide specialized instructions for specific tasks.\n"
        "Use an allowed read tool to load a skill file when its description matches the task.\n"
        "<available_skills>\n"
        "  <skill>\n"
        "    <name>alpha</name>\n"
        "    <description>alpha description</description>\n"
        "    <location>/skills/alpha/SKILL.md</location>\n"
        "  </skill>\n"
        "</available_skills>"
    )
    assert "manual" not in prompt and "beta" not in prompt
    assert system_prompt_for(snapshot, snapshot.agent("other")) == "Other."


def test_prompt_block_escapes_xml_and_is_empty_without_skills() -> None:
    tricky = Skill(name="x", description='Use <b> & "quotes"', location="/a'b/SKILL.md")
    block = format_skills_for_prompt([tricky])
    assert "<description>Use &lt;b&gt; &amp; &quot;quotes&quot;</description>" in block
    assert "<location>/a&apos;b/SKILL.md</location>" in block
    assert format_skills_for_prompt([]) == ""
    assert format_skills_for_prompt([skill("hidden", hidden=True)]) == ""
    assert SkillRegistry([tricky]).format_for_prompt(["x", "unknown"]) == block


def test_snapshot_carries_skills_and_survives_storage() -> None:
    snapshot = snapshot_with(
        AgentDefinition(id="agent", description="d", skills="all"), loaded=[skill("alpha")]
    )
    restored = RuntimeSnapshot.model_validate_json(snapshot.model_dump_json())
    assert restored.skills == {"alpha": skill("alpha")}
    assert restored.with_version().version == snapshot.version
    without = snapshot_with(AgentDefinition(id="agent", description="d"), loaded=[])
    assert without.version != snapshot.version, "skills are part of the snapshot's version"


@pytest.mark.parametrize(
    ("policy", "table"),
    [({}, "agents.agent"), ({"skills": ["ghost"]}, "policy")],
)
def test_unknown_skill_references_are_configuration_errors(
    policy: dict[str, object], table: str
) -> None:
    skills = ["ghost"] if table.startswith("agents") else "all"
    config = RuntimeConfig(
        agents=[AgentDefinition(id="agent", description="d", skills=skills)],
        models=[MODEL],
        skills=SkillRegistry([skill("alpha")]),
        policy=RuntimePolicy.model_validate(policy),
    )
    with pytest.raises(ConfigurationError, match="unknown skill 'ghost'") as info:
        config.validate()
    assert (info.value.table, info.value.field) == (table, "skills")


# --------------------------------------------------------------------------- TOML


@pytest.fixture
def _restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [*sys.path])


def write_config(directory: Path, runtime: str, agent_skills: str = '"all"') -> Path:
    path = directory / "otherone.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [runtime]
            {runtime}

            [models.demo]
            provider = "scripted"
            model = "demo-1"

            [agents.assistant]
            description = "Helps"
            system_prompt = "Be nice."
            skills = {agent_skills}
            """
        ),
        "utf-8",
    )
    return path


def test_toml_loads_skill_files_and_directories_relative_to_the_file(tmp_path: Path) -> None:
    write_skill(tmp_path / "skills" / "alpha", "name: alpha\ndescription: A")
    write_skill(tmp_path / "skills" / "beta", "name: beta\ndescription: B")
    write_skill(tmp_path / "extra", "name: gamma\ndescription: G\ndisable-model-invocation: true")
    config = load_config(
        write_config(tmp_path, 'skills = ["skills/", "extra/SKILL.md"]', '["alpha", "gamma"]')
    )
    snapshot = config.snapshot()
    assert sorted(snapshot.skills) == ["alpha", "beta", "gamma"]
    assert snapshot.skill_names_for(snapshot.agent("assistant")) == ["alpha", "gamma"]
    prompt = system_prompt_for(snapshot, snapshot.agent("assistant"))
    assert "<name>alpha</name>" in prompt and "gamma" not in prompt


def test_toml_missing_skill_path_names_file_table_and_field(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'skills = ["skills/"]')
    with pytest.raises(ConfigurationError) as info:
        load_config(path)
    assert (info.value.file, info.value.table, info.value.field) == (
        str(path),
        "runtime",
        "skills.0",
    )


def test_toml_invalid_skill_names_the_skill_file(tmp_path: Path) -> None:
    bad = write_skill(tmp_path / "skills" / "bad", "name: bad")
    with pytest.raises(ConfigurationError) as info:
        load_config(write_config(tmp_path, 'skills = ["skills"]'))
    assert info.value.file == str(bad) and info.value.field == "description"


def test_toml_agent_allowlist_must_name_loaded_skills(tmp_path: Path) -> None:
    write_skill(tmp_path / "skills" / "alpha", "name: alpha\ndescription: A")
    path = write_config(tmp_path, 'skills = ["skills"]', '["alpha", "beta"]')
    with pytest.raises(ConfigurationError, match="unknown skill 'beta'") as info:
        load_config(path)
    assert (info.value.table, info.value.field) == ("agents.assistant", "skills")


# --------------------------------------------------------------------------- through a run


async def test_the_model_sees_the_skills_block(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = AgentDefinition(
        id="agent", description="d", system_prompt="You help.", skills=["alpha"]
    )
    config = scripted_config({"agent": ["done"]}, agents=[agent])
    config.skills = SkillRegistry([skill("alpha"), skill("beta")])
    provider = RecordingProvider()
    async with agent_env(
        client, task_queue, config, tmp_path, providers={"scripted": provider}
    ) as env:
        result = await env.agents.run(build_request(entry_agent="agent", input="hi"))
    assert result.text == "done"
    [request] = provider.calls()
    system = request.messages[0]
    assert system["role"] == "system"
    assert system["content"].startswith("You help.\nThe following skills")
    assert "<name>alpha</name>" in system["content"] and "beta" not in system["content"]


@pytest.mark.timeout(30)
def test_links_back_up_the_tree_are_searched_once(tmp_path: Path) -> None:
    """Two links to a parent made the search grow without end (a CPU-bound loop that neither
    Ctrl-C nor SIGTERM reached); each folder is now searched once, and a path listed twice
    (``skills`` and ``./skills/``) is one set of skills, not a duplicate name."""
    root = tmp_path / "skills"
    write_skill(root / "a", "name: alpha\ndescription: first\n")
    write_skill(root / "b" / "deep", "name: beta\ndescription: second\n")
    (root / "b" / "up1").symlink_to("..")
    (root / "b" / "up2").symlink_to("..")
    registry = SkillRegistry.load(["skills", "./skills/"], base_dir=tmp_path)
    assert sorted(registry.names()) == ["alpha", "beta"]
