"""Single keystrokes from the terminal, for the live view's inline decisions.

`otherone watch` on a terminal reads keys without Enter and without echo (cbreak mode) while
the live view is up; the terminal's mode is restored however the view ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import termios
import tty
from collections.abc import AsyncIterator


def keys_available() -> bool:
    """Whether stdin is a terminal we may read single keys from."""
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.asynccontextmanager
async def terminal_keys() -> AsyncIterator[asyncio.Queue[str]]:
    """Keys typed while the block runs, one character each; the terminal mode is restored."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    keys: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def readable() -> None:
        data = os.read(fd, 32)
        for char in data.decode(errors="ignore"):
            keys.put_nowait(char)

    tty.setcbreak(fd)
    loop.add_reader(fd, readable)
    try:
        yield keys
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
