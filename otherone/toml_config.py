"""Load a `RuntimeConfig` from ``otherone.toml``.

The file has six top-level tables: ``[runtime]`` (``default_model``; ``tools``,
``guardrails`` and ``hooks``, lists of ``"module:attribute"`` references; ``skills``,
``SKILL.md`` files or directories of skills, relative to the file), ``[policy]``
(`RuntimePolicy`), ``[limits]`` (`RuntimeLimits`), ``[models.<id>]`` (one `ModelProfile`
each), ``[agents.<id>]`` (one `AgentDefinition` each) and ``[mcp.<server>]`` (one `McpServer`
each; a relative ``cwd`` is relative to the file). The id of a model, agent or server is its
table key.

Every problem is a `ConfigurationError` naming the file, the table (``agents.assistant``) and the
field inside it (``limits.max_iterations``), with pydantic's message but never its traceback and
never the offending value (it could be a secret pasted in the wrong place).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from otherone.agent_files import (
    AGENT_FILE_NAME,
    DEFAULT_AGENT_DIR,
    Precedence,
    load_agent_files,
    merge_agents,
)
from otherone.config import RuntimeConfig
from otherone.credentials import credential_paths, nested_credential_paths
from otherone.definitions import (
    AGENT_ID_PATTERN,
    PROFILE_ID_PATTERN,
    AgentDefinition,
    ModelProfile,
    RuntimeLimits,
    RuntimePolicy,
    credentials_refused_message,
    metadata_refused_message,
)
from otherone.errors import ConfigurationError
from otherone.guardrails import GuardrailDefinitionError, load_guardrail
from otherone.hooks import HookDefinitionError, load_hook
from otherone.mcp_servers import MCP_SERVER_NAME_PATTERN, McpServer
from otherone.partition_limits import PartitionLimits
from otherone.skills import SkillRegistry
from otherone.tools import ToolDefinitionError, load_tool

__all__ = ["TOP_LEVEL_TABLES", "load_config", "parse_config"]

#: The tables an ``otherone.toml`` may contain.
TOP_LEVEL_TABLES = ("runtime", "policy", "limits", "partitions", "models", "agents", "mcp")

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
#: Parts of a pydantic error location that name a type (union member, validator), not a field.
_TYPE_TAG = re.compile(
    r"^(str|int|float|bool|dict|list|tuple|set|frozenset|bytes|none|any)$|[][=,()]|^[a-z]+(-[a-z]+)+$"
)
_ABSENT = object()
_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")
_MAX_REPORTED_PROBLEMS = 5

_Model = TypeVar("_Model", bound=BaseModel)


class _RuntimeTable(BaseModel):
    """The ``[runtime]`` table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    default_model: str | None = None
    tools: list[str] = []
    #: Guardrails, ``"module:attribute"`` references like tools (`otherone.guardrails`).
    guardrails: list[str] = []
    #: Lifecycle hooks, ``"module:attribute"`` references (`otherone.hooks`).
    hooks: list[str] = []
    skills: list[str] = []
    #: Folders of ``<id>/AGENT.md`` definitions (`otherone.agent_files`); default: the
    #: ``.otherone/agents`` folder next to the file, when it exists.
    agent_dirs: list[str] | None = None
    #: An agent id defined in TOML and in a file: refused, or which one wins.
    agent_file_precedence: Precedence = "error"


def load_config(path: str | os.PathLike[str]) -> RuntimeConfig:
    """Read, validate and cross-check an ``otherone.toml``; raise `ConfigurationError`."""
    file = Path(path)
    source = str(path)
    data = _read_toml(file, source)
    return parse_config(data, source=source, base_dir=file.resolve().parent)


def parse_config(data: Mapping[str, Any], *, source: str, base_dir: Path) -> RuntimeConfig:
    """Build a validated `RuntimeConfig` from parsed TOML.

    ``source`` names the file in errors; ``base_dir`` is where ``system_prompt_file`` paths are
    resolved and is made importable for tool references.
    """
    _check_top_level(data, source)
    runtime = _validate(_RuntimeTable, _section(data, "runtime", source), source, "runtime")
    config = RuntimeConfig(
        policy=_validate(RuntimePolicy, _section(data, "policy", source), source, "policy"),
        limits=_limits(data, source),
        default_model=runtime.default_model,
        skills=_load_skills(runtime.skills, source, base_dir),
        source=source,
    )
    for key, table in _entries(data, "models", source):
        config.add_model(_model_profile(key, table, source))
    from_toml = {
        key: _agent(key, table, source, base_dir) for key, table in _entries(data, "agents", source)
    }
    from_files = _agent_files(runtime.agent_dirs, source, base_dir)
    for agent in merge_agents(
        from_toml, from_files, runtime.agent_file_precedence, source
    ).values():
        config.add_agent(agent)
    for key, table in _entries(data, "mcp", source):
        config.add_mcp_server(_mcp_server(key, table, source, base_dir))
    _load_tools(config, runtime.tools, source, base_dir)
    _load_guardrails(config, runtime.guardrails, source, base_dir)
    _load_hooks(config, runtime.hooks, source, base_dir)
    config.validate()
    return config


def _limits(data: Mapping[str, Any], source: str) -> RuntimeLimits:
    """``[limits]``, with the caps of ``[partitions.<key>]`` (each named by its own table)."""
    caps = {
        key: _validate(PartitionLimits, table, source, _table("partitions", key))
        for key, table in _entries(data, "partitions", source)
    }
    limits = _validate(RuntimeLimits, _section(data, "limits", source), source, "limits")
    try:
        return limits.model_validate(
            {**limits.model_dump(exclude={"partitions"}), "partitions": caps}
        )
    except ValidationError as error:  # a key that names no partition
        raise _configuration_error(error, caps, source, "partitions") from None


# --------------------------------------------------------------------------- file


def _read_toml(file: Path, source: str) -> dict[str, Any]:
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigurationError("configuration file not found", file=source) from None
    except OSError as error:
        message = f"cannot read configuration file: {error.strerror or error}"
        raise ConfigurationError(message, file=source) from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        message = f"not valid UTF-8 (byte offset {error.start})"
        raise ConfigurationError(message, file=source) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigurationError(f"not valid TOML: {error}", file=source) from None


# --------------------------------------------------------------------------- structure


def _check_top_level(data: Mapping[str, Any], source: str) -> None:
    expected = ", ".join(TOP_LEVEL_TABLES)
    for key in data:
        if key not in TOP_LEVEL_TABLES:
            raise ConfigurationError(
                f"unknown top-level table or key; expected one of: {expected}",
                file=source,
                table=_quote(key),
            )


def _section(data: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
    """A top-level table (empty when absent)."""
    value = data.get(name, {})
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"[{name}] must be a table", file=source, table=name)
    return dict(value)


def _entries(data: Mapping[str, Any], name: str, source: str) -> list[tuple[str, dict[str, Any]]]:
    """The sub-tables of ``[models]`` or ``[agents]``, by key."""
    entries = []
    for key, value in _section(data, name, source).items():
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"must be a table: write it as [{_table(name, key)}]",
                file=source,
                table=name,
                field=_quote(key),
            )
        entries.append((key, dict(value)))
    return entries


def _quote(key: str) -> str:
    """A TOML key as it would be written in a table header."""
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _table(prefix: str, key: str) -> str:
    return f"{prefix}.{_quote(key)}"


# --------------------------------------------------------------------------- validation


def _validate(model: type[_Model], data: Any, source: str, table: str) -> _Model:
    """``model.model_validate(data)``, with errors turned into a `ConfigurationError`."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise _configuration_error(error, data, source, table) from None


def _configuration_error(
    error: ValidationError, data: Any, source: str, table: str
) -> ConfigurationError:
    """Name the first problem's field; list the others in the message (without input values)."""
    problems = _problems(error, data)
    (field, message), others = problems[0], problems[1:_MAX_REPORTED_PROBLEMS]
    if others:
        rest = "; ".join(f"{location or '(table)'}: {text}" for location, text in others)
        more = len(problems) - 1 - len(others)
        message += f" (also {rest}{f'; and {more} more' if more > 0 else ''})"
    return ConfigurationError(message, file=source, table=table, field=field or None)


def _problems(error: ValidationError, data: Any) -> list[tuple[str, str]]:
    """(field path, message) per place in the file; a union's alternatives are merged."""
    grouped: dict[str, list[str]] = {}
    for problem in error.errors(include_url=False, include_input=False, include_context=False):
        messages = grouped.setdefault(_location(problem["loc"], data), [])
        message = _problem_message(problem)
        if message not in messages:
            messages.append(message)
    return [(location, " or ".join(messages)) for location, messages in grouped.items()]


def _location(loc: tuple[int | str, ...], data: Any) -> str:
    """The dotted path of ``loc`` in the file, without pydantic's union/validator tags.

    ``loc`` is followed through the data: a part that is a key or index there is kept; a part
    that is not is either a missing field (kept) or a type tag such as ``str`` or
    ``function-after[...]`` (dropped); nothing below a scalar is a place in the file.
    """
    parts: list[str] = []
    current = data
    for part in loc:
        child = _child(current, part)
        if child is not _ABSENT:
            current = child
        elif isinstance(current, Mapping) and not _TYPE_TAG.search(str(part)):
            current = None
        else:
            continue
        parts.append(str(part))
    return ".".join(parts)


def _child(data: Any, part: int | str) -> Any:
    """``data[part]`` for a table key or array index present in the data, else ``_ABSENT``."""
    if isinstance(data, Mapping):
        return data.get(part, _ABSENT)
    if isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
        return data[part]
    return _ABSENT


def _problem_message(problem: ErrorDetails) -> str:
    message = problem["msg"]
    for prefix in _PYDANTIC_PREFIXES:
        message = message.removeprefix(prefix)
    return message


def _check_key(key: str, pattern: str, kind: str, source: str, table: str) -> None:
    if not re.fullmatch(pattern, key):
        raise ConfigurationError(
            f"the table key {key!r} is not a valid {kind} id (must match {pattern})",
            file=source,
            table=table,
        )


def _forbid_inline_id(table_data: Mapping[str, Any], source: str, table: str) -> None:
    if "id" in table_data:
        raise ConfigurationError(
            "do not write 'id' inside the table: the table key is the id",
            file=source,
            table=table,
            field="id",
        )


# --------------------------------------------------------------------------- models and agents


def _model_profile(key: str, data: dict[str, Any], source: str) -> ModelProfile:
    table = _table("models", key)
    _check_key(key, PROFILE_ID_PATTERN, "model", source, table)
    _forbid_inline_id(data, source, table)
    if "api_key" in data:
        raise ConfigurationError(
            "api_key must not be written in configuration; set api_key_env to the name of the "
            "environment variable that holds it",
            file=source,
            table=table,
            field="api_key",
        )
    other = data.get("other")
    if isinstance(other, Mapping):
        paths = credential_paths(other)
        _refuse_credentials(paths, credentials_refused_message(paths), "other", source, table)
    return _validate(ModelProfile, {**data, "id": key}, source, table)


def _refuse_credentials(
    paths: list[str], message: str, field: str, source: str, table: str
) -> None:
    """A key in ``other`` (e.g. an Authorization header) or ``metadata`` is refused before
    anything keeps it, naming the exact entry (the model validators would only name the table
    that holds it)."""
    if paths:
        raise ConfigurationError(message, file=source, table=table, field=f"{field}.{paths[0]}")


def _agent(key: str, data: dict[str, Any], source: str, base_dir: Path) -> AgentDefinition:
    table = _table("agents", key)
    _check_key(key, AGENT_ID_PATTERN, "agent", source, table)
    _forbid_inline_id(data, source, table)
    overrides = data.get("model_overrides")
    other = overrides.get("other") if isinstance(overrides, Mapping) else None
    if isinstance(other, Mapping):
        paths = credential_paths(other)
        message = credentials_refused_message(paths)
        _refuse_credentials(paths, message, "model_overrides.other", source, table)
    metadata = data.get("metadata")
    if isinstance(metadata, Mapping):
        paths = nested_credential_paths(metadata)
        _refuse_credentials(paths, metadata_refused_message(paths), "metadata", source, table)
    body = {name: value for name, value in data.items() if name != "system_prompt_file"}
    body["system_prompt"] = _system_prompt(data, source, table, base_dir)
    body["id"] = key
    return _validate(AgentDefinition, body, source, table)


def _system_prompt(data: Mapping[str, Any], source: str, table: str, base_dir: Path) -> Any:
    """The inline ``system_prompt`` or the text of ``system_prompt_file`` (at most one); neither
    is no prompt, as `AgentDefinition`'s default in Python."""
    inline, from_file = "system_prompt" in data, "system_prompt_file" in data
    if inline and from_file:
        message = "set either system_prompt or system_prompt_file, not both"
        raise ConfigurationError(message, file=source, table=table, field="system_prompt_file")
    if not from_file:
        return data.get("system_prompt", AgentDefinition.model_fields["system_prompt"].default)
    return _read_prompt_file(data["system_prompt_file"], source, table, base_dir)


def _read_prompt_file(value: Any, source: str, table: str, base_dir: Path) -> str:
    def error(message: str) -> ConfigurationError:
        return ConfigurationError(message, file=source, table=table, field="system_prompt_file")

    if not isinstance(value, str) or not value.strip():
        raise error("must be a non-empty path (relative to the configuration file)")
    path = base_dir / value
    if path.exists() and not path.is_file():  # a FIFO blocked the load for ever, a folder
        raise error(f"prompt file is not a regular file: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"prompt file not found: {path}") from None
    except UnicodeDecodeError:
        raise error(f"prompt file is not valid UTF-8: {path}") from None
    except OSError as exc:
        raise error(f"cannot read prompt file {path}: {exc.strerror or exc}") from None


def _agent_files(
    folders: list[str] | None, source: str, base_dir: Path
) -> list[tuple[Path, AgentDefinition]]:
    """The AGENT.md definitions of ``[runtime] agent_dirs`` (each must exist), or of the
    default folder next to the file when it exists."""
    if folders is None:
        default = base_dir / DEFAULT_AGENT_DIR
        paths = [default] if default.is_dir() else []
    else:
        paths = _runtime_paths(folders, "agent_dirs", "agent folder", source, base_dir, Path.is_dir)
    return [
        (path / agent.id / AGENT_FILE_NAME, agent)
        for path in paths
        for agent in load_agent_files(path)
    ]


# --------------------------------------------------------------------------- MCP servers


def _mcp_server(key: str, data: dict[str, Any], source: str, base_dir: Path) -> McpServer:
    table = _table("mcp", key)
    _check_key(key, MCP_SERVER_NAME_PATTERN, "MCP server", source, table)
    if "name" in data:
        raise ConfigurationError(
            "do not write 'name' inside the table: the table key is the server's name",
            file=source,
            table=table,
            field="name",
        )
    body = {**data, "name": key}
    cwd = data.get("cwd")
    if isinstance(cwd, str) and cwd.strip():  # a blank one is refused by `McpServer`
        body["cwd"] = str(base_dir / cwd.strip())
    return _validate(McpServer, body, source, table)


# --------------------------------------------------------------------------- tools


def _load_tools(config: RuntimeConfig, references: list[str], source: str, base_dir: Path) -> None:
    """Import and register every ``"module:attribute"`` reference of ``[runtime] tools``."""
    if references:
        _make_importable(base_dir)
    for index, reference in enumerate(references):
        try:
            config.tools.register(load_tool(reference))
        except ToolDefinitionError as error:
            raise ConfigurationError(
                error.message, file=source, table="runtime", field=f"tools.{index}"
            ) from None


def _load_guardrails(
    config: RuntimeConfig, references: list[str], source: str, base_dir: Path
) -> None:
    """Import and register every ``"module:attribute"`` reference of ``[runtime] guardrails``."""
    if references:
        _make_importable(base_dir)
    for index, reference in enumerate(references):
        try:
            config.guardrails.register(load_guardrail(reference))
        except GuardrailDefinitionError as error:
            raise ConfigurationError(
                error.message, file=source, table="runtime", field=f"guardrails.{index}"
            ) from None


def _load_hooks(config: RuntimeConfig, references: list[str], source: str, base_dir: Path) -> None:
    """Import and register every ``"module:attribute"`` reference of ``[runtime] hooks``."""
    if references:
        _make_importable(base_dir)
    for index, reference in enumerate(references):
        try:
            config.hooks.register(load_hook(reference))
        except HookDefinitionError as error:
            raise ConfigurationError(
                error.message, file=source, table="runtime", field=f"hooks.{index}"
            ) from None


# --------------------------------------------------------------------------- skills


def _load_skills(paths: list[str], source: str, base_dir: Path) -> SkillRegistry:
    """Load ``[runtime] skills``; a missing path names this file, a bad skill names its own."""
    registry = SkillRegistry()
    for path in _runtime_paths(paths, "skills", "skill path", source, base_dir, Path.exists):
        registry.load_path(path)
    return registry


def _runtime_paths(
    values: list[str],
    field: str,
    kind: str,
    source: str,
    base_dir: Path,
    present: Callable[[Path], bool],
) -> list[Path]:
    """``[runtime] <field>`` entries as paths next to the file; a missing one names its index."""
    paths = []
    for index, value in enumerate(values):
        path = base_dir / value
        if not value.strip() or not present(path):
            raise ConfigurationError(
                f"{kind} not found: {path}", file=source, table="runtime", field=f"{field}.{index}"
            )
        paths.append(path)
    return paths


def _make_importable(directory: Path) -> None:
    """Put the configuration file's directory on ``sys.path`` (once) so tools next to it import.

    Appended, not prepended: a stray file next to the config must not shadow an installed module.
    """
    entry = str(directory)
    if entry not in sys.path:
        sys.path.append(entry)
