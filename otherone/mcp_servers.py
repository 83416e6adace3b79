"""Declarations of Model Context Protocol servers, and the names their tools get here.

An `McpServer` is either a local process spoken to over stdio (``command``, ``args``, ``env``,
``cwd``) or a remote server over streamable HTTP (``url``, ``headers_env``). Secrets never appear
in a declaration: ``env`` and ``headers_env`` map the name the server sees (an environment
variable of the child process, an HTTP header) to the *name* of a worker environment variable or
secrets-file entry that holds the value, resolved on the worker when the session starts. A
value (or key) that looks like a credential itself, and a ``url`` carrying one, are refused at
load without being echoed (the rules: `otherone.credentials`).

A server's tools are exposed as ``mcp.<server>.<tool>`` (sent to providers as
``mcp__<server>__<tool>``); access policies name them like any tool, with globs
(``mcp.git.*``). This module does no I/O: the sessions live in `otherone.activities.mcp`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from otherone.credentials import is_credential_value
from otherone.definitions import (
    ENV_VAR_PATTERN,
    is_glob,
    refuse_secret_value,
    secret_name_refused,
    url_credentials_refused,
)
from otherone.run_types import NOT_A_BOOL

__all__ = [
    "DEFAULT_MCP_TIMEOUT_SECONDS",
    "IDEMPOTENT_MAX_ATTEMPTS",
    "MCP_PREFIX",
    "MCP_SERVER_NAME_PATTERN",
    "McpServer",
    "is_glob",
    "mcp_tool_name",
    "parse_mcp_name",
]

#: Every MCP tool's name starts with this; user tools may not (`RuntimeConfig` refuses them).
MCP_PREFIX = "mcp."
#: Server names: short, lowercase, no dots (a dot separates server and tool in ``mcp.s.t``).
MCP_SERVER_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
DEFAULT_MCP_TIMEOUT_SECONDS = 60.0
#: Attempts of a call to a server marked idempotent (others get one: a retried call with side
#: effects could do them twice).
IDEMPOTENT_MAX_ATTEMPTS = 3

_HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"

#: How ``env`` and ``headers_env`` are written right, shown when a value is a secret itself.
_ENV_EXAMPLE = (
    'env = { GITHUB_PERSONAL_ACCESS_TOKEN = "GITHUB_TOKEN" } and export GITHUB_TOKEN=... on '
    "the worker"
)
_HEADERS_EXAMPLE = (
    'headers_env = { Authorization = "SEARCH_AUTH_HEADER" } and export '
    'SEARCH_AUTH_HEADER="Bearer ..." on the worker'
)
_USE_HEADERS_ENV = (
    'send them in a header instead: headers_env = { Authorization = "SEARCH_AUTH_HEADER" } '
    "names the worker variable (or secrets-file entry) that holds the header's value"
)


EnvName = Annotated[str, StringConstraints(pattern=ENV_VAR_PATTERN)]
HeaderName = Annotated[str, StringConstraints(pattern=_HEADER_NAME)]
#: The name of the worker variable / secrets-file entry an ``env`` value is read from.
EnvSource = Annotated[
    str, StringConstraints(pattern=ENV_VAR_PATTERN), refuse_secret_value(_ENV_EXAMPLE)
]
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
    args: tuple[str, ...] = ()
    #: Child environment variable → name of the worker variable / secrets-file entry holding it.
    env: dict[EnvName, EnvSource] = Field(default_factory=dict)
    #: The server's working directory (blank is refused: it would be the worker's, silently).
    cwd: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] | None = None
    url: str | None = None
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

    @model_validator(mode="before")
    @classmethod
    def _no_secret_as_key(cls, value: Any) -> Any:
        """A secret written as an ``env`` or ``headers_env`` *key*: refused here, as pydantic's
        error for a key would name the field by the key, that is by the secret."""
        if isinstance(value, Mapping):
            for field, example in (("env", _ENV_EXAMPLE), ("headers_env", _HEADERS_EXAMPLE)):
                table = value.get(field)
                if isinstance(table, Mapping) and any(
                    is_credential_value(str(key)) for key in table
                ):
                    raise ValueError(f"a name in {field} {secret_name_refused(example)}")
        return value

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
        if self.command is not None and self.headers_env:
            raise ValueError("headers_env is for remote servers (url), not command")
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
