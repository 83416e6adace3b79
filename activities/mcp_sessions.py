"""Worker-side MCP sessions: one per configured server, opened lazily, reopened after a crash.

Built on the official `mcp` SDK (`stdio_client`, `streamable_http_client`, `ClientSession`); no
protocol code here. The SDK's transports are async context managers whose task groups must be
entered and left by the same task, so each session is *owned* by a task of its own that opens
it, waits to be told to stop, and closes it; activities share the open `ClientSession` (JSON-RPC
multiplexes concurrent calls).

A server that cannot start, or whose process died, fails only the calls to it: `McpUnavailable`
names the server, and the activity turns it into a tool error for the model (or a retry for
idempotent servers). `McpSessions.aclose` stops every server, so no child process outlives the
worker's shutdown; if the worker is killed instead, a stdio server sees its stdin close and
exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp import ClientSession
from mcp import types as mcp_types
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from otherone.activities.mcp_resource_calls import list_resources, resource_tools
from otherone.activities.mcp_transports import (
    SDK_HTTP_ERROR,
    McpUnavailable,
    http_failure,
    server_transport,
)
from otherone.config import McpServerTools, McpToolRef, ToolSchema
from otherone.mcp_resources import McpServerResources
from otherone.mcp_servers import McpServer, mcp_tool_name
from otherone.tools import RESERVED_TOOL_NAMES, TOOL_NAME_PATTERN
from otherone.wire_names import encode_tool_name

__all__ = ["Discovery", "McpSessions", "McpUnavailable"]

logger = logging.getLogger(__name__)

#: A session unused for this long is pinged before a call, so a server that died while idle is
#: restarted instead of failing the call.
IDLE_PING_SECONDS = 1.0
PING_TIMEOUT_SECONDS = 5.0
#: After a server failed to start, calls and discoveries fail at once for this long; doubled
#: after each further failure in a row, up to `MAX_START_RETRY_SECONDS` (a remote server that
#: accepts connections and never answers held a root run's start for its whole startup
#: timeout every 10 s).
START_RETRY_SECONDS = 10.0
MAX_START_RETRY_SECONDS = 300.0
#: Bound on closing one session (the SDK's stdio shutdown is itself bounded: ~2 s + kill).
CLOSE_TIMEOUT_SECONDS = 10.0
#: Pages of a server's tool list read at most (100 pages of the usual 50-100 tools each).
MAX_TOOL_PAGES = 100

_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)


@dataclass(frozen=True)
class Discovery:
    """The MCP tools a new snapshot gets: per-server summary, schemas and which server runs each."""

    servers: dict[str, McpServerTools] = field(default_factory=dict)
    schemas: dict[str, ToolSchema] = field(default_factory=dict)
    refs: dict[str, McpToolRef] = field(default_factory=dict)
    resources: dict[str, McpServerResources] = field(default_factory=dict)


@dataclass(frozen=True)
class _Listing:
    """What one server listed: its tools, and its resources if it offers any."""

    tools: list[mcp_types.Tool]
    resources: McpServerResources | None = None


class _Connection:
    """One open session to one server, owned by its own task."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.session: ClientSession | None = None
        self.last_used = 0.0
        #: Calls and listings going on: a server busy with one is not dead for being slow to
        #: answer a ping (one that answers a request at a time would be killed mid-call).
        self.in_flight = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The HTTP status of the server's last error response (remote servers): the SDK's
        #: error says only "Server returned an error response".
        self.http_error: int | None = None

    async def open(self) -> ClientSession:
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(ready), name=f"mcp:{self.server.name}")
        try:
            session = await asyncio.wait_for(
                asyncio.shield(ready), self.server.startup_timeout_seconds
            )
        except TimeoutError:
            await self._abandon()
            raise McpUnavailable(
                self.server.name,
                f"it did not start within {self.server.startup_timeout_seconds:g}s",
            ) from None
        except BaseException:
            await self._abandon()
            raise
        self.session = session
        self.last_used = time.monotonic()
        return session

    async def _own(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = server_transport(self.server, self._note_http_error)
                read, write = await stack.enter_async_context(transport)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                if not ready.done():
                    ready.set_result(session)
                await self._stop.wait()
        except Exception as error:
            reason = _describe(error)
            if self.http_error is not None and SDK_HTTP_ERROR in reason:
                reason = f"it answered HTTP {self.http_error}"  # e.g. 401: a wrong token
            if not ready.done():
                ready.set_exception(McpUnavailable(self.server.name, reason))
            else:
                logger.warning("MCP server '%s' session ended: %s", self.server.name, reason)
        finally:
            self.session = None

    def _note_http_error(self, status: int) -> None:
        self.http_error = status

    async def _abandon(self) -> None:
        """Stop a start that did not finish: the owner is still starting (a server that never
        answers `initialize`), so it would not see `_stop`; waiting `CLOSE_TIMEOUT_SECONDS`
        for it would hold the run that asked (and every new root run) that much longer than
        the startup timeout. Cancelling unwinds the transport (a stdio server is stopped)."""
        self.session = None
        self._stop.set()
        task = self._task
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(BaseException):
            await task

    async def close(self) -> None:
        """Ask the owner to close the session (stops a stdio server); cancel it if it hangs."""
        self.session = None
        self._stop.set()
        task = self._task
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT_SECONDS)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except BaseException:  # the owner's own failure was already reported
            pass


class McpSessions:
    """The sessions of one worker, by server name (`RuntimeConfig.mcp_servers`)."""

    def __init__(self, servers: Mapping[str, McpServer]) -> None:
        self.servers = dict(servers)
        self._connections: dict[str, _Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: Servers that failed to start recently: until when not to try again, and why.
        #: Server name -> (held back until, why, failures in a row).
        self._failed: dict[str, tuple[float, str, int]] = {}
        self._discovering: asyncio.Future[list[_Listing | McpUnavailable]] | None = None
        self._closed = False

    def __bool__(self) -> bool:
        return bool(self.servers)

    async def session(self, name: str) -> ClientSession:
        """The server's open session, started (or restarted after a crash) when needed."""
        if self._closed:
            raise McpUnavailable(name, "the worker is shutting down")
        server = self.servers.get(name)
        if server is None:
            raise McpUnavailable(name, "it is not configured on this worker")
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            connection = self._connections.get(name)
            if connection is not None and connection.session is not None:
                if await _alive(connection):
                    connection.last_used = time.monotonic()
                    return connection.session
                logger.warning("MCP server '%s' stopped answering; restarting it", name)
            if connection is not None:
                await connection.close()
            return await self._start(server)

    async def _start(self, server: McpServer) -> ClientSession:
        """Start a session; after a failed start, fail fast for `START_RETRY_SECONDS` (a server
        that is down must not hold every new run for its whole startup timeout)."""
        until, reason, _ = self._failed.get(server.name, (0.0, "", 0))
        if time.monotonic() < until:
            raise McpUnavailable(server.name, reason, held_back=True)
        connection = _Connection(server)
        self._connections[server.name] = connection
        try:
            session = await connection.open()
        except McpUnavailable as error:
            self._connections.pop(server.name, None)
            self._hold_back(server.name, error.reason)
            raise
        self._failed.pop(server.name, None)
        return session

    def _hold_back(self, name: str, reason: str) -> None:
        """Fail the server's starts at once for a while (longer after each failure in a row)."""
        failures = self._failed.get(name, (0.0, "", 0))[2] + 1
        pause = min(START_RETRY_SECONDS * 2 ** (failures - 1), MAX_START_RETRY_SECONDS)
        self._failed[name] = (time.monotonic() + pause, reason, failures)

    async def forget(self, name: str, session: ClientSession | None = None) -> None:
        """Drop a session that failed (e.g. its process died mid-call): the next call restarts.

        With ``session``, only if it is still the registered one: a call that failed on a dead
        session must not close the fresh one another call has started meanwhile."""
        async with self._locks.setdefault(name, asyncio.Lock()):
            connection = self._connections.get(name)
            if connection is None or (session is not None and connection.session is not session):
                return
            del self._connections[name]
        await connection.close()

    @contextlib.asynccontextmanager
    async def using(self, name: str) -> AsyncIterator[ClientSession]:
        """A session for one call; a lost connection becomes `McpUnavailable` and is dropped."""
        session = await self.session(name)
        connection = self._connections.get(name)
        if connection is not None:
            connection.http_error = None
            connection.in_flight += 1
        try:
            yield session
        except MCPError as error:
            status = connection.http_error if connection is not None else None
            if error.error.code != mcp_types.CONNECTION_CLOSED:
                if status is not None and error.error.message == SDK_HTTP_ERROR:
                    raise http_failure(name, status) from error
                raise
            await self.forget(name, session)
            raise McpUnavailable(
                name, "the connection closed during the call (did the server crash?)"
            ) from error
        finally:
            if connection is not None:
                connection.in_flight -= 1
            connection = self._connections.get(name)
            if connection is not None:
                connection.last_used = time.monotonic()

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        progress: ProgressFnT | None = None,
        timeout_seconds: float | None = None,
    ) -> mcp_types.CallToolResult:
        """Call one tool; ``timeout_seconds`` bounds the call itself (`TimeoutError`), not a
        (re)start of the server, which its own ``startup_timeout_seconds`` bounds: a server
        slower to start than its calls take would otherwise never answer one after a crash.
        Cancelling the caller makes the SDK send ``notifications/cancelled``."""
        async with self.using(server) as session:
            called = session.call_tool(tool, arguments, progress_callback=progress)
            return await asyncio.wait_for(called, timeout_seconds)

    async def discover(self, taken: Iterable[str] = ()) -> Discovery:
        """List every server's tools (concurrently); a failing server contributes none.

        ``taken`` are the other tools' names: an MCP tool that providers would see under the
        same wire name as one of them (or another MCP tool) is left out, with a warning.
        """
        names = sorted(self.servers)
        listed = await asyncio.shield(self._listing())
        discovery = Discovery()
        for name, found in zip(names, listed, strict=True):
            if isinstance(found, McpUnavailable):
                discovery.servers[name] = McpServerTools(error=found.reason)
                logger.warning("%s; its tools are not offered to new runs", found)
                continue
            _add_server_tools(discovery, self.servers[name], found.tools)
            if found.resources is not None:
                _add_server_resources(discovery, self.servers[name], found.resources)
        _drop_wire_collisions(discovery, taken)
        return discovery

    def _listing(self) -> asyncio.Future[list[_Listing | McpUnavailable]]:
        """The listing in flight, or a new one: root runs that start together share one round
        of ``tools/list`` calls instead of each sending its own."""
        if self._discovering is None or self._discovering.done():
            names = sorted(self.servers)
            self._discovering = asyncio.ensure_future(
                asyncio.gather(*(self._list(name) for name in names))
            )
        return self._discovering

    async def _list(self, name: str) -> _Listing | McpUnavailable:
        timeout = self.servers[name].startup_timeout_seconds
        try:
            async with self.using(name) as session:
                tools = await asyncio.wait_for(_list_all_tools(session, name), timeout)
                resources = await asyncio.wait_for(list_resources(session, name), timeout)
                return _Listing(tools, resources)
        except McpUnavailable as error:
            return error
        except Exception as error:
            # A server that does not list its tools (in time, or in a form the SDK reads: a
            # schema without "type", say) is treated like one that did not start: its tools
            # are not offered, and no run fails for it.
            reason = "listing its tools timed out"
            if not isinstance(error, TimeoutError):
                reason = f"listing its tools failed: {_describe(error)}"
            connection = self._connections.get(name)
            if connection is not None and connection.in_flight:
                return McpUnavailable(name, f"{reason} (busy with calls)")  # not stopped
            await self.forget(name)
            self._hold_back(name, reason)
            return McpUnavailable(name, reason)

    async def aclose(self) -> None:
        """Stop every server (worker shutdown); later calls fail as unavailable."""
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(connection.close() for connection in connections))


async def _alive(connection: _Connection) -> bool:
    """True if recently used or it answers a ping (a dead stdio server fails at once)."""
    session = connection.session
    if session is None:
        return False
    if connection.in_flight or time.monotonic() - connection.last_used < IDLE_PING_SECONDS:
        return True  # busy, not dead: a call that lost its server finds out on its own
    try:
        await asyncio.wait_for(session.send_ping(), PING_TIMEOUT_SECONDS)
    except (MCPError, TimeoutError, OSError):
        return False
    return True


async def _list_all_tools(session: ClientSession, server: str) -> list[mcp_types.Tool]:
    """Every page of the server's tool list, up to `MAX_TOOL_PAGES` (a server whose cursor
    never ends would be asked until the startup timeout, thousands of times)."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise McpUnavailable(
        server,
        f"its tool list did not end after {MAX_TOOL_PAGES} pages (a cursor that never ends?)",
    )


def _add_server_tools(discovery: Discovery, server: McpServer, tools: list[mcp_types.Tool]) -> None:
    definitions = sorted(
        (tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools),
        key=lambda definition: str(definition.get("name")),
    )
    digest = hashlib.sha256(
        json.dumps(definitions, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    names: list[str] = []
    for tool in _distinct_tools(server, tools):
        name = mcp_tool_name(server.name, tool.name)
        if not _TOOL_NAME.fullmatch(name):
            logger.warning(
                "MCP server '%s': tool %r cannot be offered (the name '%s' is too long or has "
                "characters tool names cannot carry)",
                server.name,
                tool.name,
                name,
            )
            continue
        discovery.schemas[name] = ToolSchema(
            name=name,
            description=tool.description or tool.title or f"{tool.name} (MCP server {server.name})",
            parameters=_input_schema(tool),
            timeout_seconds=server.timeout_seconds,
            max_attempts=server.attempts,
        )
        discovery.refs[name] = McpToolRef(server=server.name, tool=tool.name)
        names.append(name)
    discovery.servers[server.name] = McpServerTools(tools_hash=digest, tools=tuple(names))


def _add_server_resources(
    discovery: Discovery, server: McpServer, resources: McpServerResources
) -> None:
    """A server's resources and its built-in tools to read them (`otherone.mcp_resources`)."""
    schemas, refs = resource_tools(server, set(discovery.schemas))
    discovery.schemas.update(schemas)
    discovery.refs.update(refs)
    summary = discovery.servers[server.name]
    discovery.servers[server.name] = summary.model_copy(
        update={"tools": tuple(sorted((*summary.tools, *schemas)))}
    )
    discovery.resources[server.name] = resources.model_copy(
        update={"in_prompt": server.resources_in_prompt}
    )


def _distinct_tools(server: McpServer, tools: list[mcp_types.Tool]) -> list[mcp_types.Tool]:
    """The server's tools by name, each name once. A name listed twice with different
    definitions is not offered: the model could not know which one a call reaches (the server
    picks by name), and providers refuse two functions of one name."""
    by_name: dict[str, list[mcp_types.Tool]] = {}
    for tool in tools:
        by_name.setdefault(tool.name, []).append(tool)
    distinct: list[mcp_types.Tool] = []
    for name in sorted(by_name):
        listed = by_name[name]
        if any(other != listed[0] for other in listed[1:]):
            logger.warning(
                "MCP server '%s' lists the tool %r %d times with different definitions: "
                "not offered",
                server.name,
                name,
                len(listed),
            )
            continue
        distinct.append(listed[0])
    return distinct


def _input_schema(tool: mcp_types.Tool) -> dict[str, Any]:
    """The server's input schema, as JSON (an object schema, as providers require)."""
    schema = json.loads(json.dumps(tool.input_schema))
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    schema.setdefault("type", "object")
    return schema


def _drop_wire_collisions(discovery: Discovery, taken: Iterable[str]) -> None:
    """An MCP tool providers would see under a name already used is not offered."""
    seen = {encode_tool_name(name) for name in (*taken, *RESERVED_TOOL_NAMES)}
    for name in sorted(discovery.schemas):
        wire = encode_tool_name(name)
        if wire not in seen:
            seen.add(wire)
            continue
        logger.warning("MCP tool '%s' not offered: another tool is also sent as %s", name, wire)
        ref = discovery.refs.pop(name)
        del discovery.schemas[name]
        summary = discovery.servers[ref.server]
        discovery.servers[ref.server] = summary.model_copy(
            update={"tools": tuple(tool for tool in summary.tools if tool != name)}
        )


def _describe(error: BaseException) -> str:
    """One line for the model and the log: the innermost cause of an (exception group) error."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, McpUnavailable):
        return error.reason
    if isinstance(error, FileNotFoundError):
        return f"its command was not found ({error.filename or error})"
    if isinstance(error, MCPError) and error.error.code == mcp_types.CONNECTION_CLOSED:
        return "it closed the connection while starting (did it exit?)"
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if not isinstance(error, OSError) else text
