"""Declarations of Model Context Protocol servers, and the names their tools get here.

An `McpServer` is either a local process spoken to over stdio (``command``, ``args``, ``env``,
``cwd``) or a remote server over streamable HTTP (``url``, ``headers``, ``headers_env``).

``env``, ``headers`` and ``args`` are written as every MCP client writes them: literal values
(``TZ = "Europe/Oslo"``), with ``${VAR}`` references (VS Code's form) to a worker environment
variable or secrets-file entry, resolved on the worker when the session starts
(``GITHUB_PERSONAL_ACCESS_TOKEN = "${GITHUB_TOKEN}"``, ``Authorization = "Bearer ${API_KEY}"``).
Secrets never appear in a declaration: a literal that looks like a credential (the rules of
`otherone.credentials`), a credential-named ``env`` variable or header (``*_TOKEN``,
``*_API_KEY``, ``Authorization``) with no reference, and a value that is the bare *name* of a
variable (the form of ``env`` before references, ``"MY_GITHUB_TOKEN"``) are refused at load,
without being echoed, with the ``${VAR}`` form to write instead. ``headers_env`` maps a header
to the *name* of the variable holding its whole value (kept as it was). A ``url`` carrying a
credential is refused too.

A server's tools are exposed as ``mcp.<server>.<tool>`` (sent to providers as
``mcp__<server>__<tool>``); access policies name them like any tool, with globs
(``mcp.git.*``). A server's resources are read through the built-in tools
``mcp.<server>.resources.list`` and ``mcp.<server>.resources.read`` (`otherone.mcp_resources`).
This module does no I/O: the sessions live in `otherone.activities.mcp`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from otherone.credentials import (
    is_credential_key,
    is_credential_name,
    is_credential_value,
    looks_like_credential,
    url_credential_parts,
)
from otherone.definitions import (
    ENV_VAR_PATTERN,
    is_glob,
    refuse_secret_value,
    secret_name_refused,
    url_credentials_refused,
)
from otherone.mcp_prompts import MCP_SERVER_NAME_PATTERN
from otherone.run_types import NOT_A_BOOL

__all__ = [
    "DEFAULT_MCP_TIMEOUT_SECONDS",
    "IDEMPOTENT_MAX_ATTEMPTS",
    "MCP_PREFIX",
    "MCP_SERVER_NAME_PATTERN",
    "McpServer",
    "expand_references",
    "is_glob",
    "mcp_tool_name",
    "parse_mcp_name",
    "references",
    "secret_fields",
    "suggested_variable",
    "value_problem",
]

#: Every MCP tool's name starts with this; user tools may not (`RuntimeConfig` refuses them).
MCP_PREFIX = "mcp."
DEFAULT_MCP_TIMEOUT_SECONDS = 60.0
#: Attempts of a call to a server marked idempotent (others get one: a retried call with side
#: effects could do them twice).
IDEMPOTENT_MAX_ATTEMPTS = 3

_HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"

#: How ``env`` and ``headers_env`` are written right, shown when a value is a secret itself.
_ENV_EXAMPLE = (
    'env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${GITHUB_TOKEN}" } and export GITHUB_TOKEN=... on '
    "the worker"
)
_HEADERS_EXAMPLE = (
    'headers_env = { Authorization = "SEARCH_AUTH_HEADER" } and export '
    'SEARCH_AUTH_HEADER="Bearer ..." on the worker'
)
_USE_HEADERS_ENV = (
    'send them in a header instead: headers = { Authorization = "Bearer ${SEARCH_TOKEN}" } '
    "reads the worker variable (or secrets-file entry) SEARCH_TOKEN when the session starts"
)

#: A reference to a worker variable or secrets-file entry inside a value (VS Code's form).
_REFERENCE = re.compile(r"\$\{([^{}]*)\}")
_VARIABLE = re.compile(ENV_VAR_PATTERN)
#: A whole value that is the *name* of a variable: upper-case words joined by ``_``
#: (``MY_GITHUB_TOKEN``), the form ``env`` values had before ``${VAR}`` references.
_BARE_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")


EnvName = Annotated[str, StringConstraints(pattern=ENV_VAR_PATTERN)]
#: A value as written: literal text with ``${VAR}`` references (checked by `value_problem`).
Template = Annotated[str, StringConstraints(max_length=8_192)]
HeaderName = Annotated[str, StringConstraints(pattern=_HEADER_NAME)]
#: The name of the worker variable / secrets-file entry a ``headers_env`` header is read from.
HeaderSource = Annotated[
    str, StringConstraints(pattern=ENV_VAR_PATTERN), refuse_secret_value(_HEADERS_EXAMPLE)
]


def _finite_positive(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a finite number greater than zero")
    return value


_PositiveSeconds = Annotated[float, NOT_A_BOOL, AfterValidator(_finite_positive)]


class McpServer(BaseModel):
    """One MCP server a worker connects to (stdio ``command`` or streamable HTTP ``url``).

    ``idempotent`` servers' calls are retried (``max_attempts`` defaults to 3 for them, else 1).
    """

    # Errors never show the input: a secret pasted in env or url would be printed back.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    name: Annotated[str, StringConstraints(pattern=MCP_SERVER_NAME_PATTERN)]
    command: Annotated[str, StringConstraints(min_length=1)] | None = None
    #: Arguments of ``command``; ``${VAR}`` references are resolved at session start.
    args: tuple[Template, ...] = ()
    #: Child environment variable → its value: literal text with ``${VAR}`` references to
    #: worker variables / secrets-file entries.
    env: dict[EnvName, Template] = Field(default_factory=dict)
    #: The server's working directory (blank is refused: it would be the worker's, silently).
    cwd: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] | None = None
    url: str | None = None
    #: HTTP header → its value: literal text with ``${VAR}`` references (as ``env``).
    headers: dict[HeaderName, Template] = Field(default_factory=dict)
    #: HTTP header → name of the worker variable / secrets-file entry holding its value.
    headers_env: dict[HeaderName, HeaderSource] = Field(default_factory=dict)
    timeout_seconds: Annotated[
        float, NOT_A_BOOL, AfterValidator(_finite_positive), Field(le=86_400)
    ] = DEFAULT_MCP_TIMEOUT_SECONDS
    #: How long starting the server (and its initialize handshake) may take.
    startup_timeout_seconds: Annotated[
        float, NOT_A_BOOL, AfterValidator(_finite_positive), Field(le=3_600)
    ] = 30.0
    # Strict: `idempotent = "yes"` or `max_attempts = true` is a mistake to report, not coerce.
    idempotent: Annotated[bool, Field(strict=True)] = False
    max_attempts: Annotated[int, Field(ge=1, le=100, strict=True)] | None = None
    #: List the server's resources in the system prompt of agents granted
    #: ``mcp.<server>.resources.read`` (`otherone.mcp_resources`; bounded).
    resources_in_prompt: Annotated[bool, Field(strict=True)] = False

    @model_validator(mode="before")
    @classmethod
    def _no_secret_as_key(cls, value: Any) -> Any:
        """A secret written as an ``env`` or ``headers_env`` *key*: refused here, as pydantic's
        error for a key would name the field by the key, that is by the secret."""
        if isinstance(value, Mapping):
            for field, example in (
                ("env", _ENV_EXAMPLE),
                ("headers", _HEADERS_EXAMPLE),
                ("headers_env", _HEADERS_EXAMPLE),
            ):
                table = value.get(field)
                if isinstance(table, Mapping) and any(
                    is_credential_value(str(key)) for key in table
                ):
                    raise ValueError(f"a name in {field} {secret_name_refused(example)}")
        return value

    @field_validator("env", "headers")
    @classmethod
    def _checked_table(cls, table: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        kind = "env" if info.field_name == "env" else "header"
        server = info.data.get("name", "server")
        _raise_problems(
            info.field_name or kind,
            [
                (target, problem)
                for target, value in table.items()
                if (problem := value_problem(kind, str(server), target, value)) is not None
            ],
        )
        return table

    @field_validator("args")
    @classmethod
    def _checked_args(cls, args: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        server = str(info.data.get("name", "server"))
        _raise_problems(
            "args",
            [
                (index, problem)
                for index, value in enumerate(args)
                if (problem := value_problem("arg", server, f"arg_{index}", value)) is not None
            ],
        )
        return args

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None:
            _check_url(url)
        return url

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of command (a stdio server) or url (streamable HTTP)")
        if self.url is not None and (self.args or self.env or self.cwd is not None):
            raise ValueError("args, env and cwd are for stdio servers (command), not url")
        if self.command is not None and (self.headers or self.headers_env):
            raise ValueError("headers and headers_env are for remote servers (url), not command")
        lowered = {name.lower() for name in self.headers_env}  # HTTP names ignore case
        both = sorted(name for name in self.headers if name.lower() in lowered)
        if both:
            raise ValueError(f"headers and headers_env both set {', '.join(both)}: keep one")
        return self

    @property
    def attempts(self) -> int:
        """Attempts per call: ``max_attempts``, else 3 when idempotent, else 1."""
        if self.max_attempts is not None:
            return self.max_attempts
        return IDEMPOTENT_MAX_ATTEMPTS if self.idempotent else 1

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable_http"


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("url must be an http:// or https:// URL")
    url_credentials_refused(url, _USE_HEADERS_ENV)


# --------------------------------------------------------------------------- ${VAR} values


def references(value: str) -> list[str]:
    """The names of the variables ``value`` references (``${NAME}``), in order."""
    return _REFERENCE.findall(value)


def expand_references(value: str, lookup: Callable[[str], str]) -> str:
    """``value`` with each ``${NAME}`` replaced by ``lookup(NAME)`` (which raises when the
    variable is missing); the rest is kept as written."""
    return _REFERENCE.sub(lambda found: lookup(found.group(1)), value)


def suggested_variable(server: str, target: str) -> str:
    """A variable name to suggest for a secret of ``target`` (an env variable keeps its own
    name; a header or argument gets ``<SERVER>_<TARGET>``, upper-cased)."""
    if re.fullmatch(ENV_VAR_PATTERN, target) and target.isupper():
        return target
    if target.lower() in ("authorization", "proxy-authorization"):
        target = "token"
    name = re.sub(r"[^A-Za-z0-9]+", "_", f"{server}_{target}").strip("_").upper()
    return name if re.fullmatch(ENV_VAR_PATTERN, name) else f"MCP_{name}"


def value_problem(kind: str, server: str, target: str, value: str) -> str | None:
    """Why ``value`` (of an ``env`` variable, a header or an argument named ``target``) is
    refused, in words that never repeat a secret and show the ``${VAR}`` form; else None."""
    if not isinstance(value, str):  # pydantic has refused it already
        return None
    syntax = _reference_problem(value)
    if syntax is not None:
        return syntax
    literal = _REFERENCE.sub("", value)
    variable = suggested_variable(server, target)
    bearer = "Bearer " if target.lower() in ("authorization", "proxy-authorization") else ""
    wanted = f'"{bearer}${{{variable}}}"'
    secret_shaped = (
        looks_like_credential(literal) if kind == "arg" else is_credential_value(literal)
    ) or _url_with_credentials(value)
    if secret_shaped:
        return (
            "looks like a credential (the value is not shown): secrets never go in "
            f"configuration; write {wanted} and set {variable} on the worker (an environment "
            "variable or a secrets-file entry)"
        )
    if kind == "arg" or references(value):
        return None
    if kind == "env" and _is_bare_name(target, value):
        # The form before references, where the value named the variable: refused, not
        # passed as text (the server would get "MY_GITHUB_TOKEN" as its token).
        return (
            f"is the name of a variable, the form env had before ${{VAR}} references: values "
            f'are passed as written now, so write "${{{value}}}" to read the worker variable '
            f"{value} (text of this shape that is really the value: put it in a worker "
            "variable and reference that)"
        )
    if (kind == "env" and is_credential_key(target)) or (
        kind == "header" and is_credential_name(target)
    ):
        return (
            f"is named like a credential, so its value must come from the worker: write "
            f"{wanted} and set {variable} on the worker (an environment variable or a "
            "secrets-file entry)"
        )
    return None


def secret_fields(server: McpServer) -> list[str]:
    """Fields of ``server`` holding a secret (or a name that is one): what validation refuses,
    for a server built without it (``model_construct``)."""
    found = ["url"] if server.url is not None and url_credential_parts(server.url) else []
    for field, kind, table in (("env", "env", server.env), ("headers", "header", server.headers)):
        for target, value in table.items():
            if is_credential_value(target):
                found.append(field)
            elif value_problem(kind, server.name, target, value) is not None:
                found.append(f"{field}.{target}")
    for target, name in server.headers_env.items():
        if is_credential_value(target):
            found.append("headers_env")
        elif is_credential_value(name):
            found.append(f"headers_env.{target}")
    found += [
        f"args.{index}"
        for index, value in enumerate(server.args)
        if value_problem("arg", server.name, f"arg_{index}", value) is not None
    ]
    return found


def _url_with_credentials(value: str) -> bool:
    """A URL written whole (no reference in it) carrying a credential: user information
    (``postgres://user:password@host``), a key in its query or path."""
    return "://" in value and not references(value) and bool(url_credential_parts(value))


def _is_bare_name(target: str, value: str) -> bool:
    """Whether an ``env`` value is the bare name of a variable: upper-case words joined by
    ``_`` (``MY_GITHUB_TOKEN``; a literal rarely looks so), or any upper-case name for a
    variable named like a credential (``SERVICE_TOKEN = "TOKEN"``)."""
    if _BARE_NAME.fullmatch(value):
        return True
    return is_credential_key(target) and value.isupper() and _VARIABLE.fullmatch(value) is not None


def _reference_problem(value: str) -> str | None:
    """A ``${...}`` that is not a reference to a variable by name (VS Code's ``${input:x}``
    or ``${env:X}``, an unclosed ``${``)."""
    for name in references(value):
        if is_credential_value(name):
            return "a ${...} reference " + secret_name_refused(_ENV_EXAMPLE)
        if _VARIABLE.fullmatch(name) is None:
            shown = f" (write ${{{name[4:]}}})" if name.startswith("env:") else ""
            return (
                "a ${...} reference must name a worker environment variable or secrets-file "
                f"entry (letters, digits and _){shown}"
            )
    if "${" in _REFERENCE.sub("", value):
        return "has a '${' without its closing '}'"
    return None


def _raise_problems(field: str, problems: list[tuple[str | int, str]]) -> None:
    """Report each entry's problem at its own place (``env.GITHUB_TOKEN``, ``args.2``)."""
    if problems:
        raise ValidationError.from_exception_data(
            field,
            [
                InitErrorDetails(
                    type=PydanticCustomError("value_error", "{message}", {"message": message}),
                    loc=(place,),
                    input=None,
                )
                for place, message in problems
            ],
        )


def mcp_tool_name(server: str, tool: str) -> str:
    """Our name of a server's tool: ``mcp.<server>.<tool>``."""
    return f"{MCP_PREFIX}{server}.{tool}"


def parse_mcp_name(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of ``mcp.<server>.<tool>`` (the tool part may be a glob), else None."""
    if not name.startswith(MCP_PREFIX):
        return None
    server, dot, tool = name.removeprefix(MCP_PREFIX).partition(".")
    if not dot or not server or not tool:
        return None
    return server, tool
