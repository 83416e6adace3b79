"""``otherone sessions`` (the sessions of a partition) and ``db upgrade`` (the store's tables).

Both read the store only: no Temporal client is loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK
from otherone.client.cli.stores import absent_sqlite_file, open_store, safe_url
from otherone.client.console import make_console
from otherone.runs import DEFAULT_PARTITION
from otherone.store import SessionInfo


async def cmd_sessions(args: argparse.Namespace, ctx: Context) -> int:
    url = ctx.settings.store_url()
    partition = ctx.settings.partition or DEFAULT_PARTITION
    if absent_sqlite_file(url):
        ctx.err.print(f"note: no store at {url.removeprefix('sqlite:///')}", style="dim")
        infos: list[SessionInfo] = []
    else:
        store = await asyncio.to_thread(open_store, url)
        try:
            infos = await asyncio.to_thread(
                store.session_infos, partition, include_internal=args.internal
            )
        finally:
            store.close()
    if args.json:
        sys.stdout.write(json.dumps([_session_json(info) for info in infos]) + "\n")
    elif infos:
        _print_sessions(infos, internal=args.internal)
    else:
        ctx.err.print(f"no sessions in partition '{partition}'", markup=False)
    return EXIT_OK


def _session_json(info: SessionInfo) -> dict[str, Any]:
    holder = info.holder(datetime.now(UTC))
    return {
        "partition_key": info.partition_key,
        "session_id": info.session_id,
        "internal": info.internal,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        # The HTTP API's names (`GET /v1/sessions`): one shape for scripts using either.
        "lease_run_id": holder,
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
    store = await asyncio.to_thread(open_store, url, migrate=False)
    try:
        result = await asyncio.to_thread(store.upgrade)
    finally:
        store.close()
    if result.changed:
        message = f"upgraded {safe_url(url)}: {result.before or 'empty'} → {result.after}"
    else:
        message = f"{safe_url(url)} already at revision {result.after}"
    ctx.out.print(message, markup=False)
    return EXIT_OK
