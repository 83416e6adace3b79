"""Skills: ``SKILL.md`` files whose front matter tells a model what specialised help exists.

A skill is a Markdown file with YAML front matter (``name``, ``description`` and optionally
``disable-model-invocation``), in the Agent Skills layout the seed uses: one directory per skill
holding a ``SKILL.md``. Skills are loaded once, when the worker's configuration is loaded, so a
broken file is a `ConfigurationError` naming that file at start-up rather than a surprise in a
run. The runtime snapshot keeps only what the prompt needs (name, description, location, the
invocation flag); an agent's allowlist, intersected with the runtime policy, decides which of
them its system prompt lists.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar
from xml.sax.saxutils import escape

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from otherone.errors import ConfigurationError
from otherone.front_matter import read_text, split_front_matter

__all__ = ["SKILL_FILE_NAME", "Skill", "SkillRegistry", "format_skills_for_prompt", "load_skill"]

#: The file that makes a directory a skill.
SKILL_FILE_NAME = "SKILL.md"
#: Agent Skills names: lowercase letters and digits in hyphen-separated words, at most 64.
SKILL_NAME_PATTERN = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
MAX_SKILL_NAME_CHARS = 64
MAX_SKILL_DESCRIPTION_CHARS = 1024
#: Directories never searched for skills (hidden ones are skipped too).
_SKIPPED_DIRECTORIES = frozenset({"node_modules", "__pycache__"})
_XML_ATTRIBUTE_ENTITIES = {'"': "&quot;", "'": "&apos;"}

_M = TypeVar("_M", bound=BaseModel)


class Skill(BaseModel):
    """One skill as the runtime snapshot carries it (no body: the prompt lists, a tool reads)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[
        str, StringConstraints(pattern=SKILL_NAME_PATTERN, max_length=MAX_SKILL_NAME_CHARS)
    ]
    description: Annotated[
        str,
        StringConstraints(
            strip_whitespace=True, min_length=1, max_length=MAX_SKILL_DESCRIPTION_CHARS
        ),
    ]
    #: The ``SKILL.md`` path on the worker, shown to the model as the skill's location.
    location: str
    #: Hidden from the model's skill list; only a user or program may invoke it.
    disable_model_invocation: bool = False


class _FrontMatter(BaseModel):
    """The front matter fields we read; other Agent Skills keys (license, ...) are ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str | None = None
    description: str
    disable_model_invocation: bool = Field(default=False, alias="disable-model-invocation")


def load_skill(path: str | os.PathLike[str]) -> Skill:
    """Parse one ``SKILL.md``; every problem is a `ConfigurationError` naming the file."""
    file = Path(path)
    metadata, _body = split_front_matter(file, read_text(file, "skill"), "'name' and 'description'")
    fields = _validated(_FrontMatter, metadata, file)
    name = fields.name if fields.name is not None else _default_name(file)
    return _validated(
        Skill,
        {
            "name": name,
            "description": fields.description,
            "location": str(file.resolve()),
            "disable_model_invocation": fields.disable_model_invocation,
        },
        file,
    )


def _default_name(file: Path) -> str:
    """Like the seed: a ``SKILL.md`` without a name is named after its directory."""
    return file.parent.name if file.name == SKILL_FILE_NAME else file.stem


def _validated(model: type[_M], data: dict[str, Any], file: Path) -> _M:
    """``model.model_validate(data)``; the first problem becomes the error, without the value."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problem = error.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in problem["loc"]) or None
        field = {"disable_model_invocation": "disable-model-invocation"}.get(field or "", field)
        raise ConfigurationError(problem["msg"], file=str(file), field=field) from None


# --------------------------------------------------------------------------- discovery


def _skill_files(path: Path, seen: set[Path] | None = None) -> list[Path]:
    """The ``SKILL.md`` files a configured path stands for.

    A file is itself; a directory holding a ``SKILL.md`` is one skill; any other directory is
    searched below (sorted, hidden directories skipped), like the seed's discovery. Each
    directory is searched once, however many links lead to it (a link to a parent made the
    search grow without end, a CPU-bound loop no Ctrl-C reached).
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ConfigurationError("skill path not found", file=str(path))
    seen = set() if seen is None else seen
    real = path.resolve()
    if real in seen:
        return []
    seen.add(real)
    own = path / SKILL_FILE_NAME
    if own.is_file():
        return [own]
    found: list[Path] = []
    for child in sorted(path.iterdir()):
        if child.is_dir() and not _skipped(child.name):
            found.extend(_skill_files(child, seen))
    return found


def _same_file(one: str | None, other: str | None) -> bool:
    return one is not None and other is not None and Path(one).resolve() == Path(other).resolve()


def _skipped(directory_name: str) -> bool:
    return directory_name.startswith(".") or directory_name in _SKIPPED_DIRECTORIES


# --------------------------------------------------------------------------- registry


class SkillRegistry:
    """The skills a worker knows, by name. A name used twice is a configuration error."""

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        self._skills: dict[str, Skill] = {}
        for skill in skills:
            self.add(skill)

    @classmethod
    def load(
        cls, paths: Iterable[str | os.PathLike[str]], *, base_dir: Path | None = None
    ) -> SkillRegistry:
        """Load skills from ``SKILL.md`` files and directories (relative to ``base_dir``)."""
        registry = cls()
        for path in paths:
            registry.load_path(path, base_dir=base_dir)
        return registry

    def load_path(self, path: str | os.PathLike[str], *, base_dir: Path | None = None) -> int:
        """Add the skills under one file or directory; returns how many were added."""
        resolved = Path(path) if base_dir is None else base_dir / path
        files = _skill_files(resolved)
        for file in files:
            self.add(load_skill(file))
        return len(files)

    def add(self, skill: Skill) -> None:
        existing = self._skills.get(skill.name)
        if existing is not None and _same_file(existing.location, skill.location):
            return  # one path listed twice (``skills`` and ``./skills/``): the same skill
        if existing is not None:
            raise ConfigurationError(
                f"duplicate skill name '{skill.name}' (also defined in {existing.location})",
                file=skill.location,
                field="name",
            )
        self._skills[skill.name] = skill

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)

    def names(self) -> list[str]:
        """All names, sorted, so snapshots and prompts are deterministic."""
        return sorted(self._skills)

    def format_for_prompt(self, allowed_names: Iterable[str]) -> str:
        """The system prompt's skills block for these names (unknown names are ignored)."""
        return format_skills_for_prompt(
            self._skills[name] for name in allowed_names if name in self._skills
        )

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __len__(self) -> int:
        return len(self._skills)

    def __iter__(self) -> Iterator[Skill]:
        return iter([self._skills[name] for name in self.names()])


def format_skills_for_prompt(skills: Iterable[Skill]) -> str:
    """The seed's ``<available_skills>`` block, or "" when no skill is model-invocable.

    Skills with ``disable-model-invocation`` are left out: the model must not pick them itself.
    The block starts with a newline because it is appended directly to the agent's prompt.
    """
    visible = sorted(
        (skill for skill in skills if not skill.disable_model_invocation),
        key=lambda skill: skill.name,
    )
    if not visible:
        return ""
    lines = [
        "",
        "The following skills provide specialized instructions for specific tasks.",
        "Use an allowed read tool to load a skill file when its description matches the task.",
        "<available_skills>",
    ]
    for skill in visible:
        lines += [
            "  <skill>",
            f"    <name>{_xml(skill.name)}</name>",
            f"    <description>{_xml(skill.description)}</description>",
            f"    <location>{_xml(skill.location)}</location>",
            "  </skill>",
        ]
    lines.append("</available_skills>")
    return "\n".join(lines)


def _xml(value: str) -> str:
    return escape(value, _XML_ATTRIBUTE_ENTITIES)
