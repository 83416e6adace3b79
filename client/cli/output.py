"""Output shared by the commands that follow a run: its streamed events, its output text, the
result summary, and the exit code by outcome.

stdout carries content (streamed text, final output, tables, trees, JSON); stderr carries tool
lines, agent-call lines of children, summaries, notices and errors.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from otherone.client.agent_client import RunHandle
from otherone.client.cli.exits import EXIT_FAILED, EXIT_FOR_OUTCOME
from otherone.client.console import EventPrinter
from otherone.client.records_view import print_result_summary
from otherone.runs import AgentRunResult

if TYPE_CHECKING:
    from otherone.store import Store

#: Seconds between reads of the event store while a run streams.
EVENT_POLL_SECONDS = 0.05


async def follow_run(
    handle: RunHandle, store: Store | None, printer: EventPrinter
) -> AgentRunResult:
    """Wait for the run's result while printing its events from ``store``.

    Events are read until the result is known and one more read finds nothing new, so every
    event the run wrote before it ended is shown exactly once.
    """
    result_task = asyncio.ensure_future(handle.result())
    try:
        if store is not None:
            cursor = 0
            while True:
                finished = result_task.done()
                batch = await asyncio.to_thread(store.read_events, handle.run_id, after=cursor)
                for record in batch:
                    cursor = record.sequence
                    printer.handle(record)
                if finished and not batch:
                    break
                if not batch:
                    await asyncio.wait({result_task}, timeout=EVENT_POLL_SECONDS)
        result = await result_task
    finally:
        if not result_task.done():
            result_task.cancel()
        printer.finish()
    return result


def print_output(result: AgentRunResult, printer: EventPrinter) -> None:
    """The output text on stdout unless it was streamed."""
    text = result.text
    if text and (not printer.streamed_any or printer.last_turn_text.strip() != text.strip()):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()


def print_outcome(
    err: Console, result: AgentRunResult, printer: EventPrinter, ui_url: str | None
) -> int:
    """The output text on stdout unless it was streamed, then the summary on stderr; the exit
    code by outcome."""
    print_output(result, printer)
    print_result_summary(err, result, ui_url=ui_url)
    if result.usage.agent_calls:
        err.print(Text.assemble(("  tree     ", "dim"), f"otherone tree {result.run_id}"))
    return exit_code(result)


def exit_code(result: AgentRunResult) -> int:
    return EXIT_FOR_OUTCOME.get(result.outcome, EXIT_FAILED)
