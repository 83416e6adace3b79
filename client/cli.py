"""The ``otherone`` command line: a dev server, workers, and running/steering/inspecting runs.

Commands::

    otherone dev                        dev server (SQLite file, Web UI) + a worker, foreground
    otherone worker                     a worker against an existing Temporal server
    otherone run AGENT TEXT [...]       start a run, stream its text, print the result
                                        (--follow: the live view of `watch`)
    otherone send RUN_ID TEXT [TEXT...] queue user messages for a running run
    otherone cancel RUN_ID              cancel a run (and its descendants)
    otherone show RUN_ID [--json]       a run's record
    otherone tree RUN_ID [--json]       the tree of runs (agent calls) RUN_ID belongs to
    otherone watch RUN_ID [--json]      live view of a run tree until its root ends
    otherone sessions [--internal] [--partition P] [--json]
                                        sessions of a partition (child sessions on request)
    otherone db upgrade                 create or upgrade the store's tables (migrations)
    otherone demo [--keep]              offline end-to-end demo (own server, worker, example team)
    otherone codec-server [--port 8888] [--cors-origin URL]
                                        decrypts payloads for the Web UI (OTHERONE_ENCRYPTION_KEYS)

Settings (``--config``, ``--address``, ``--namespace``, ``--task-queue``, ``--database-url``,
``--data-dir``, ``--ui-port``, ``--port``, ``--max-concurrent-activities``) default to
`otherone.worker.settings.Settings` (environment variables ``OTHERONE_*`` or ``.env``). They are
accepted
before or after the command; after it wins.

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
    130   interrupted (Ctrl-C / SIGTERM; a started run keeps going)
    ====  ==================================================================

``main()`` flushes and leaves through ``os._exit``: a process that used a Temporal client and
worker can otherwise abort at interpreter exit (temporalio/sdk-python#300).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import textwrap
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import quote

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from rich.console import Console
from rich.table import Table
from rich.text import Text

from otherone.client.console import (
    EventPrinter,
    make_console,
    print_record,
    print_result_summary,
    print_run_tree,
)
from otherone.errors import (
    ConfigurationError,
    IdempotencyConflictError,
    InvalidRequestError,
    OtheroneError,
    RunNotActiveError,
    RunNotFoundError,
    UnavailableError,
)
from otherone.runs import DEFAULT_PARTITION, AgentRunResult, RunOutcome, RunRecord
from otherone.worker.settings import Settings
from otherone.worker.telemetry import WorkerTelemetry, shutdown_tracing, worker_telemetry

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.converter import PayloadCodec
    from temporalio.service import RPCError

    from otherone.client.agent_client import AgentClient, RunHandle
    from otherone.config import RuntimeConfig
    from otherone.runs import AgentRunRequest
    from otherone.store import SessionInfo, Store
    from otherone.worker.app import AgentWorker
    from otherone.worker.codec import EncryptionCodec
    from otherone.worker.codec_server import CodecServer
    from otherone.worker.shutdown import ActivityTracker, ShutdownReport

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4
EXIT_CANCELLED = 5
EXIT_TIMED_OUT = 6
EXIT_BUDGET_EXCEEDED = 7
EXIT_IDEMPOTENCY_CONFLICT = 8
EXIT_INTERRUPTED = 130

EXIT_FOR_OUTCOME = {
    RunOutcome.COMPLETED: EXIT_OK,
    RunOutcome.FAILED: EXIT_FAILED,
    RunOutcome.CANCELLED: EXIT_CANCELLED,
    RunOutcome.TIMED_OUT: EXIT_TIMED_OUT,
    RunOutcome.BUDGET_EXCEEDED: EXIT_BUDGET_EXCEEDED,
}

EXIT_CODES_HELP = """\
exit codes:
  0    success (run completed)
  1    run failed
  2    bad usage, input or configuration
  3    run not found, or not running
  4    Temporal or the database cannot be reached
  5    run cancelled
  6    run timed out
  7    run exceeded its budget
  8    idempotency conflict (same key, different request)
  130  interrupted (a started run keeps going)"""

SETTINGS_HELP = (
    "Settings default to environment variables OTHERONE_<NAME> (or a .env file) and may be "
    "given before or after the command."
)

#: Seconds to wait for Temporal to answer the first call before giving up with exit code 4.
CONNECT_TIMEOUT = 10.0
#: Seconds between reads of the event store while a run streams.
EVENT_POLL_SECONDS = 0.05
#: Seconds `tree` waits for Temporal's visibility to list children a run has called.
TREE_SETTLE_SECONDS = 2.0
DEMO_AGENT = "coordinator"
DEMO_QUESTION = "Plan a day in Paris: check the weather and draft a short note."
DEMO_TASK_QUEUE = "otherone-demo"

_T = TypeVar("_T")


# --------------------------------------------------------------------------- errors


class CliError(Exception):
    """An expected failure of a command: one line for stderr and an exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived while a command was working."""


def classify_error(error: BaseException, address: str | None = None) -> tuple[int, str]:
    """Exit code and one-line message for an exception a command raised."""
    from temporalio.service import RPCError

    from otherone.store import StoreError
    from otherone.worker.codec import PayloadDecryptionError
    from otherone.worker.devserver import DevServerError

    unreachable = f"cannot reach Temporal at {address or '?'} (is `otherone dev` running?)"
    code: int
    match error:
        case CliError():
            code, message = error.code, error.message
        case IdempotencyConflictError():
            code, message = EXIT_IDEMPOTENCY_CONFLICT, error.message
        case RunNotFoundError() | RunNotActiveError():
            code, message = EXIT_NOT_FOUND, error.message
        case InvalidRequestError() | ConfigurationError():
            code, message = EXIT_USAGE, error.message
        case UnavailableError():
            code, message = EXIT_UNAVAILABLE, error.message
        case PayloadDecryptionError():
            code, message = EXIT_USAGE, error.message
        case KeyError() if "binary/encrypted" in str(error):  # the converter meets ciphertext
            code, message = (
                EXIT_USAGE,
                "the run's payloads are encrypted: set OTHERONE_ENCRYPTION_KEYS (or "
                "OTHERONE_ENCRYPTION_KEY_FILE) to the keys its workers use",
            )
        case StoreError():
            code, message = EXIT_UNAVAILABLE, f"database: {error.message}"
        case OtheroneError():
            code, message = EXIT_FAILED, error.message
        case ValidationError():
            code, message = EXIT_USAGE, _validation_message(error)
        case RPCError():
            code, message = _classify_rpc_error(error, unreachable)
        case DevServerError():
            code, message = EXIT_UNAVAILABLE, str(error)
        case _ if _is_database_error(error):
            code, message = EXIT_UNAVAILABLE, f"database: {error}"
        case _:
            code, message = EXIT_FAILED, f"unexpected {type(error).__name__}: {error}"
    return code, _one_line(message)


def _classify_rpc_error(error: RPCError, unreachable: str) -> tuple[int, str]:
    from temporalio.service import RPCStatusCode

    match error.status:
        case RPCStatusCode.UNAVAILABLE | RPCStatusCode.DEADLINE_EXCEEDED:
            return EXIT_UNAVAILABLE, unreachable
        case RPCStatusCode.NOT_FOUND:
            return EXIT_NOT_FOUND, f"not found: {error.message}"
        case RPCStatusCode.INVALID_ARGUMENT:
            return EXIT_USAGE, f"rejected by Temporal: {error.message}"
        case _:
            return EXIT_FAILED, f"Temporal error ({error.status.name}): {error.message}"


def _is_database_error(error: BaseException) -> bool:
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(error, SQLAlchemyError)


def _validation_message(error: ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    location = ".".join(str(part) for part in first["loc"]) or error.title
    return f"{location}: {first['msg']}"


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class _Option:
    flag: str
    field: str
    metavar: str


#: Command-line options for every `Settings` field (help text comes from the field).
SETTING_OPTIONS = (
    _Option("--config", "config", "PATH"),
    _Option("--address", "temporal_address", "HOST:PORT"),
    _Option("--namespace", "namespace", "NAME"),
    _Option("--task-queue", "task_queue", "NAME"),
    _Option("--database-url", "database_url", "URL"),
    _Option("--data-dir", "data_dir", "DIR"),
    _Option("--ui-port", "ui_port", "PORT"),
    _Option("--port", "temporal_port", "PORT"),
    _Option("--max-concurrent-activities", "max_concurrent_activities", "N"),
)
#: Options of `otherone worker` only: task queues and roles (`otherone.worker.queues`).
WORKER_OPTIONS = (
    _Option("--roles", "worker_roles", "ROLES"),
    _Option("--model-task-queue", "model_task_queue", "NAME"),
    _Option("--tool-task-queue", "tool_task_queue", "NAME"),
    _Option("--max-concurrent-model-calls", "max_concurrent_model_calls", "N"),
    _Option("--max-concurrent-tool-calls", "max_concurrent_tool_calls", "N"),
)


def _defaults() -> Settings | None:
    try:
        return Settings()
    except ValidationError:
        return None  # reported (with exit code 2) once the command line is parsed


def _option_help(option: _Option, defaults: Settings | None) -> str:
    info = Settings.model_fields[option.field]
    value = getattr(defaults, option.field) if defaults is not None else info.default
    shown = "(none)" if value is None else str(value)
    if isinstance(value, tuple):  # e.g. worker roles: shown as they are written
        shown = ",".join(str(item) for item in value)
    env = f"OTHERONE_{option.field.upper()}"
    return f"{info.description} [{env}; now: {shown}]".replace("%", "%%")


def environment_help() -> str:
    """Every `Settings` field as its environment variable: flag, meaning and default."""
    flags = {option.field: option.flag for option in (*SETTING_OPTIONS, *WORKER_OPTIONS)}
    lines = [
        "settings (environment variables, or a .env file in the working directory; an empty "
        "value\nmeans unset; a flag wins over its variable):"
    ]
    for name, info in Settings.model_fields.items():
        flag = f"  ({flags[name]})" if name in flags else ""
        lines.append(f"  OTHERONE_{name.upper()}{flag}")
        text = f"{info.description or ''} Default: {_default_text(info)}."
        lines += textwrap.wrap(text, 76, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines).replace("%", "%%")


def _default_text(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "see above"
    value = info.default
    if value is None:
        return "unset"
    if isinstance(value, tuple | list):
        return ",".join(str(item) for item in value)
    return str(value)


def settings_from(args: argparse.Namespace) -> Settings:
    """`Settings` from the environment, overridden by the options given on the command line."""
    overrides = {
        option.field: getattr(args, option.field)
        for option in (*SETTING_OPTIONS, *WORKER_OPTIONS)
        if hasattr(args, option.field)
    }
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise CliError(EXIT_USAGE, _settings_error(error)) from None


def _settings_error(error: ValidationError) -> str:
    """One line naming the variable (and flag) of the first invalid setting, with the value
    given unless the setting is a secret."""
    first = error.errors(include_url=False)[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    if name not in Settings.model_fields:
        return f"settings: {first['msg']}"
    flags = {option.field: option.flag for option in (*SETTING_OPTIONS, *WORKER_OPTIONS)}
    env = f"OTHERONE_{name.upper()}"
    where = f"{flags[name]} / {env}" if name in flags else env
    secret = "SecretStr" in repr(Settings.model_fields[name].annotation)
    given = "" if secret or "input" not in first else f" (got {str(first['input'])[:60]!r})"
    return f"{where}: {first['msg']}{given}"


def _config_path(settings: Settings, err: Console) -> Path:
    """The configuration to load; the example one when the default file is absent."""
    from otherone.examples import EXAMPLE_CONFIG

    path = settings.config
    if path.is_file():
        return path
    if "config" in settings.model_fields_set:
        raise CliError(EXIT_USAGE, f"config file {path} not found")
    err.print(f"note: {path} not found; using the example configuration {EXAMPLE_CONFIG}")
    return EXAMPLE_CONFIG


def _load_config(path: Path) -> RuntimeConfig:
    from otherone.toml_config import load_config

    return load_config(path)


# --------------------------------------------------------------------------- parser


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps prose; keeps text that has its own line breaks (the exit-code table) as it is."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser(defaults: Settings | None = None) -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    group = common.add_argument_group("settings", SETTINGS_HELP)
    for option in SETTING_OPTIONS:
        group.add_argument(
            option.flag,
            dest=option.field,
            metavar=option.metavar,
            default=argparse.SUPPRESS,
            help=_option_help(option, defaults),
        )
    formatter = _HelpFormatter
    parser = _Parser(
        prog="otherone",
        description="Otherone on Temporal: durable multi-agent LLM runs.",
        epilog=EXIT_CODES_HELP,
        formatter_class=formatter,
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=EXIT_CODES_HELP,
            formatter_class=formatter,
            parents=[common],
        )

    dev = command(
        "dev",
        "run a local Temporal dev server and a worker (foreground)",
        "Start a Temporal dev server (state in <data-dir>/temporal.db, Web UI on --ui-port, "
        "gRPC on 127.0.0.1:--port) and a worker for --config on --task-queue. Ctrl-C stops "
        "the worker, then the server. Uses the example configuration when the default "
        "config file does not exist.",
    )
    worker = command(
        "worker",
        "run a worker against an existing Temporal server",
        "Run a worker for --config on --task-queue against the Temporal server at --address, "
        "with the store at --database-url. SIGTERM / Ctrl-C: stop polling, let in-flight "
        "activities finish for up to OTHERONE_SHUTDOWN_GRACE_SECONDS, exit 0 (a second signal "
        "exits at once). With "
        "--model-task-queue / --tool-task-queue (the same on every worker), model and tool "
        "calls run on queues of their own and --roles picks what this process serves.",
    )
    queues = worker.add_argument_group("task queues and roles")
    for option in WORKER_OPTIONS:
        queues.add_argument(
            option.flag,
            dest=option.field,
            metavar=option.metavar,
            default=argparse.SUPPRESS,
            help=_option_help(option, defaults),
        )
    for process in (dev, worker):  # the commands that run a worker list every setting
        process.epilog = f"{environment_help()}\n\n{EXIT_CODES_HELP}"
    run = command(
        "run",
        "start a run and stream its output",
        "Start a run of AGENT with TEXT, stream the model's text to stdout (tool calls as dim "
        "lines on stderr), then print the result summary. Exit code by outcome.",
    )
    run.add_argument("agent", metavar="AGENT", help="id of the entry agent")
    run.add_argument("text", metavar="TEXT", help="the user message")
    run.add_argument("--session", metavar="ID", help="continue (or create) this session")
    run.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="start at most once per key (the same key returns the same run)",
    )
    run.add_argument("--partition", metavar="P", help="partition (tenant) key")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument(
        "--json",
        action="store_true",
        help="print only the AgentRunResult as one JSON line (no streaming)",
    )
    mode.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no streaming, no summary: print only the output text",
    )
    run.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="show the live view of `otherone watch` (the whole tree: status, text, tools, "
        "usage; a table per run at the end); with --json: the event envelopes, one a line",
    )
    send = command(
        "send",
        "queue user messages for a running run",
        "Queue one or more user messages for RUN_ID; the run takes them at its next safe point.",
    )
    send.add_argument("run_id", metavar="RUN_ID")
    send.add_argument("texts", metavar="TEXT", nargs="+")
    cancel = command(
        "cancel",
        "cancel a run",
        "Request cancellation of RUN_ID (and, through Temporal, of its descendants).",
    )
    cancel.add_argument("run_id", metavar="RUN_ID")
    show = command("show", "show a run's record", "Show the current record of RUN_ID.")
    show.add_argument("run_id", metavar="RUN_ID")
    show.add_argument("--json", action="store_true", help="print the RunRecord as JSON")
    tree = command(
        "tree",
        "show the tree of runs a run belongs to",
        "Show the whole tree of runs that RUN_ID belongs to (its root and every agent call below "
        "it, a child run each): agent, call id, status, calls, tokens and duration per run.",
    )
    tree.add_argument("run_id", metavar="RUN_ID", help="the root run, or any run of its tree")
    tree.add_argument(
        "--json", action="store_true", help="print the RunRecords as a JSON array (root first)"
    )
    watch = command(
        "watch",
        "follow a tree of runs live",
        "Follow the tree of runs RUN_ID belongs to (from its first event, read from the store at "
        "--database-url) until its root ends: on a terminal, a live view of the runs (status, "
        "turn, usage), the streaming text of active runs and recent tool and agent calls; "
        "otherwise plain lines as `otherone run` prints them. Then a table per run (status, "
        "model/tool/agent calls, tokens, duration) and the result summary. Exit code by the "
        "root's outcome, as `otherone run`. Ctrl-C stops watching; the run keeps going.",
    )
    watch.add_argument("run_id", metavar="RUN_ID", help="the root run, or any run of its tree")
    watch.add_argument(
        "--json",
        action="store_true",
        help="print the raw event envelopes (EventRecord), one JSON object a line",
    )
    sessions = command(
        "sessions",
        "list the sessions of a partition",
        "List the sessions (conversations) of --partition in the store at --database-url, "
        "oldest first, with the run holding each one's writer lease. The internal sessions of "
        "child runs (agent calls) are hidden unless --internal.",
    )
    sessions.add_argument(
        "--partition", metavar="P", default=DEFAULT_PARTITION, help="partition (tenant) key"
    )
    sessions.add_argument(
        "--internal", action="store_true", help="also list the internal sessions of child runs"
    )
    sessions.add_argument("--json", action="store_true", help="print the sessions as a JSON array")
    db = command(
        "db",
        "manage the store's database",
        "Maintain the store at --database-url (a SQLite file or PostgreSQL).",
    )
    db_actions = db.add_subparsers(dest="db_action", metavar="ACTION", required=True)
    db_actions.add_parser(
        "upgrade",
        help="create or upgrade the store's tables",
        description="Apply the store's pending migrations (creating the tables on an empty "
        "database). Workers and `otherone dev` do this when they start; this does it without "
        "them. Safe while other processes use or upgrade the same database.",
        epilog=EXIT_CODES_HELP,
        formatter_class=formatter,
        parents=[common],
    )
    demo = command(
        "demo",
        "offline end-to-end demo",
        "Start an in-memory Temporal dev server (with Web UI) on free ports, a worker with the "
        f"example configuration and a temporary store, run `{DEMO_AGENT}` with "
        f'"{DEMO_QUESTION}" (it calls `researcher` and `writer` in parallel), stream it, print '
        "the run tree, the result and the Web UI link, then stop everything. Needs no network "
        "and no API key.",
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the server running after the run (to browse the Web UI) until Ctrl-C",
    )
    _add_codec_server_parser(commands, formatter)
    return parser


def _add_codec_server_parser(commands: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """``codec-server``: without the common settings options, whose ``--port`` is Temporal's."""
    from otherone.worker.codec_server import DEFAULT_PORT

    codec = commands.add_parser(
        "codec-server",
        help="serve Temporal's codec protocol so the Web UI shows encrypted payloads",
        description="Serve POST /decode and /encode (Temporal's codec server protocol) with the "
        "keys of OTHERONE_ENCRYPTION_KEYS / OTHERONE_ENCRYPTION_KEY_FILE, for the Web UI "
        "(`temporal server start-dev --ui-codec-endpoint URL`, or OTHERONE_UI_CODEC_ENDPOINT for "
        "`otherone dev`) and the CLI (`temporal workflow show --codec-endpoint URL`). No "
        "authentication unless OTHERONE_CODEC_SERVER_TOKEN is set (then 'Authorization: Bearer "
        "<token>' is required): anyone who can reach the port can decrypt, so keep it on "
        "127.0.0.1. Ctrl-C stops it.",
        epilog=EXIT_CODES_HELP,
        formatter_class=formatter,
    )
    codec.add_argument(
        "--port",
        dest="codec_port",
        type=int,
        default=DEFAULT_PORT,
        metavar="PORT",
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    codec.add_argument(
        "--host", default="127.0.0.1", metavar="HOST", help="address to bind (default 127.0.0.1)"
    )
    codec.add_argument(
        "--cors-origin",
        action="append",
        metavar="URL",
        help="origin of a Web UI allowed to call it (repeatable; default "
        "http://127.0.0.1:<OTHERONE_UI_PORT> and http://localhost:<OTHERONE_UI_PORT>)",
    )


# --------------------------------------------------------------------------- runtime context


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


async def _connect(
    address: str,
    namespace: str,
    telemetry: WorkerTelemetry | None = None,
    *,
    codec: PayloadCodec | None = None,
    settings: Settings | None = None,
) -> Client:
    """A client whose namespace answers, or `CliError` (4: unreachable, 2: no such namespace).

    ``telemetry`` (workers only) adds tracing and the Prometheus metrics runtime; ``codec``
    (`_payload_codec`) encrypts payloads; ``settings`` give TLS and API key (not for the
    embedded dev server)."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    from otherone.worker.app import connect
    from otherone.worker.connection import TemporalConnection, temporal_connection

    unreachable = f"cannot reach Temporal at {address} (is `otherone dev` running?)"
    connection = temporal_connection(settings) if settings is not None else TemporalConnection()
    try:
        traced = telemetry is not None and telemetry.tracing
        runtime = telemetry.runtime if telemetry is not None else None
        client = await asyncio.wait_for(
            connect(
                address,
                namespace,
                tracing=traced,
                runtime=runtime,
                payload_codec=codec,
                tls=connection.tls,
                api_key=connection.api_key,
            ),
            CONNECT_TIMEOUT,
        )
        await asyncio.wait_for(
            client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=namespace)
            ),
            CONNECT_TIMEOUT,
        )
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise CliError(
                EXIT_USAGE, f"namespace '{namespace}' does not exist on Temporal at {address}"
            ) from None
        raise CliError(EXIT_UNAVAILABLE, unreachable) from None
    except (RuntimeError, OSError, TimeoutError):
        raise CliError(EXIT_UNAVAILABLE, unreachable) from None
    return client


def _payload_codec(settings: Settings) -> EncryptionCodec | None:
    """The encryption codec of ``OTHERONE_ENCRYPTION_KEYS`` / ``_KEY_FILE`` (None: no keys).

    A bad key raises `ConfigurationError` naming the setting (exit code 2)."""
    from otherone.worker.codec import codec_from_settings

    return codec_from_settings(settings)


def _ui_codec_args(settings: Settings) -> list[str]:
    """``otherone dev``'s Web UI decodes payloads through ``OTHERONE_UI_CODEC_ENDPOINT``."""
    endpoint = settings.ui_codec_endpoint
    return ["--ui-codec-endpoint", endpoint] if endpoint else []


def _open_store(url: str, *, migrate: bool = True) -> Store:
    from sqlalchemy.exc import ArgumentError

    from otherone.store import Store

    try:
        return Store.open(url, migrate=migrate)
    except ArgumentError as error:
        raise CliError(EXIT_USAGE, f"--database-url: {error}") from None


def _event_store(settings: Settings, err: Console) -> Store | None:
    """The store to stream events from; None when a default SQLite file does not exist."""
    store = _existing_store(settings, migrate=True)
    if store is None:
        err.print(
            f"note: no event store at {settings.store_url().removeprefix('sqlite:///')}: the "
            "output is printed when the run ends (give --database-url / --data-dir as the "
            "worker's to stream)",
            style="dim",
        )
    return store


def _ui_base(settings: Settings) -> str:
    host = settings.temporal_address.rpartition(":")[0] or "127.0.0.1"
    if host in ("0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{settings.ui_port}"


async def _ui_link(client: Client, base: str, namespace: str, run_id: str) -> str:
    """Web UI link of the workflow ``run_id`` (with its Temporal run id when it answers)."""
    from temporalio.service import RPCError

    link = f"{base}/namespaces/{quote(namespace, safe='')}/workflows/{quote(run_id, safe='')}"
    try:
        description = await client.get_workflow_handle(run_id).describe()
    except RPCError:
        return link
    return f"{link}/{quote(description.run_id, safe='')}/history"


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


def _print_output(result: AgentRunResult, printer: EventPrinter) -> None:
    """The output text on stdout unless it was streamed."""
    text = result.text
    if text and (not printer.streamed_any or printer.last_turn_text.strip() != text.strip()):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()


def _print_outcome(
    ctx: Context, result: AgentRunResult, printer: EventPrinter, ui_url: str | None
) -> int:
    """The output text on stdout unless it was streamed, then the summary on stderr."""
    _print_output(result, printer)
    print_result_summary(ctx.err, result, ui_url=ui_url)
    if result.usage.agent_calls:
        ctx.err.print(Text.assemble(("  tree     ", "dim"), f"otherone tree {result.run_id}"))
    return EXIT_FOR_OUTCOME.get(result.outcome, EXIT_FAILED)


async def load_tree(agents: AgentClient, run_id: str) -> tuple[RunRecord, list[RunRecord]]:
    """The record of ``run_id`` and every record of its root's tree (root first).

    Temporal lists children through its visibility store, which may lag a little behind: while
    some run has made more agent calls than the listing shows children for it, list again (for
    at most `TREE_SETTLE_SECONDS`; a call refused before its child started has no child).
    """
    record = await agents.get_run(run_id)  # RunNotFoundError (exit 3) for an unknown id
    loop = asyncio.get_running_loop()
    settle_until = loop.time() + TREE_SETTLE_SECONDS
    while True:
        records = await agents.list_run_tree(record.root_run_id)
        children: dict[str, int] = {}
        for found in records:
            if found.parent_run_id is not None:
                children[found.parent_run_id] = children.get(found.parent_run_id, 0) + 1
        missing = any(found.usage.agent_calls > children.get(found.run_id, 0) for found in records)
        if not missing or loop.time() >= settle_until:
            return record, records
        await asyncio.sleep(0.1)


async def _serve(worker: AgentWorker, ctx: Context, tracker: ActivityTracker) -> ShutdownReport:
    """Run ``worker`` until a signal, then drain it (`otherone.worker.shutdown.serve`): in-flight
    activities get ``shutdown_grace_seconds`` to finish; a second signal stops waiting."""
    from otherone.worker.shutdown import WorkerFailed, serve

    def notify(message: str) -> None:
        ctx.err.print(message, style="dim", markup=False)

    try:
        return await serve(
            worker.workers,
            ctx.stop,
            tracker=tracker,
            health_file=ctx.settings.health_file,
            notify=notify,
            force=ctx.force,
        )
    except WorkerFailed as error:
        raise CliError(EXIT_FAILED, str(error)) from None


@contextlib.asynccontextmanager
async def _event_pruning(settings: Settings, store: Store) -> AsyncIterator[None]:
    """Prune old events in the background while the worker serves (`otherone.worker.retention`)."""
    if not settings.event_retention_hours:
        yield
        return
    from otherone.worker.retention import prune_events_periodically

    retention = timedelta(hours=settings.event_retention_hours)
    task = asyncio.create_task(prune_events_periodically(store, retention))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _activity_tracker() -> ActivityTracker:
    from otherone.worker.shutdown import ActivityTracker

    return ActivityTracker()


def _leave_if_unclean(report: ShutdownReport) -> None:
    """After a drain that left activities running (they ignored cancellation, e.g. a tool
    blocked in a thread, or a second signal came): exit 0 at once. `asyncio.run`'s cleanup
    would otherwise wait for their threads for ever; Temporal retries them elsewhere."""
    if not report.clean:
        _exit_now(EXIT_OK)


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


# --------------------------------------------------------------------------- commands


async def cmd_dev(args: argparse.Namespace, ctx: Context) -> int:
    from otherone.worker.app import build_worker
    from otherone.worker.devserver import DevServer

    settings = ctx.settings
    config_path = _config_path(settings, ctx.err)
    config = _load_config(config_path)
    codec = _payload_codec(settings)
    for port, flag in ((settings.temporal_port, "--port"), (settings.ui_port, "--ui-port")):
        if _port_in_use(port):
            raise CliError(
                EXIT_USAGE,
                f"port {port} is in use (another `otherone dev`?); choose one with {flag}",
            )
    data_dir = settings.data_dir.resolve()
    store = _open_store(settings.store_url())
    server = DevServer(
        port=settings.temporal_port,
        ui_port=settings.ui_port,
        db_file=data_dir / "temporal.db",
        namespace=settings.namespace,
        log_file=data_dir / "temporal.log",
        extra_args=_ui_codec_args(settings),
    )
    try:
        ctx.err.print("starting the Temporal dev server…", style="dim")
        await server.start()
        telemetry = worker_telemetry(settings)
        tracker = _activity_tracker()
        client = await _connect(server.address, settings.namespace, telemetry, codec=codec)
        worker = build_worker(
            client,
            config,
            store,
            task_queue=settings.task_queue,
            max_concurrent_activities=settings.max_concurrent_activities,
            interceptors=[*telemetry.interceptors(config), tracker],
            graceful_shutdown_timeout=timedelta(seconds=settings.shutdown_grace_seconds),
            model_task_queue=settings.model_task_queue,
            tool_task_queue=settings.tool_task_queue,
            max_concurrent_model_calls=settings.max_concurrent_model_calls,
            max_concurrent_tool_calls=settings.max_concurrent_tool_calls,
        )
        rows = [
            ("temporal", f"{server.address}  (namespace {settings.namespace})"),
            ("web ui", server.ui_url or "-"),
            ("task queue", settings.task_queue),
            ("config", str(config_path)),
            ("state", f"{server.db_file}  (server log {data_dir / 'temporal.log'})"),
            ("store", _safe_url(settings.store_url())),
        ]
        for label, value in rows:
            ctx.out.print(f"{label:<11} {value}", markup=False)
        if settings.temporal_address != server.address:
            ctx.err.print(
                f"note: other commands must use --address {server.address} "
                f"(OTHERONE_TEMPORAL_ADDRESS is {settings.temporal_address})"
            )
        ctx.out.print("ready: Ctrl-C to stop", style="dim")
        sys.stdout.flush()
        async with _event_pruning(settings, store):
            report = await _serve(worker, ctx, tracker)
    finally:
        ctx.err.print("stopping the Temporal dev server…", style="dim")
        await server.stop()
        store.close()
    _leave_if_unclean(report)
    return EXIT_OK


async def cmd_worker(args: argparse.Namespace, ctx: Context) -> int:
    from otherone.worker.app import build_worker

    settings = ctx.settings
    config_path = _config_path(settings, ctx.err)
    config = _load_config(config_path)
    codec = _payload_codec(settings)
    store = _open_store(settings.store_url())
    try:
        telemetry = worker_telemetry(settings)
        tracker = _activity_tracker()
        client = await _connect(
            settings.temporal_address, settings.namespace, telemetry, codec=codec, settings=settings
        )
        worker = build_worker(
            client,
            config,
            store,
            task_queue=settings.task_queue,
            max_concurrent_activities=settings.max_concurrent_activities,
            interceptors=[*telemetry.interceptors(config), tracker],
            graceful_shutdown_timeout=timedelta(seconds=settings.shutdown_grace_seconds),
            model_task_queue=settings.model_task_queue,
            tool_task_queue=settings.tool_task_queue,
            roles=settings.worker_roles,
            max_concurrent_model_calls=settings.max_concurrent_model_calls,
            max_concurrent_tool_calls=settings.max_concurrent_tool_calls,
        )
        ctx.err.print(
            f"worker on task queue {', '.join(worker.task_queues)} "
            f"(roles {','.join(settings.worker_roles)}) at {settings.temporal_address} "
            f"(namespace {settings.namespace}, config {config_path}, "
            f"store {_safe_url(settings.store_url())}); Ctrl-C to stop",
            markup=False,
        )
        async with _event_pruning(settings, store):
            report = await _serve(worker, ctx, tracker)
        _leave_if_unclean(report)
    finally:
        store.close()
    return EXIT_OK


def _request_from(args: argparse.Namespace) -> AgentRunRequest:
    from otherone.client.agent_client import build_request

    fields: dict[str, Any] = {"entry_agent": args.agent, "input": args.text}
    if args.session is not None:
        fields["session"] = {"session_id": args.session}
    if args.partition is not None:
        fields["runtime_context"] = {"partition_key": args.partition}
    # Always start by key (a random one if none was given): the run id is then known before
    # the start RPC, so an interrupt at any moment can still name the run, and a start that is
    # retried after a network error cannot create a second run.
    given = args.idempotency_key  # an explicit "" is refused by validation, not replaced
    fields["idempotency_key"] = f"cli-{uuid.uuid4().hex}" if given is None else given
    return build_request(**fields)


async def cmd_run(args: argparse.Namespace, ctx: Context) -> int:
    from otherone.client.agent_client import AgentClient, root_run_id

    settings = ctx.settings
    request = _request_from(args)  # validate before touching the network
    if args.follow and args.quiet:
        raise CliError(EXIT_USAGE, "--follow: not allowed with --quiet")
    streaming = not (args.json or args.quiet)
    codec = _payload_codec(settings)
    client = await _connect(
        settings.temporal_address, settings.namespace, codec=codec, settings=settings
    )
    store: Store | None = None
    if args.follow:
        store = _watch_store(settings)  # refused before the run starts
    elif streaming:
        store = _event_store(settings, ctx.err)
    else:
        store = _existing_store(settings)  # to read an output stored as an artifact
    try:
        agents = AgentClient(client, task_queue=settings.task_queue, store=store)
        run_id = root_run_id(request)
        ctx.interrupt_note = (
            f"interrupted: run {run_id} keeps going "
            f"(`otherone show {run_id}`, `otherone cancel {run_id}`)"
        )
        handle = await agents.start(request)
        if args.follow:
            return await _watch(ctx, agents, handle.run_id, json_lines=args.json)
        if not streaming:
            result = await handle.result()
            if args.json:
                sys.stdout.write(result.model_dump_json() + "\n")
            else:
                if result.text:
                    sys.stdout.write(result.text + "\n")
                if result.failure is not None:
                    ctx.err.print(
                        f"error: run {result.run_id} {result.outcome.value}: "
                        f"{result.failure.code.value}: {_one_line(result.failure.message)}",
                        markup=False,
                    )
            return EXIT_FOR_OUTCOME.get(result.outcome, EXIT_FAILED)
        printer = EventPrinter(handle.run_id, sys.stdout, ctx.err)
        result = await follow_run(handle, store, printer)
        link = await _ui_link(client, _ui_base(settings), settings.namespace, result.run_id)
        return _print_outcome(ctx, result, printer, link)
    finally:
        if store is not None:
            store.close()


async def _agent_client(ctx: Context) -> AgentClient:
    from otherone.client.agent_client import AgentClient

    settings = ctx.settings
    codec = _payload_codec(settings)
    client = await _connect(
        settings.temporal_address, settings.namespace, codec=codec, settings=settings
    )
    # With the store, outputs stored as artifacts are shown whole.
    return AgentClient(client, task_queue=settings.task_queue, store=_existing_store(settings))


def _existing_store(settings: Settings, *, migrate: bool = False) -> Store | None:
    """The store, unless it is a default SQLite file that does not exist (nothing to read)."""
    url = settings.store_url()
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return None
    return _open_store(url, migrate=migrate)


async def cmd_send(args: argparse.Namespace, ctx: Context) -> int:
    texts: list[str] = args.texts
    for index, text in enumerate(texts):
        if not text.strip():
            raise CliError(EXIT_USAGE, f"messages.{index}: must be a non-empty string")
    agents = await _agent_client(ctx)
    await agents.send_message(args.run_id, texts)
    noun = "message" if len(texts) == 1 else "messages"
    ctx.err.print(f"queued {len(texts)} {noun} for run {args.run_id}", markup=False)
    return EXIT_OK


async def cmd_cancel(args: argparse.Namespace, ctx: Context) -> int:
    agents = await _agent_client(ctx)
    await agents.cancel(args.run_id)
    ctx.err.print(f"cancellation requested for run {args.run_id}", markup=False)
    return EXIT_OK


async def cmd_show(args: argparse.Namespace, ctx: Context) -> int:
    agents = await _agent_client(ctx)
    record = await agents.get_run(args.run_id)  # a running run's record needs a live worker
    if args.json:
        sys.stdout.write(record.model_dump_json() + "\n")
    else:
        print_record(ctx.out, record)
    return EXIT_OK


async def cmd_tree(args: argparse.Namespace, ctx: Context) -> int:
    agents = await _agent_client(ctx)
    _, records = await load_tree(agents, args.run_id)
    if args.json:
        sys.stdout.write("[" + ",".join(record.model_dump_json() for record in records) + "]\n")
    else:
        print_run_tree(ctx.out, records, marked=args.run_id)
    return EXIT_OK


async def cmd_watch(args: argparse.Namespace, ctx: Context) -> int:
    from otherone.client.agent_client import AgentClient
    from otherone.client.watch import root_of

    settings = ctx.settings
    codec = _payload_codec(settings)
    client = await _connect(
        settings.temporal_address, settings.namespace, codec=codec, settings=settings
    )
    root = await root_of(client, args.run_id)  # RunNotFoundError (exit 3) for an unknown id
    store = _watch_store(settings)
    try:
        agents = AgentClient(client, task_queue=settings.task_queue, store=store)
        ctx.interrupt_note = f"interrupted: stopped watching run {root}; it keeps going"
        ctx.err.print(
            f"watching run {root} (Ctrl-C stops watching; the run keeps going)",
            style="dim",
            markup=False,
        )
        return await _watch(ctx, agents, root, json_lines=args.json)
    finally:
        store.close()


def _watch_store(settings: Settings) -> Store:
    """The store to read events from; a default SQLite file that does not exist is an error."""
    url = settings.store_url()
    if _absent_sqlite_file(url):
        raise CliError(
            EXIT_USAGE,
            f"no event store at {url.removeprefix('sqlite:///')} "
            "(give --database-url / --data-dir as the worker's)",
        )
    return _open_store(url)


async def _watch(ctx: Context, agents: AgentClient, run_id: str, *, json_lines: bool) -> int:
    """Follow the tree of root ``run_id`` until it ends (`otherone.client.watch`); exit code by
    outcome.

    A live view when stderr is an interactive terminal, plain lines otherwise, envelopes with
    ``json_lines``; then (not for JSON) the output text, a table per run and the summary."""
    from otherone.client.watch import (
        WatchMode,
        WatchState,
        follow_tree,
        live_console,
        print_summary,
    )

    console = live_console(sys.stderr)
    if json_lines:
        mode = WatchMode.JSON
    else:
        mode = WatchMode.LIVE if console.is_interactive else WatchMode.PLAIN
    printer = EventPrinter(run_id, sys.stdout, ctx.err)
    state = await follow_tree(
        agents.events(run_id),
        WatchState(run_id),
        mode=mode,
        out=sys.stdout,
        printer=printer,
        live_console=console,
    )
    result = await agents.result(run_id)
    if mode is not WatchMode.JSON:
        _print_output(result, printer)
        if not state.events_seen:
            ctx.err.print(
                "note: the store has no events of this run (is --database-url the worker's?)",
                style="dim",
            )
        print_summary(ctx.err, state, datetime.now(UTC))
        settings = ctx.settings
        link = await _ui_link(agents.temporal, _ui_base(settings), settings.namespace, run_id)
        print_result_summary(ctx.err, result, ui_url=link)
    return EXIT_FOR_OUTCOME.get(result.outcome, EXIT_FAILED)


async def cmd_sessions(args: argparse.Namespace, ctx: Context) -> int:
    url = ctx.settings.store_url()
    if _absent_sqlite_file(url):
        ctx.err.print(f"note: no store at {url.removeprefix('sqlite:///')}", style="dim")
        infos: list[SessionInfo] = []
    else:
        store = await asyncio.to_thread(_open_store, url)
        try:
            infos = await asyncio.to_thread(
                store.session_infos, args.partition, include_internal=args.internal
            )
        finally:
            store.close()
    if args.json:
        sys.stdout.write(json.dumps([_session_json(info) for info in infos]) + "\n")
    elif infos:
        _print_sessions(infos, internal=args.internal)
    else:
        ctx.err.print(f"no sessions in partition '{args.partition}'", markup=False)
    return EXIT_OK


def _absent_sqlite_file(url: str) -> bool:
    return url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()


def _session_json(info: SessionInfo) -> dict[str, Any]:
    holder = info.holder(datetime.now(UTC))
    return {
        "partition_key": info.partition_key,
        "session_id": info.session_id,
        "internal": info.internal,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "held_by": holder,
        "lease_until": info.lease_until.isoformat() if holder and info.lease_until else None,
    }


def _print_sessions(infos: Sequence[SessionInfo], *, internal: bool) -> None:
    """A table on stdout, one session a line, at its natural width: ids are never folded or cut."""
    now = datetime.now(UTC)
    headers = ["session", *(["internal"] if internal else []), "created (UTC)", "held by run"]
    rows = [
        [
            info.session_id,
            *(["yes" if info.internal else ""] if internal else []),
            _utc_time(info.created_at),
            info.holder(now) or "-",
        ]
        for info in infos
    ]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    console = make_console(sys.stdout)  # print(width=...) can only narrow: widen the console
    console.width = max(console.width, sum(widths) + 2 * (len(widths) - 1))
    console.print(table)


def _utc_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


async def cmd_db(args: argparse.Namespace, ctx: Context) -> int:
    """``db upgrade`` (the only action so far: argparse has refused any other)."""
    url = ctx.settings.store_url()
    store = await asyncio.to_thread(_open_store, url, migrate=False)
    try:
        result = await asyncio.to_thread(store.upgrade)
    finally:
        store.close()
    if result.changed:
        message = f"upgraded {_safe_url(url)}: {result.before or 'empty'} → {result.after}"
    else:
        message = f"{_safe_url(url)} already at revision {result.after}"
    ctx.out.print(message, markup=False)
    return EXIT_OK


async def cmd_demo(args: argparse.Namespace, ctx: Context) -> int:
    from otherone.client.agent_client import AgentClient, build_request
    from otherone.examples import EXAMPLE_CONFIG
    from otherone.store import Store
    from otherone.worker.app import build_worker
    from otherone.worker.devserver import DevServer

    config = _load_config(EXAMPLE_CONFIG)
    request = build_request(entry_agent=DEMO_AGENT, input=DEMO_QUESTION)
    with tempfile.TemporaryDirectory(prefix="otherone-demo-") as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'otherone.db'}")
        server = DevServer(db_file=None, namespace="default")
        try:
            ctx.err.print("starting an in-memory Temporal dev server…", style="dim")
            await ctx.interruptible(server.start())
            codec = _payload_codec(ctx.settings)
            client = await _connect(server.address, server.namespace, codec=codec)
            worker = build_worker(client, config, store, task_queue=DEMO_TASK_QUEUE)
            async with worker:
                agents = AgentClient(client, task_queue=DEMO_TASK_QUEUE, store=store)
                ctx.err.print(
                    f"Temporal {server.address} · Web UI {server.ui_url} · config {EXAMPLE_CONFIG}",
                    style="dim",
                    markup=False,
                )
                ctx.err.print(f"> {DEMO_AGENT}: {DEMO_QUESTION}", style="bold", markup=False)
                handle = await ctx.interruptible(agents.start(request))
                printer = EventPrinter(handle.run_id, sys.stdout, ctx.err)
                result = await ctx.interruptible(follow_run(handle, store, printer))
                description = await client.get_workflow_handle(result.run_id).describe()
                link = server.workflow_url(result.run_id, description.run_id)
                _print_output(result, printer)
                _, records = await ctx.interruptible(load_tree(agents, result.run_id))
                ctx.out.print()
                print_run_tree(ctx.out, records)
                sys.stdout.flush()
                print_result_summary(ctx.err, result, ui_url=link)
                code = EXIT_FOR_OUTCOME.get(result.outcome, EXIT_FAILED)
                if args.keep:
                    ctx.err.print(
                        f"the server stays up: open {link or server.ui_url} — Ctrl-C to stop",
                        markup=False,
                    )
                    sys.stdout.flush()
                    await ctx.stop.wait()
        finally:
            await server.stop()
            store.close()
    return code


async def cmd_codec_server(args: argparse.Namespace, ctx: Context) -> int:
    from otherone.worker.codec_server import CodecServer, default_cors_origins

    settings = ctx.settings
    codec = _payload_codec(settings)
    if codec is None:
        raise CliError(
            EXIT_USAGE,
            "no encryption keys: set OTHERONE_ENCRYPTION_KEYS or OTHERONE_ENCRYPTION_KEY_FILE",
        )
    if not 0 <= args.codec_port < 65536:
        raise CliError(EXIT_USAGE, f"--port: {args.codec_port} is not a TCP port")
    token = settings.codec_server_token
    server = CodecServer(
        codec,
        host=args.host,
        port=args.codec_port,
        cors_origins=args.cors_origin or default_cors_origins(settings.ui_port),
        token=token.get_secret_value() if token is not None else None,
        log=lambda line: ctx.err.print(line, style="dim", markup=False),
    )
    try:
        server.start()
    except OSError as error:
        raise CliError(
            EXIT_USAGE,
            f"cannot listen on {args.host}:{args.codec_port}: {error.strerror or error} "
            "(choose another with --port)",
        ) from None
    try:
        _print_codec_server(ctx, server, authenticated=token is not None)
        await ctx.stop.wait()
    finally:
        await asyncio.to_thread(server.stop)
    return EXIT_OK


def _print_codec_server(ctx: Context, server: CodecServer, *, authenticated: bool) -> None:
    keys = ", ".join(server.codec.key_ids)
    rows = [
        ("codec", f"{server.url}  (keys {keys}; encrypts with {server.codec.active_key_id})"),
        ("cors", ", ".join(sorted(server.cors_origins)) or "-"),
        ("auth", "bearer token" if authenticated else "none (anyone who can connect decrypts)"),
        ("web ui", f"temporal server start-dev --ui-codec-endpoint {server.url}"),
        ("cli", f"temporal workflow show --detailed --codec-endpoint {server.url} -w RUN_ID"),
    ]
    for label, value in rows:
        ctx.out.print(f"{label:<7} {value}", markup=False)
    if not authenticated and server.host not in ("127.0.0.1", "localhost", "::1"):
        ctx.err.print(
            f"warning: listening on {server.host} without OTHERONE_CODEC_SERVER_TOKEN",
            markup=False,
        )
    ctx.out.print("ready: Ctrl-C to stop", style="dim")
    sys.stdout.flush()


COMMANDS: dict[str, tuple[Command, bool]] = {
    # name: (function, handles signals itself: a signal means "shut down and exit 0")
    "dev": (cmd_dev, True),
    "worker": (cmd_worker, True),
    "demo": (cmd_demo, True),
    "run": (cmd_run, False),
    "send": (cmd_send, False),
    "cancel": (cmd_cancel, False),
    "show": (cmd_show, False),
    "tree": (cmd_tree, False),
    "watch": (cmd_watch, False),
    "sessions": (cmd_sessions, False),
    "db": (cmd_db, False),
    "codec-server": (cmd_codec_server, True),
}


# --------------------------------------------------------------------------- entry point


async def _dispatch(args: argparse.Namespace, ctx: Context) -> int:
    function, handles_signals = COMMANDS[args.command]
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, ctx.on_signal)
    try:
        if handles_signals:
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


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the exit code (never raises)."""
    err = make_console(sys.stderr)
    try:
        args = build_parser(_defaults()).parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    try:
        settings = settings_from(args)
        ctx = Context(settings=settings, out=make_console(sys.stdout), err=err)
        return asyncio.run(_dispatch(args, ctx))
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        return EXIT_INTERRUPTED
    except Exception as error:
        return _report(err, error, None)


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _exit_now(code: int) -> NoReturn:
    """Flush traces and output, then leave through ``os._exit`` (no interpreter teardown)."""
    shutdown_tracing()  # os._exit skips the SDK's flush at exit
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point: run, flush, and leave through ``os._exit``."""
    _exit_now(run_cli(argv))


if __name__ == "__main__":
    main()
