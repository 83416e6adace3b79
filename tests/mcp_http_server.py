"""A FastMCP server written for the tests, served over streamable HTTP on 127.0.0.1.

It runs in a thread with its own event loop (uvicorn), so the test's loop and the worker in it
talk to it like to any remote server. Its tools: ``slow`` (records whether MCP cancelled it),
``fail`` (an ``isError`` result), ``pixel`` (an image), ``count`` (progress notifications),
``documents`` (embedded resources and a resource link), ``grow`` (adds the tool ``late`` to
the server: its tool list changes while runs go on).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.types import Image
from mcp import types as mcp_types

from otherone.api.body_limit import replayed

#: A 1x1 PNG.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

BLOB = bytes(range(256))


class McpTestServer:
    """The server and what its tools saw (thread-safe flags the test waits on)."""

    def __init__(self) -> None:
        self.app = FastMCP("testing")
        self.slow_started = threading.Event()
        self.slow_cancelled = threading.Event()
        self.count_calls = 0
        self.url = ""
        #: HTTP statuses the next `tools/call` requests get instead of an answer (a gateway
        #: in front of the server failing, a token refused), one each, in order.
        self.refusals: list[int] = []
        self._register()

    def asgi(self) -> Any:
        """The server's app behind a gateway that answers `refusals` for tool calls."""
        inner = self.app.http_app(path="/mcp")

        async def gateway(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["method"] != "POST" or not self.refusals:
                await inner(scope, receive, send)
                return
            body, more = b"", True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            if b'"tools/call"' in body and self.refusals:
                status = self.refusals.pop(0)
                await send({"type": "http.response.start", "status": status, "headers": []})
                await send({"type": "http.response.body", "body": b"refused"})
                return
            await inner(scope, replayed(body, receive), send)

        return gateway

    def _register(self) -> None:
        app = self.app

        @app.tool
        async def slow(seconds: float) -> str:
            """Sleep for the given number of seconds."""
            self.slow_started.set()
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                self.slow_cancelled.set()
                raise
            return "slept"

        @app.tool
        def fail(reason: str) -> str:
            """Always fail with the given reason."""
            raise ToolError(f"failed on purpose: {reason}")

        @app.tool
        def pixel() -> Image:
            """A one-pixel PNG image."""
            return Image(data=PIXEL_PNG, format="png")

        @app.tool
        async def count(n: int, ctx: Context) -> int:
            """Count to n, reporting progress."""
            self.count_calls += 1
            for step in range(1, n + 1):
                await ctx.report_progress(step, n, f"step {step}")
            return n

        @app.tool
        def documents() -> list[Any]:
            """Two embedded resources (text and binary) and a link to a third."""
            return [
                mcp_types.EmbeddedResource(
                    resource=mcp_types.TextResourceContents(
                        uri="file:///notes.txt", mime_type="text/plain", text="the notes"
                    )
                ),
                mcp_types.EmbeddedResource(
                    resource=mcp_types.BlobResourceContents(
                        uri="file:///data.bin",
                        mime_type="application/octet-stream",
                        blob=base64.b64encode(BLOB).decode(),
                    )
                ),
                mcp_types.ResourceLink(uri="file:///big.csv", name="big.csv"),
            ]

        @app.tool
        def grow() -> str:
            """Add the tool 'late' to this server."""

            def late() -> str:
                """A tool that exists only after grow was called."""
                return "late"

            app.add_tool(late)
            return "grown"


class _Served(Protocol):
    url: str

    def asgi(self) -> Any: ...


ServedT = TypeVar("ServedT", bound=_Served)


@contextmanager
def serving(server: ServedT) -> Iterator[ServedT]:
    """Serve ``server`` on a free 127.0.0.1 port (``server.url``) until the block ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(server.asgi(), log_level="warning", lifespan="on", ws="none")
    uv = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(uv.serve(sockets=[sock])), name="mcp-http", daemon=True
    )
    thread.start()
    try:
        if not _wait(lambda: uv.started, 20):
            raise RuntimeError("the test MCP server did not start")
        server.url = f"http://127.0.0.1:{port}/mcp"
        yield server
    finally:
        uv.should_exit = True
        thread.join(10)
        sock.close()


def _wait(condition: object, seconds: float) -> bool:
    event = threading.Event()
    for _ in range(int(seconds / 0.02)):
        if callable(condition) and condition():
            return True
        event.wait(0.02)
    return False
