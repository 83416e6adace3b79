"""``otherone approvals`` (open requests), ``approve``, ``deny``, ``answer``: people in the loop."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK, EXIT_USAGE, CliError
from otherone.client.cli.temporal import agent_client
from otherone.client.console import make_console
from otherone.contracts import ApprovalRequest

#: Arguments are cut to this many characters in the table (`--json` has them whole).
TABLE_ARGUMENTS_CHARS = 60


async def cmd_approvals(args: argparse.Namespace, ctx: Context) -> int:
    agents = await agent_client(ctx)
    requests = await agents.pending_approvals(args.run_id)
    if args.json:
        sys.stdout.write("[" + ",".join(request.model_dump_json() for request in requests) + "]\n")
    elif not requests:
        ctx.err.print("no run waits for a person", markup=False)
    else:
        _print_requests(requests, datetime.now(UTC))
    return EXIT_OK


def _sending(ctx: Context, run_id: str, call_id: str) -> None:
    """What an interrupted decision means: once sent, it stays with the run (Temporal keeps
    the update) and is applied when a worker takes it; another decision is refused then."""
    ctx.interrupt_note = (
        f"interrupted: the decision on call {call_id} of run {run_id} may already be with the "
        "run; if so it is applied when a worker takes it (see `otherone approvals`)"
    )


async def cmd_approve(args: argparse.Namespace, ctx: Context) -> int:
    arguments = _edited_arguments(args.arguments)
    agents = await agent_client(ctx)
    _sending(ctx, args.run_id, args.call_id)
    request = await agents.approve(args.run_id, args.call_id, arguments)
    _print_decided(ctx, request)
    return EXIT_OK


async def cmd_deny(args: argparse.Namespace, ctx: Context) -> int:
    agents = await agent_client(ctx)
    _sending(ctx, args.run_id, args.call_id)
    request = await agents.deny(args.run_id, args.call_id, args.reason)
    _print_decided(ctx, request)
    return EXIT_OK


async def cmd_answer(args: argparse.Namespace, ctx: Context) -> int:
    agents = await agent_client(ctx)
    _sending(ctx, args.run_id, args.call_id)
    request = await agents.answer(args.run_id, args.call_id, args.text)
    _print_decided(ctx, request)
    return EXIT_OK


def _edited_arguments(text: str | None) -> dict[str, Any] | None:
    """``--arguments '{"to": "bob"}'``: a JSON object, or a usage error naming the flag."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CliError(EXIT_USAGE, f"--arguments: not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise CliError(EXIT_USAGE, "--arguments: must be a JSON object")
    return value


def _print_decided(ctx: Context, request: ApprovalRequest) -> None:
    outcome = request.decision
    assert outcome is not None
    ctx.err.print(
        f"call {request.call_id} ({request.tool_name}) of run {request.run_id}: "
        f"{outcome.decision} by {outcome.decided_by}",
        markup=False,
    )


def _print_requests(requests: Sequence[ApprovalRequest], now: datetime) -> None:
    headers = ["run", "call", "agent", "tool", "age", "arguments / question"]
    rows = [
        [
            request.run_id,
            request.call_id,
            request.agent_id,
            request.tool_name,
            _age(now - request.requested_at),
            _what(request),
        ]
        for request in requests
    ]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    console = make_console(sys.stdout)  # ids are never folded or cut: widen the console
    console.width = max(console.width, sum(widths) + 2 * (len(widths) - 1))
    console.print(table)


def _what(request: ApprovalRequest) -> str:
    if request.kind == "question":
        return f"? {request.question or ''}"
    text = " ".join(request.arguments.split())
    return text if len(text) <= TABLE_ARGUMENTS_CHARS else text[: TABLE_ARGUMENTS_CHARS - 1] + "…"


def _age(elapsed: Any) -> str:
    seconds = max(int(elapsed.total_seconds()), 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
