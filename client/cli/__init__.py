"""The ``otherone`` command line: a dev server, workers, and running/steering/inspecting runs.

Commands (module of ``otherone.client.cli`` in brackets)::

    otherone dev                        dev server (SQLite file, Web UI) + a worker, foreground
    otherone worker                     a worker against an existing Temporal server  [serve]
    otherone run AGENT TEXT [...]       start a run, stream its text, print the result
                                        (--follow: the live view of `watch`)
    otherone send RUN_ID TEXT [TEXT...] queue user messages for a running run
    otherone cancel RUN_ID              cancel a run (and its descendants)           [run]
    otherone show RUN_ID [--json]       a run's record
    otherone tree RUN_ID [--json]       the tree of runs (agent calls) RUN_ID belongs to
    otherone watch RUN_ID [--json]      live view of a run tree until its root ends [watching]
    otherone approvals [RUN_ID] [--json] tool calls and questions waiting for a person
    otherone approve RUN_ID CALL_ID [--arguments JSON]
    otherone deny RUN_ID CALL_ID --reason TEXT
    otherone answer RUN_ID CALL_ID TEXT  decide, or answer a human.ask question   [approvals]
    otherone sessions [--internal] [--partition P] [--json]
                                        sessions of a partition (child sessions on request)
    otherone workers [--json]           workers polling the task queue (as GET /v1/workers)
                                                                              [workers]
    otherone usage [--by KEYS] [--json] tokens, cache tokens, calls and cost, summed
    otherone spend-limit [--per-day USD | --clear]
                                        a partition's spend limit per UTC day       [usage]
    otherone webhook-secret [--rotate] [--json]
                                        the partition's webhook signing secret
                                                                         [webhook_secret]
    otherone mcp import FILE [--write TOML]
                                        an MCP client's config (Claude Desktop, VS Code,
                                        Cursor) as [mcp.<server>] tables
    otherone mcp list | tools SERVER | call SERVER TOOL [ARGS]
                                        declared servers, a server's tools, a one-off call
                                                                                      [mcp]
    otherone schedule create NAME --agent A --input TEXT (--cron EXPR | --every DURATION)
    otherone schedule list | show | pause | unpause | trigger | delete NAME
                                        runs started on a calendar (Temporal Schedules)
                                                                                [schedules]
    otherone db upgrade                 create or upgrade the store's tables
                                        (migrations)                              [sessions]
    otherone demo [--interactive] [--keep]  offline end-to-end demo (own server, worker, example
                                        team)                                         [demo]
    otherone codec-server [--port 8888] [--cors-origin URL]
                                        decrypts payloads for the Web UI
                                        (OTHERONE_ENCRYPTION_KEYS)            [codec_server]
    otherone serve [--host HOST] [--http-port PORT]
                                        the HTTP API (SSE, AG-UI) and the chat page
                                        (`otherone dev --serve`: beside the dev server)  [http_api]

Every command's arguments are in `parser` (which imports no command module: a command's module,
and with it Temporal, the store or the worker, is imported only when the command runs, so
``otherone --help`` starts fast); shared pieces: `options` (settings flags), `exits` (exit codes
and error lines), `context` (signals), `stores` and `temporal` (what commands connect to),
`output` (following a run and printing its result).

Settings (``--config``, ``--address``, ``--namespace``, ``--task-queue``, ``--database-url``,
``--data-dir``, ``--ui-port``, ``--port``, ``--max-concurrent-activities``) default to
`otherone.worker.settings.Settings` (environment variables ``OTHERONE_*`` or ``.env``). They are
accepted before or after the command; after it wins.

Output: stdout carries content (streamed text, final output, tables, trees, JSON); stderr carries
tool lines, agent-call lines of children, summaries, notices and errors. An error is one line,
``error: ...``, never a traceback (set ``OTHERONE_TRACEBACK=1`` to get one for unexpected
errors).

Exit codes:

    ====  ==================================================================
    0     success (run completed)
    1     run failed (or an unexpected error)
    2     bad usage, input or configuration
    3     run not found, or not running (send/cancel on a finished run)
    4     Temporal or the database cannot be reached
    5     run cancelled
    6     run timed out
    7     run exceeded its budget
    8     idempotency conflict (same key, different request)
    9     decision refused (already decided otherwise, or not an approver)
    130   interrupted (Ctrl-C / SIGTERM; a started run keeps going)
    ====  ==================================================================

``main()`` flushes and leaves through ``os._exit``: a process that used a Temporal client and
worker can otherwise abort at interpreter exit (temporalio/sdk-python#300).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn, cast

from otherone.client.cli.context import Command, Context
from otherone.client.cli.exits import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    Interrupted,
    classify_error,
    exit_now,
)
from otherone.client.cli.options import default_settings, settings_from
from otherone.client.cli.parser import COMMANDS, build_parser
from otherone.errors import OtheroneError

if TYPE_CHECKING:
    from rich.console import Console


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point: run, flush, and leave through ``os._exit``."""
    exit_now(run_cli(argv))


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the exit code (never raises)."""
    try:
        args = build_parser(default_settings()).parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse has printed
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    from otherone.client.console import make_console  # rich: not needed for --help

    err = make_console(sys.stderr)
    try:
        settings = settings_from(args)
        ctx = Context(settings=settings, out=make_console(sys.stdout), err=err)
        return asyncio.run(_dispatch(args, ctx))
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        return EXIT_INTERRUPTED
    except Exception as error:
        return _report(err, error, None)


async def _dispatch(args: argparse.Namespace, ctx: Context) -> int:
    target = COMMANDS[args.command]
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, ctx.on_signal)
    try:
        # The command's module is imported here, inside the error handling: a missing optional
        # dependency or a broken install is reported as one line, like any other error.
        module = importlib.import_module(f"otherone.client.cli.{target.module}")
        function = cast(Command, getattr(module, target.function))
        if target.handles_signals:
            return await function(args, ctx)
        return await ctx.interruptible(function(args, ctx))
    except Interrupted:
        ctx.err.print(ctx.interrupt_note or "interrupted", markup=False)
        return EXIT_INTERRUPTED
    except Exception as error:
        return _report(ctx.err, error, ctx.settings.temporal_address)
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


def _report(err: Console, error: BaseException, address: str | None) -> int:
    code, message = classify_error(error, address)
    unexpected = code == EXIT_FAILED and not isinstance(error, OtheroneError | CliError)
    if unexpected and os.environ.get("OTHERONE_TRACEBACK"):
        traceback.print_exception(error)
    err.print(f"error: {message}", markup=False)
    return code


__all__ = ["main", "run_cli"]
