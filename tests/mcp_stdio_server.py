"""A FastMCP server the MCP tests start over stdio (``python tests/mcp_stdio_server.py``).

It writes its pid to ``$MCP_TEST_DIR/pids/`` when it starts (so a test can check that no server
process outlives its worker), and offers: ``echo``; ``crash``, which kills the process the way a
buggy server dies (and, when asked, leaves ``$MCP_TEST_DIR/refuse``, after which it refuses to
start); ``wait_for_release``, which logs each attempt and returns once the test
creates ``$MCP_TEST_DIR/release`` (a file: the test is another process); ``show_env`` and
``fail_env``, which echo one of its environment variables in a result, an error and stderr. With
``MCP_TEST_START_SECONDS`` it waits that long before serving (a slow start).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from fastmcp import FastMCP

server = FastMCP("stdio-test")


def _workdir() -> Path:
    return Path(os.environ["MCP_TEST_DIR"])


@server.tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool
def show_env(name: str) -> str:
    """Return an environment variable of the server (a server echoing its credentials)."""
    return f"{name}={os.environ.get(name, '')}"


@server.tool
def fail_env(name: str) -> str:
    """Fail with an environment variable in the error, printing it to stderr too."""
    value = os.environ.get(name, "")
    print(f"debug: {name}={value}", file=sys.stderr, flush=True)
    raise ValueError(f"cannot use {name}={value}")


@server.tool
def crash(refuse_restart: bool = False) -> str:
    """Exit the server process at once (a crash); optionally make later starts fail."""
    if refuse_restart:
        (_workdir() / "refuse").touch()
    os._exit(3)


@server.tool
async def wait_for_release(token: str) -> str:
    """Log the attempt, then wait until the test releases the call."""
    with (_workdir() / "attempts.log").open("a") as log:
        log.write(f"{token} {os.getpid()}\n")
    while not (_workdir() / "release").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return f"released {token}"


def main() -> None:
    if (_workdir() / "refuse").exists():
        raise SystemExit("refusing to start")  # a server that cannot start
    # A server slow to start (seconds before it answers `initialize`), when asked.
    time.sleep(float(os.environ.get("MCP_TEST_START_SECONDS", "0")))
    pids = _workdir() / "pids"
    pids.mkdir(parents=True, exist_ok=True)
    (pids / str(os.getpid())).touch()
    server.run(show_banner=False, log_level="WARNING")


if __name__ == "__main__":
    main()
