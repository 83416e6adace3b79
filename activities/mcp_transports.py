"""How the worker reaches an MCP server: the SDK's stdio or streamable-HTTP transport, with
the configured environment, headers and working directory, and HTTP error statuses kept (the
SDK's own error does not say which status the server answered).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, TextIO

import httpx2
from mcp import StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from otherone.credentials import is_credential_header
from otherone.mcp_servers import McpServer
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
    if server.command is not None:
        if server.cwd is not None and not os.path.isdir(server.cwd):
            # Else the start fails as if the command were missing (FileNotFoundError).
            raise McpUnavailable(server.name, f"its cwd is not a directory ({server.cwd})")
        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=_resolved(server, server.env, "env") or None,
            cwd=server.cwd,
        )
        return stdio_client(params, errlog=_errlog())
    assert server.url is not None
    headers = _resolved(server, server.headers_env, "headers_env")
    return _http_transport(server.url, headers, on_http_error)


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


def _resolved(server: McpServer, names: Mapping[str, str], field_name: str) -> dict[str, str]:
    """Values of the named worker variables / secrets-file entries (read at session start)."""
    if not names:
        return {}
    from otherone.activities.providers.secrets import read_secrets_file

    secrets: dict[str, str] | None = None
    values: dict[str, str] = {}
    for target, source in names.items():
        value = os.environ.get(source)
        if value is None:
            secrets = read_secrets_file() if secrets is None else secrets
            value = secrets.get(source)
        if value is None:
            # The field, not the name it holds: that could be a secret pasted in place of it.
            raise McpUnavailable(
                server.name,
                f"{field_name}.{target} names a variable that is neither an environment "
                "variable of the worker nor an entry of its secrets file",
            )
        # Registered for redaction: a server may echo its credentials in errors and results.
        # Every header value; an environment variable when its name or value is a
        # credential's (a path or a time zone redacted from every message would only hide
        # what went wrong; secrets-file entries are registered whatever their names).
        if field_name == "headers_env":
            remember_header(value)
        elif is_credential_header(target, value):
            remember(value)
        values[target] = value
    return values


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
