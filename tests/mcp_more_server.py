"""A FastMCP server offering MCP beyond tools, served over streamable HTTP on 127.0.0.1 (as
`tests.mcp_http_server`): resources (text, binary, a big text, one that changes), prompts (one
with arguments) and a tool that asks the user for input (elicitation)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from fastmcp import Context, FastMCP

from tests.mcp_http_server import BLOB

BIG_TEXT = "line of a long document\n" * 8_000  # 192 KB: over half of max_result_bytes


@dataclass
class Signup:
    name: str
    age: int


class McpMoreServer:
    """The server, and what its tools and resources saw (the test waits on these)."""

    def __init__(self) -> None:
        self.app = FastMCP("more")
        self.url = ""
        #: The current text of ``notes://today`` (a test changes it mid-run).
        self.today = "first version"
        #: The last sentence of the ``reviewer`` prompt (a test changes it mid-run).
        self.closing = "Cite line numbers."
        #: What the last elicitation came back with: (action, content).
        self.elicited: list[tuple[str, Any]] = []
        self.elicitation_started = threading.Event()
        self._register()

    def asgi(self) -> Any:
        return self.app.http_app(path="/mcp")

    def _register(self) -> None:
        app = self.app

        @app.resource("notes://readme", name="readme", description="How the notes are kept")
        def readme() -> str:
            return "Notes are kept one per day."

        @app.resource("notes://today", name="today", mime_type="text/plain")
        def today() -> str:
            return self.today

        @app.resource("notes://data.bin", name="data", mime_type="application/octet-stream")
        def data() -> bytes:
            return BLOB

        @app.resource("notes://big", name="big", mime_type="text/plain")
        def big() -> str:
            return BIG_TEXT

        @app.prompt(name="reviewer", description="Instructions of a reviewer")
        def reviewer(language: str, strictness: str = "gentle") -> str:
            return f"You review {language} code. Be {strictness}. {self.closing}"

        @app.tool
        async def signup(ctx: Context) -> str:
            """Ask the user for their name and age."""
            self.elicitation_started.set()
            answer = await ctx.elicit("Who are you?", response_type=Signup)
            content = getattr(answer, "data", None)
            if content is not None and not isinstance(content, dict):
                content = {"name": content.name, "age": content.age}
            self.elicited.append((answer.action, content))
            if answer.action == "accept" and content is not None:
                return f"signed up {content['name']} ({content['age']})"
            return f"no signup: {answer.action}"
