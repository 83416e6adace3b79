"""What a running command gets: its settings, its consoles, and the signals that stop it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from otherone.client.cli.exits import Interrupted
from otherone.worker.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console

_T = TypeVar("_T")


@dataclass
class Context:
    settings: Settings
    out: Console
    err: Console
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set by a second signal: stop waiting for in-flight work (a worker's drain) at once.
    force: asyncio.Event = field(default_factory=asyncio.Event)
    #: Printed (instead of a bare "interrupted") when a signal ends the command.
    interrupt_note: str | None = None

    def on_signal(self) -> None:
        """SIGINT/SIGTERM: the first asks to stop, any further one to stop now."""
        (self.force if self.stop.is_set() else self.stop).set()

    async def interruptible(self, awaitable: Awaitable[_T]) -> _T:
        """Await ``awaitable``; a signal cancels it and raises `Interrupted`."""
        task = asyncio.ensure_future(awaitable)
        stopper = asyncio.ensure_future(self.stop.wait())
        try:
            done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            stopper.cancel()
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise Interrupted


Command = Callable[[argparse.Namespace, Context], Coroutine[Any, Any, int]]
