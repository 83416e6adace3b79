"""Agent definitions from files: ``<dir>/<agent id>/AGENT.md``.

The front matter (YAML) holds the same fields as an ``[agents.<id>]`` table of otherone.toml
plus a required ``schema_version: 1``; the Markdown body is the system prompt. The folder's name
is the agent id (an ``id`` in the front matter must repeat it). Files are validated like TOML
definitions, and every problem is a `ConfigurationError` naming the file and the field.

    ---
    schema_version: 1
    description: Answers questions about the weather
    model: demo
    tools: [get_weather]
    ---
    You are a concise weather assistant.

``otherone.toml`` finds them in ``.otherone/agents`` next to it (or the folders of ``[runtime]
agent_dirs``); an id defined both in TOML and in a file is an error unless ``[runtime]
agent_file_precedence`` says which wins (``"file"`` or ``"toml"``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from otherone.definitions import AGENT_ID_PATTERN, AgentDefinition
from otherone.errors import ConfigurationError
from otherone.front_matter import read_text, split_front_matter

__all__ = [
    "AGENT_FILE_NAME",
    "DEFAULT_AGENT_DIR",
    "SCHEMA_VERSION",
    "Precedence",
    "load_agent_file",
    "load_agent_files",
    "merge_agents",
]

AGENT_FILE_NAME = "AGENT.md"
#: Where otherone.toml looks when ``[runtime] agent_dirs`` is not set (relative to the file).
DEFAULT_AGENT_DIR = Path(".otherone") / "agents"
SCHEMA_VERSION = 1
#: Fields a file may not set: the body is the prompt, the folder is the id.
_NOT_IN_FRONT_MATTER = ("system_prompt", "system_prompt_file")

Precedence = Literal["error", "file", "toml"]


def load_agent_file(path: str | os.PathLike[str]) -> AgentDefinition:
    """One ``AGENT.md``: validated like a TOML definition; errors name the file and field."""
    file = Path(path)
    metadata, body = split_front_matter(
        file, read_text(file, "agent"), "'schema_version: 1' and 'description'"
    )
    agent_id = _agent_id(file, metadata)
    _check_schema_version(file, metadata)
    for name in _NOT_IN_FRONT_MATTER:
        if name in metadata:
            message = "not allowed in AGENT.md: the text after the front matter is the prompt"
            raise ConfigurationError(message, file=str(file), field=name)
    fields = {k: v for k, v in metadata.items() if k not in ("schema_version", "id")}
    return _validated({**fields, "id": agent_id, "system_prompt": body.strip()}, file)


def load_agent_files(directory: str | os.PathLike[str]) -> list[AgentDefinition]:
    """Every ``<directory>/<id>/AGENT.md``, sorted by id (folders without one are ignored)."""
    root = Path(directory)
    if not root.is_dir():
        raise ConfigurationError("agent folder not found", file=str(root))
    return [
        load_agent_file(folder / AGENT_FILE_NAME)
        for folder in sorted(root.iterdir())
        if folder.is_dir() and (folder / AGENT_FILE_NAME).is_file()
    ]


def merge_agents(
    from_toml: Mapping[str, AgentDefinition],
    from_files: list[tuple[Path, AgentDefinition]],
    precedence: Precedence,
    source: str,
) -> dict[str, AgentDefinition]:
    """TOML's agents and the files' agents as one mapping; a duplicate id follows
    ``precedence`` (``error``: refused, naming both places)."""
    merged = dict(from_toml)
    seen_in_files: dict[str, Path] = {}
    for file, agent in from_files:
        if agent.id in seen_in_files and seen_in_files[agent.id].resolve() == file.resolve():
            continue  # one folder listed twice (``agents`` and ``./agents/``): the same file
        if agent.id in seen_in_files:
            message = f"agent '{agent.id}' is also defined by {seen_in_files[agent.id]}"
            raise ConfigurationError(message, file=str(file), field="id")
        seen_in_files[agent.id] = file
        if agent.id in from_toml:
            if precedence == "error":
                message = (
                    f"agent '{agent.id}' is also defined in {source} ([agents.{agent.id}]); "
                    'remove one, or set [runtime] agent_file_precedence = "file" or "toml"'
                )
                raise ConfigurationError(message, file=str(file), field="id")
            if precedence == "toml":
                continue
        merged[agent.id] = agent
    return merged


def _agent_id(file: Path, metadata: Mapping[str, Any]) -> str:
    folder = file.parent.name
    declared = metadata.get("id", folder)
    if declared != folder:
        message = f"must be the folder's name '{folder}' (or left out)"
        raise ConfigurationError(message, file=str(file), field="id")
    if not isinstance(folder, str) or not _valid_id(folder):
        message = f"the folder name '{folder}' is not a valid agent id ({AGENT_ID_PATTERN})"
        raise ConfigurationError(message, file=str(file), field="id")
    return folder


def _valid_id(value: str) -> bool:
    return re.fullmatch(AGENT_ID_PATTERN, value) is not None


def _check_schema_version(file: Path, metadata: Mapping[str, Any]) -> None:
    version = metadata.get("schema_version")
    if version is None:
        raise ConfigurationError(
            f"missing: write 'schema_version: {SCHEMA_VERSION}'",
            file=str(file),
            field="schema_version",
        )
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise ConfigurationError(
            f"unsupported version {version!r}; this runtime reads {SCHEMA_VERSION}",
            file=str(file),
            field="schema_version",
        )


def _validated(data: dict[str, Any], file: Path) -> AgentDefinition:
    """The definition, or the first problem as an error naming its field (never the value)."""
    try:
        return AgentDefinition.model_validate(data)
    except ValidationError as error:
        problem = error.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in problem["loc"]) or None
        message = problem["msg"].removeprefix("Value error, ")
        raise ConfigurationError(message, file=str(file), field=field) from None
