"""The settings options every command accepts, their help, and `Settings` from a command line."""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from otherone.client.cli.exits import EXIT_USAGE, CliError
from otherone.client.cli.stores import safe_url
from otherone.errors import ConfigurationError
from otherone.redaction import redact_urls
from otherone.worker.settings import Settings

SETTINGS_HELP = (
    "Settings default to environment variables OTHERONE_<NAME> (or a .env file) and may be "
    "given before or after the command."
)


@dataclass(frozen=True)
class Option:
    flag: str
    field: str
    metavar: str
    #: A yes/no setting: ``--flag`` / ``--no-flag``, no value (``metavar`` unused).
    switch: bool = False


#: Command-line options for every `Settings` field (help text comes from the field).
SETTING_OPTIONS = (
    Option("--config", "config", "PATH"),
    Option("--address", "temporal_address", "HOST:PORT"),
    Option("--namespace", "namespace", "NAME"),
    Option("--task-queue", "task_queue", "NAME"),
    Option("--partition", "partition", "P"),
    Option("--database-url", "database_url", "URL"),
    Option("--data-dir", "data_dir", "DIR"),
    Option("--ui-port", "ui_port", "PORT"),
    Option("--port", "temporal_port", "PORT"),
    Option("--max-concurrent-activities", "max_concurrent_activities", "N"),
)
#: Options of `otherone worker` only: task queues and roles (`otherone.worker.queues`).
WORKER_OPTIONS = (
    Option("--roles", "worker_roles", "ROLES"),
    Option("--model-task-queue", "model_task_queue", "NAME"),
    Option("--tool-task-queue", "tool_task_queue", "NAME"),
    Option("--max-concurrent-model-calls", "max_concurrent_model_calls", "N"),
    Option("--max-concurrent-tool-calls", "max_concurrent_tool_calls", "N"),
    Option("--max-concurrent-local-activities", "max_concurrent_local_activities", "N"),
    Option("--max-cached-workflows", "max_cached_workflows", "N"),
    Option("--deployment-name", "deployment_name", "NAME"),
    Option("--build-id", "build_id", "ID"),
)
#: Options of `otherone serve` (and `otherone dev --serve`): where the HTTP API listens.
SERVE_OPTIONS = (
    Option("--host", "serve_host", "HOST"),
    Option("--http-port", "serve_port", "PORT"),
    Option("--show-ui-url", "serve_show_ui_url", "", switch=True),
)


def default_settings() -> Settings | None:
    try:
        return Settings()
    except (ValidationError, ConfigurationError):
        return None  # reported (with exit code 2) once the command line is parsed


def add_options(
    group: argparse._ArgumentGroup, options: tuple[Option, ...], defaults: Settings | None
) -> None:
    """``options`` as flags of ``group``; absent unless given, so the environment's value holds."""
    for option in options:
        if option.switch:
            group.add_argument(
                option.flag,
                dest=option.field,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=_option_help(option, defaults),
            )
            continue
        group.add_argument(
            option.flag,
            dest=option.field,
            metavar=option.metavar,
            default=argparse.SUPPRESS,
            help=_option_help(option, defaults),
        )


def _option_help(option: Option, defaults: Settings | None) -> str:
    info = Settings.model_fields[option.field]
    value = getattr(defaults, option.field) if defaults is not None else info.default
    shown = "(none)" if value is None else str(value)
    if isinstance(value, tuple):  # e.g. worker roles: shown as they are written
        shown = ",".join(str(item) for item in value)
    if "://" in shown:  # a database URL's password, a URL's user info or query
        shown = redact_urls(safe_url(shown))
    env = f"OTHERONE_{option.field.upper()}"
    return f"{info.description} [{env}; now: {shown}]".replace("%", "%%")


def environment_help() -> str:
    """Every `Settings` field as its environment variable: flag, meaning and default."""
    flags = _flags()
    lines = [
        "settings (environment variables, or a .env file in the working directory; an empty "
        "value\nmeans unset; a flag wins over its variable):"
    ]
    for name, info in Settings.model_fields.items():
        flag = f"  ({flags[name]})" if name in flags else ""
        lines.append(f"  OTHERONE_{name.upper()}{flag}")
        text = f"{info.description or ''} Default: {_default_text(info)}."
        lines += textwrap.wrap(text, 76, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines).replace("%", "%%")


def _default_text(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "see above"
    value = info.default
    if value is None:
        return "unset"
    if isinstance(value, tuple | list):
        return ",".join(str(item) for item in value)
    return str(value)


def settings_from(args: argparse.Namespace) -> Settings:
    """`Settings` from the environment, overridden by the options given on the command line."""
    overrides = {
        option.field: getattr(args, option.field)
        for option in (*SETTING_OPTIONS, *WORKER_OPTIONS, *SERVE_OPTIONS)
        if hasattr(args, option.field)
    }
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise CliError(EXIT_USAGE, _settings_error(error)) from None


def _settings_error(error: ValidationError) -> str:
    """One line naming the variable (and flag) of the first invalid setting, with the value
    given unless the setting is a secret."""
    first = error.errors(include_url=False)[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    if name not in Settings.model_fields:
        return f"settings: {first['msg']}"
    flags = _flags()
    env = f"OTHERONE_{name.upper()}"
    where = f"{flags[name]} / {env}" if name in flags else env
    secret = "SecretStr" in repr(Settings.model_fields[name].annotation)
    given = "" if secret or "input" not in first else f" (got {str(first['input'])[:60]!r})"
    message = str(first["msg"]).removeprefix("Value error, ")  # pydantic's, for our checks
    return f"{where}: {message}{given}"


def _flags() -> dict[str, str]:
    """`Settings` field → its command-line flag."""
    return {
        option.field: option.flag for option in (*SETTING_OPTIONS, *WORKER_OPTIONS, *SERVE_OPTIONS)
    }
