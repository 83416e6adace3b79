"""Every command's arguments and help, and which module runs it.

Building the parser imports no command module: `COMMANDS` names each command's module, imported
only when that command runs, so ``otherone --help`` (and a usage error) starts fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from otherone.client.cli.exits import EXIT_CODES_HELP, EXIT_USAGE
from otherone.client.cli.fork_options import add_fork
from otherone.client.cli.options import (
    SERVE_OPTIONS,
    SETTING_OPTIONS,
    SETTINGS_HELP,
    WORKER_OPTIONS,
    add_options,
    environment_help,
)
from otherone.client.cli.usage_parser import add_usage
from otherone.partitions import DEFAULT_PARTITION
from otherone.worker.settings import CODEC_SERVER_PORT, Settings

DEMO_AGENT = "coordinator"
DEMO_QUESTION = "Plan a day in Paris: check the weather and draft a short note."


@dataclass(frozen=True)
class CommandTarget:
    """Where a command is implemented: ``function`` of ``otherone.client.cli.<module>``."""

    module: str
    function: str
    #: A signal means "shut down and exit 0" (servers); for the others it interrupts.
    handles_signals: bool = False


COMMANDS: dict[str, CommandTarget] = {
    "dev": CommandTarget("serve", "cmd_dev", handles_signals=True),
    "worker": CommandTarget("serve", "cmd_worker", handles_signals=True),
    "demo": CommandTarget("demo", "cmd_demo", handles_signals=True),
    "run": CommandTarget("run", "cmd_run"),
    "send": CommandTarget("run", "cmd_send"),
    "cancel": CommandTarget("run", "cmd_cancel"),
    "show": CommandTarget("show", "cmd_show"),
    "tree": CommandTarget("show", "cmd_tree"),
    "watch": CommandTarget("watching", "cmd_watch"),
    "trace": CommandTarget("tracing", "cmd_trace"),
    "sessions": CommandTarget("sessions", "cmd_sessions"),
    "workers": CommandTarget("workers", "cmd_workers"),
    "db": CommandTarget("sessions", "cmd_db"),
    "upgrade": CommandTarget("upgrade", "cmd_upgrade"),
    "codec-server": CommandTarget("codec_server", "cmd_codec_server", handles_signals=True),
    "approvals": CommandTarget("approvals", "cmd_approvals"),
    "approve": CommandTarget("approvals", "cmd_approve"),
    "deny": CommandTarget("approvals", "cmd_deny"),
    "answer": CommandTarget("approvals", "cmd_answer"),
    "serve": CommandTarget("http_api", "cmd_serve", handles_signals=True),
    "mcp": CommandTarget("mcp", "cmd_mcp"),
    "schedule": CommandTarget("schedules", "cmd_schedule"),
    "fork": CommandTarget("forks", "cmd_fork"),
    "usage": CommandTarget("usage", "cmd_usage"),
    "spend-limit": CommandTarget("usage", "cmd_spend_limit"),
    "webhook-secret": CommandTarget("webhook_secret", "cmd_webhook_secret"),
}


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
    add_options(common.add_argument_group("settings", SETTINGS_HELP), SETTING_OPTIONS, defaults)
    parser = _Parser(
        prog="otherone",
        description="Otherone on Temporal: durable multi-agent LLM runs.",
        epilog=EXIT_CODES_HELP,
        formatter_class=_HelpFormatter,
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    command = _adder(commands, common)

    _add_serve(command, defaults)
    _add_run(command)
    _add_show(command)
    _add_approvals(command)
    _add_sessions(command, common)
    add_usage(command)
    _add_webhook_secret(command)
    _add_upgrade(command, common)
    _add_mcp(command, common)
    _add_schedule(command, common)
    add_fork(command)
    _add_demo(command)
    _add_codec_server(commands)
    return parser


Add = Any  # `command(name, summary, description)` of `build_parser`


def _adder(
    subparsers: Any, common: argparse.ArgumentParser
) -> Callable[[str, str, str], argparse.ArgumentParser]:
    """``add(name, summary, description)``: a (sub)command of ``subparsers`` with the common
    settings, our help formatter and the exit codes."""

    def add(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = subparsers.add_parser(
            name,
            help=summary,
            description=description,
            epilog=EXIT_CODES_HELP,
            formatter_class=_HelpFormatter,
            parents=[common],
        )
        return parser

    return add


def _add_serve(command: Add, defaults: Settings | None) -> None:
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
    add_options(worker.add_argument_group("task queues and roles"), WORKER_OPTIONS, defaults)
    dev.add_argument(
        "--serve",
        action="store_true",
        help="also serve the HTTP API and its page (as `otherone serve`, on --http-port)",
    )
    add_options(dev.add_argument_group("HTTP API (with --serve)"), SERVE_OPTIONS, defaults)
    http = command(
        "serve",
        "serve the HTTP API and the page at / (runs, live events, AG-UI)",
        "Serve the HTTP API (start, follow, message, cancel and inspect runs; Server-Sent Events, "
        "also as AG-UI with ?format=ag-ui; schema at /openapi.json) and a page at / to chat with "
        "the agents of --config, against the Temporal server at --address and the store at "
        "--database-url (the workers'). Bearer tokens from OTHERONE_SERVE_TOKENS "
        "('token:partition,...') each see one partition; without tokens it binds to 127.0.0.1 "
        "only. SIGTERM / Ctrl-C ends the event streams (clients resume with Last-Event-ID) and "
        "exits 0.",
    )
    add_options(http.add_argument_group("HTTP API"), SERVE_OPTIONS, defaults)
    for process in (dev, worker, http):  # the long-running commands list every setting
        process.epilog = f"{environment_help()}\n\n{EXIT_CODES_HELP}"


def _add_parts(command: argparse.ArgumentParser) -> None:
    """``--image`` and ``--file``: parts of the (last) user message (`otherone.parts`)."""
    command.add_argument(
        "--image",
        metavar="PATH|URL",
        action="append",
        default=[],
        help="attach an image (PNG, JPEG, GIF, WebP; a file, or an http(s) URL the provider "
        "fetches); repeatable",
    )
    command.add_argument(
        "--file",
        metavar="PATH",
        action="append",
        default=[],
        help="attach a document (PDF); repeatable",
    )


def _add_run(command: Add) -> None:
    run = command(
        "run",
        "start a run and stream its output",
        "Start a run of AGENT with TEXT, stream the model's text to stdout (tool calls as dim "
        "lines on stderr), then print the result summary. Exit code by outcome.",
    )
    run.add_argument("agent", metavar="AGENT", help="id of the entry agent")
    run.add_argument(
        "text",
        metavar="TEXT",
        help="the user message; - reads it from stdin, @FILE from a file (@@ for a leading @)",
    )
    _add_parts(run)
    run.add_argument("--session", metavar="ID", help="continue (or create) this session")
    run.add_argument(
        "--context-window",
        metavar="TOKENS",
        type=int,
        help="the session's window: older entries are summarised past 80%% of it (default 8192)",
    )
    run.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="start at most once per key (the same key returns the same run)",
    )
    run.add_argument(
        "--result-kind",
        choices=("text", "auto", "json"),
        help="what the final answer must be: text, auto (JSON when it parses) or json "
        "(default: text; json when --result-schema is given)",
    )
    run.add_argument(
        "--result-schema",
        metavar="SCHEMA",
        help="a JSON Schema the final answer must be valid for: JSON text, or @FILE",
    )
    run.add_argument(
        "--model",
        metavar="PROFILE",
        help="the model profile the agent runs on, among those it allows (its own and its "
        "`models`; default: its own)",
    )
    run.add_argument(
        "--webhook",
        metavar="URL",
        help="POST the run's record, signed with the partition's webhook secret, to this "
        "http(s) URL when it ends (see `otherone webhook-secret`; default: the agent's webhook)",
    )
    run.add_argument(
        "--output-retries",
        metavar="N",
        type=int,
        help="times the model may answer again after breaking the result contract "
        "(default: the runtime policy's output_retries, 2)",
    )
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
    _add_verbose(run)
    send = command(
        "send",
        "queue user messages for a running run",
        "Queue one or more user messages for RUN_ID; the run takes them at its next safe point.",
    )
    send.add_argument("run_id", metavar="RUN_ID")
    send.add_argument(
        "texts",
        metavar="TEXT",
        nargs="+",
        help="messages; - reads one from stdin, @FILE from a file (@@ for a leading @)",
    )
    _add_parts(send)
    cancel = command(
        "cancel",
        "cancel a run",
        "Request cancellation of RUN_ID (and, through Temporal, of its descendants).",
    )
    cancel.add_argument("run_id", metavar="RUN_ID")
    for scoped in (send, cancel):
        _add_all_partitions(scoped)


def _add_approvals(command: Add) -> None:
    approvals = command(
        "approvals",
        "list tool calls and questions waiting for a person",
        "List the open approval requests and human.ask questions (of RUN_ID's tree, or of every "
        "run): run, call id, agent, tool, age, arguments or question.",
    )
    approvals.add_argument("run_id", metavar="RUN_ID", nargs="?", help="a root run")
    approvals.add_argument(
        "--json", action="store_true", help="print the ApprovalRequests as a JSON array"
    )
    approve = command(
        "approve",
        "let a waiting tool call run",
        "Approve call CALL_ID of run RUN_ID (as `otherone approvals` lists them); with "
        "--arguments, the call runs with these instead of the model's (checked against the "
        "tool's schema first).",
    )
    approve.add_argument("run_id", metavar="RUN_ID")
    approve.add_argument("call_id", metavar="CALL_ID")
    approve.add_argument("--arguments", metavar="JSON", help="edited arguments, a JSON object")
    deny = command(
        "deny",
        "refuse a waiting tool call",
        "Deny call CALL_ID of run RUN_ID; the model reads the reason as the tool's result.",
    )
    deny.add_argument("run_id", metavar="RUN_ID")
    deny.add_argument("call_id", metavar="CALL_ID")
    deny.add_argument("--reason", required=True, help="why (the model reads it)")
    answer = command(
        "answer",
        "answer a human.ask question",
        "Answer the human.ask question CALL_ID of run RUN_ID; the answer is the tool's result.",
    )
    answer.add_argument("run_id", metavar="RUN_ID")
    answer.add_argument("call_id", metavar="CALL_ID")
    answer.add_argument("text", metavar="TEXT")


def _add_show(command: Add) -> None:
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
    _add_verbose(watch)
    trace = command(
        "trace",
        "show a waterfall of a tree of runs",
        "Show the tree RUN_ID belongs to as a waterfall on a time axis, from its events in the "
        "store at --database-url: a bar per run, model call, tool call (each attempt), agent "
        "call, approval wait and sleep, indented under what made it, with duration, tokens, "
        "cost and status; retried attempts and superseded model answers are marked.",
    )
    trace.add_argument("run_id", metavar="RUN_ID", help="the root run, or any run of its tree")
    trace.add_argument("--json", action="store_true", help="print the bars as JSON (a Trace)")
    trace.add_argument(
        "--follow",
        action="store_true",
        help="redraw the waterfall live until the root ends (Ctrl-C stops following)",
    )
    for scoped in (show, tree, watch, trace):
        _add_all_partitions(scoped)
    workers = command(
        "workers",
        "list the workers polling the task queue",
        "Whether workers poll --task-queue at --address (a run started there waits while none "
        "does), as the HTTP API's GET /v1/workers answers: the live workflow and activity "
        "pollers (seen by Temporal in the last 90 s) and every poller Temporal lists, with "
        "when it last polled (stopped workers linger for a few minutes).",
    )
    workers.add_argument(
        "--json", action="store_true", help="print the answer of GET /v1/workers as JSON"
    )


def _add_verbose(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="show what each tool call returned after its name (the start of its result, "
        "one line, at most 200 characters)",
    )


def _add_webhook_secret(command: Add) -> None:
    secret = command(
        "webhook-secret",
        "show (or rotate) the partition's webhook signing secret",
        f"The secret completion webhooks of --partition (default: {DEFAULT_PARTITION}) are "
        'signed with (HMAC-SHA256, README "Completion webhooks"), from the store at '
        "--database-url; made on first use. --rotate replaces it (the last one is shown as "
        "previous: a receiver may accept both while it switches).",
    )
    secret.add_argument("--rotate", action="store_true", help="make a new secret")
    secret.add_argument("--json", action="store_true", help="print it as JSON")


def _add_all_partitions(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--all-partitions",
        action="store_true",
        help="act on a run of any partition, whatever --partition / OTHERONE_PARTITION say "
        "(operators)",
    )


def _add_sessions(command: Add, common: argparse.ArgumentParser) -> None:
    sessions = command(
        "sessions",
        "list the sessions of a partition",
        f"List the sessions (conversations) of --partition (default: {DEFAULT_PARTITION}) in "
        "the store at --database-url, "
        "oldest first, with the run holding each one's writer lease. The internal sessions of "
        "child runs (agent calls) are hidden unless --internal.",
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
        formatter_class=_HelpFormatter,
        parents=[common],
    )


def _add_upgrade(command: Add, common: argparse.ArgumentParser) -> None:
    from otherone.worker.upgrade_options import add_check_options

    upgrade = command(
        "upgrade",
        "check workflow code before a deploy",
        "Checks for a deploy of new workflow code (docs/upgrading.md).",
    )
    actions = upgrade.add_subparsers(dest="upgrade_action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="replay the running runs that would move to this code",
        description="Replay, on this installation's workflow code, the running agent runs at "
        "--address that a deploy would move to it: unversioned runs (they move to the first "
        "version made current) and, with --include-pinned, runs pinned to a build. One line "
        "per run that would fail; exit 0 when all replay, 1 otherwise.",
        epilog=EXIT_CODES_HELP,
        formatter_class=_HelpFormatter,
        parents=[common],
    )
    add_check_options(check)


def _add_schedule(command: Add, common: argparse.ArgumentParser) -> None:
    from otherone.client.cli.schedule_options import add_actions

    schedule = command(
        "schedule",
        "runs started on a calendar or at an interval (Temporal Schedules)",
        "Create and manage schedules of --partition: each firing starts a run of an agent "
        "(README, Schedules). Temporal keeps them (the Web UI's Schedules page shows them).",
    )
    actions = schedule.add_subparsers(dest="schedule_action", metavar="ACTION", required=True)
    add_actions(_adder(actions, common))


def _add_mcp(command: Add, common: argparse.ArgumentParser) -> None:
    mcp = command(
        "mcp",
        "MCP server configuration",
        "Work with [mcp.<server>] tables (README, MCP tools).",
    )
    actions = mcp.add_subparsers(dest="mcp_action", metavar="ACTION", required=True)
    imported = actions.add_parser(
        "import",
        help="read a Claude Desktop / Claude Code / VS Code / Cursor MCP config as our tables",
        description="Read an MCP client's configuration (Claude Desktop's "
        "claude_desktop_config.json, Claude Code's .mcp.json and Cursor's mcp.json: "
        "'mcpServers'; VS Code's .vscode/mcp.json or settings.json: 'servers' and 'inputs') and "
        "print the equivalent [mcp.<server>] tables (or append them to --write FILE). Secrets in "
        "the file are never copied: they become ${VAR} references, and the variables to set on "
        "the worker (environment or secrets file) are listed on stderr, with where each value "
        "was. ${env:X}, ${input:id} and ${X} of the clients become ${X}-style references too. "
        "SSE and disabled servers are left out, with a note.",
        epilog=EXIT_CODES_HELP,
        formatter_class=_HelpFormatter,
        parents=[common],
    )
    imported.add_argument("file", metavar="FILE", help="the client's JSON file ('-': stdin)")
    listed = actions.add_parser(
        "list",
        help="the MCP servers --config declares",
        description="List the [mcp.<server>] tables of --config: name, transport, command or "
        "URL, and the names of env variables and headers (nothing is started).",
        epilog=EXIT_CODES_HELP,
        formatter_class=_HelpFormatter,
        parents=[common],
    )
    listed.add_argument("--json", action="store_true", help="print the servers as JSON")
    tools = actions.add_parser(
        "tools",
        help="start a server and list its tools as agents see them",
        description="Start SERVER as a worker would (its ${VAR} references read from this "
        "process's environment and secrets file) and list its tools under the names agents "
        "and policies use (mcp.<server>.<tool>), with the name providers get and the "
        "parameters. A server that does not start exits 4 with the reason.",
        epilog=EXIT_CODES_HELP,
        formatter_class=_HelpFormatter,
        parents=[common],
    )
    tools.add_argument("server", metavar="SERVER", help="a server of --config")
    tools.add_argument("--json", action="store_true", help="print the tool schemas as JSON")
    call = actions.add_parser(
        "call",
        help="call one tool of a server once (to check it)",
        description="Start SERVER, call TOOL with ARGS (a JSON object, checked against the "
        "tool's schema as a model's would be) and print the result as the model would get "
        "it. Exit 1 when the tool reports an error, 2 for an unknown tool or bad arguments, "
        "4 when the server does not start.",
        epilog=EXIT_CODES_HELP,
        formatter_class=_HelpFormatter,
        parents=[common],
    )
    call.add_argument("server", metavar="SERVER", help="a server of --config")
    call.add_argument("tool", metavar="TOOL", help="the tool's name on the server (no mcp. prefix)")
    call.add_argument(
        "arguments", metavar="ARGS", nargs="?", default="{}", help="a JSON object (default {})"
    )
    imported.add_argument(
        "--write",
        metavar="TOML",
        help="append the tables to this file (created if missing; refused when it already "
        "declares one of the servers) instead of printing them",
    )


def _add_demo(command: Add) -> None:
    demo = command(
        "demo",
        "offline end-to-end demo",
        "Start an in-memory Temporal dev server (with Web UI) on free ports, a worker with the "
        f"example configuration and a temporary store, run `{DEMO_AGENT}` with "
        f'"{DEMO_QUESTION}" (it spawns `researcher` in the background with agent.spawn, calls '
        "`writer` meanwhile and collects the research with agent.await), stream it, print "
        "the run tree, the result and the Web UI link, then stop everything. Its call to "
        "`writer` waits for a person's approval (the demo's policy): approved automatically, "
        "or asked on the terminal with --interactive. Needs no network and no API key.",
    )
    demo.add_argument(
        "--interactive",
        "-i",
        action="store_true",
        help="ask on the terminal for the approval step instead of approving it automatically",
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the server running after the run (to browse the Web UI) until Ctrl-C",
    )


def _add_codec_server(commands: Any) -> None:
    """``codec-server``: without the common settings options, whose ``--port`` is Temporal's."""
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
        formatter_class=_HelpFormatter,
    )
    codec.add_argument(
        "--port",
        dest="codec_port",
        type=int,
        default=CODEC_SERVER_PORT,
        metavar="PORT",
        help=f"port to listen on (default {CODEC_SERVER_PORT}; 0 picks a free one)",
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
