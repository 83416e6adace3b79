"""How the worker reaches an MCP server: the SDK's stdio or streamable-HTTP transport, with
the configured arguments, environment, headers (their ``${VAR}`` references resolved against
the worker's variables and secrets file, the secrets among them registered for redaction) and
working directory, and HTTP error statuses kept (the SDK's own error does not say which
status the server answered).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TextIO

import httpx2
from mcp import StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from otherone.credentials import is_credential_header, is_credential_name
from otherone.mcp_servers import McpServer, expand_references, references
from otherone.redaction import redact, remember, remember_header

#: What the SDK's error says for any HTTP error response of a remote server.
SDK_HTTP_ERROR = "Server returned an error response"
Streams = tuple[Any, Any]


class McpUnavailable(Exception):
    """The server could not be reached (start failed, process died, connection lost)."""

    def __init__(self, server: str, reason: str, *, held_back: bool = False) -> None:
        """``held_back``: the start failed moments ago and is not tried again yet; said in
        the message, not in ``reason`` (which a snapshot records: the same failure must give
        the same snapshot, or each new root run would store another)."""
        shown = f"{reason} (not retried for a few seconds)" if held_back else reason
        super().__init__(f"MCP server '{server}' is unavailable: {shown}")
        self.server = server
        self.reason = reason


def server_transport(
    server: McpServer, on_http_error: Callable[[int], None]
) -> AbstractAsyncContextManager[Streams]:
    settings = resolved_settings(server, worker_variables())
    if server.command is not None:
        if server.cwd is not None and not os.path.isdir(server.cwd):
            # Else the start fails as if the command were missing (FileNotFoundError).
            raise McpUnavailable(server.name, f"its cwd is not a directory ({server.cwd})")
        params = StdioServerParameters(
            command=server.command,
            args=settings.args,
            env=settings.env or None,
            cwd=server.cwd,
        )
        return stdio_client(params, errlog=_errlog())
    assert server.url is not None
    return _http_transport(server.url, settings.headers, on_http_error)


@contextlib.asynccontextmanager
async def _http_transport(
    url: str, headers: dict[str, str], on_http_error: Callable[[int], None]
) -> AsyncIterator[Streams]:
    # The SDK's own defaults (30 s to connect or write, 5 min between reads of a stream), plus
    # the configured headers.
    async def noted(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            on_http_error(response.status_code)

    client = httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(30.0, read=300.0),
        event_hooks={"response": [noted]},
    )
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


#: Reads a worker variable or secrets-file entry by name (None when there is none).
Lookup = Callable[[str], str | None]


def worker_variables() -> Lookup:
    """The worker's environment variables, then its secrets file's entries (the file is read
    once, when a name is not in the environment), as provider keys are found."""
    from otherone.activities.providers.secrets import read_secrets_file

    secrets: dict[str, str] | None = None

    def lookup(name: str) -> str | None:
        nonlocal secrets
        value = os.environ.get(name)
        if value is None:
            secrets = read_secrets_file() if secrets is None else secrets
            value = secrets.get(name)
        return value

    return lookup


@dataclass(frozen=True)
class ServerSettings:
    """A server's ``args``, ``env`` and headers with every reference resolved."""

    args: list[str]
    env: dict[str, str]
    headers: dict[str, str]


def resolved_settings(server: McpServer, lookup: Lookup, *, strict: bool = True) -> ServerSettings:
    """Resolve the ``${VAR}`` references of ``args``, ``env`` and ``headers`` and the names of
    ``headers_env`` (at session start), registering every secret among the values for
    redaction: a server may echo its credentials in errors, results and stderr.

    ``strict``: a missing variable makes the server unavailable, naming the field; else (when
    a worker registers what it can before any session) it is left empty.
    """
    resolver = _Resolver(server, lookup, strict)
    args = [
        resolver.expand("args", str(index), "args", value)
        for index, value in enumerate(server.args)
    ]
    env = {
        target: resolver.expand("env", target, target, value)
        for target, value in server.env.items()
    }
    headers: dict[str, str] = {}
    for target, value in server.headers.items():
        headers[target] = resolver.expand("headers", target, target, value)
        if references(value):  # literal-only headers are not secrets (load refuses those)
            remember_header(headers[target])
    for target, name in server.headers_env.items():
        found = resolver.named(target, name)
        remember_header(found)  # every header value: it is a secret by being named so
        headers[target] = found
    return ServerSettings(args=args, env=env, headers=headers)


def is_secret(field_name: str, target: str, name: str, value: str) -> bool:
    """Whether the value of ``${name}`` used for ``target`` (a child variable, a header, an
    argument) of ``field_name`` is registered for redaction: in a header, or named (by target
    or variable) or shaped like a credential."""
    return (
        field_name == "headers" or is_credential_header(target, value) or is_credential_name(name)
    )


class _Resolver:
    def __init__(self, server: McpServer, lookup: Lookup, strict: bool) -> None:
        self.server, self.lookup, self.strict = server, lookup, strict

    def expand(self, field_name: str, place: str, target: str, template: str) -> str:
        """``template`` with its references resolved; a referenced value is registered when
        ``target`` (the variable or header it goes to) or the variable's own name is named
        like a credential, or the value looks like one. Not every value: a path or a time
        zone redacted from every message would only hide what went wrong (secrets-file
        entries are registered whatever their names)."""

        def value_of(name: str) -> str:
            value = self.lookup(name)
            if value is None:
                if self.strict:
                    raise McpUnavailable(
                        self.server.name,
                        f"{field_name}.{place} references ${{{name}}}, which is neither an "
                        "environment variable of the worker nor an entry of its secrets file",
                    )
                return ""
            if is_secret(field_name, target, name, value):
                remember(value)
            return value

        return expand_references(template, value_of)

    def named(self, target: str, name: str) -> str:
        """The value of the variable ``headers_env.<target>`` names."""
        value = self.lookup(name)
        if value is None and self.strict:
            # The field, not the name it holds: that could be a secret pasted in place of it.
            raise McpUnavailable(
                self.server.name,
                f"headers_env.{target} names a variable that is neither an environment "
                "variable of the worker nor an entry of its secrets file",
            )
        return value or ""


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: the worker's stderr, through a pipe whose lines are
    redacted (`otherone.redaction`) on the way: a server that prints its environment or an
    echo of its token must not put the operator's credential into the worker's log. One pipe
    (and one forwarding thread) per process, shared by every server."""
    global _STDERR_PIPE
    with _PIPE_LOCK:
        if _STDERR_PIPE is None:
            read_end, write_end = os.pipe()
            threading.Thread(
                target=_forward_redacted, args=(read_end,), name="mcp-stderr", daemon=True
            ).start()
            _STDERR_PIPE = os.fdopen(write_end, "w", buffering=1, encoding="utf-8")
        return _STDERR_PIPE


_STDERR_PIPE: TextIO | None = None
_PIPE_LOCK = threading.Lock()


def _forward_redacted(read_end: int) -> None:
    target = sys.__stderr__ or sys.stderr
    with os.fdopen(read_end, "r", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            with contextlib.suppress(OSError, ValueError):  # stderr closed at exit
                target.write(redact(line))
                target.flush()


def http_failure(server: str, status: int) -> Exception:
    """The SDK's error for an HTTP error response, with its status: a server error (5xx: a
    gateway, an overloaded server) is the server being unavailable (retried when the server
    is idempotent); another (401, 403, 429...) is a refusal the model is told."""
    if status >= 500:
        return McpUnavailable(server, f"it answered HTTP {status}")
    return MCPError(mcp_types.INTERNAL_ERROR, f"{SDK_HTTP_ERROR} (HTTP {status})")
