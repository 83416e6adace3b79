"""``otherone usage`` (what model calls used and cost, summed) and ``otherone spend-limit`` (a
partition's limit per day). Both read or write the store only: no Temporal client is loaded."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import date
from decimal import Decimal, InvalidOperation

from rich.table import Table
from rich.text import Text

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK, EXIT_USAGE, CliError
from otherone.client.cli.stores import absent_sqlite_file, open_store
from otherone.client.console import make_console
from otherone.run_types import plain_decimal
from otherone.runs import DEFAULT_PARTITION
from otherone.store.spending import UsageRow, parse_grouping

_KEY_HEADERS = {"partition": "partition", "agent": "agent", "model": "model", "day": "day (UTC)"}


async def cmd_usage(args: argparse.Namespace, ctx: Context) -> int:
    grouping = _grouping(args)
    since, until = _day(args.since, "--since"), _day(args.until, "--until")
    partition = None if args.all_partitions else (ctx.settings.partition or DEFAULT_PARTITION)
    url = ctx.settings.store_url()
    rows: list[UsageRow] = []
    if absent_sqlite_file(url):
        ctx.err.print(f"note: no store at {url.removeprefix('sqlite:///')}", style="dim")
    else:
        store = await asyncio.to_thread(open_store, url)
        try:
            rows = await asyncio.to_thread(
                store.spending.usage,
                partition_key=partition,
                group_by=grouping,
                since=since,
                until=until,
            )
        finally:
            store.close()
    if args.json:
        sys.stdout.write(json.dumps([row.as_json() for row in rows]) + "\n")
    elif rows:
        _print_usage(rows, grouping)
    else:
        where = "any partition" if partition is None else f"partition '{partition}'"
        ctx.err.print(f"no model calls recorded for {where}", markup=False)
    return EXIT_OK


def _grouping(args: argparse.Namespace) -> tuple[str, ...]:
    try:
        grouping = parse_grouping(args.by)
    except ValueError as error:
        raise CliError(EXIT_USAGE, f"--{error}") from None
    if args.all_partitions and "partition" not in grouping:
        grouping = ("partition", *grouping)
    return grouping


def _day(text: str | None, option: str) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise CliError(EXIT_USAGE, f"{option}: not a day (YYYY-MM-DD): {text!r}") from None


def _print_usage(rows: list[UsageRow], grouping: tuple[str, ...]) -> None:
    """A table on stdout at its natural width (keys and numbers are never folded or cut),
    with a total line under several rows."""
    headers = [_KEY_HEADERS[name] for name in grouping]
    headers += ["calls", "input tokens", "cache read", "cache write", "output tokens", "cost (USD)"]
    lines = [[*(_key(row, name) for name in grouping), *_numbers(row)] for row in rows]
    if len(rows) > 1:
        lines.append(["total", *[""] * (len(grouping) - 1), *_numbers(_total(rows))])
    table = Table(box=None, pad_edge=False, header_style="bold")
    for index, header in enumerate(headers):
        table.add_column(header, no_wrap=True, justify="left" if index < len(grouping) else "right")
    for line in lines:
        table.add_row(*(Text(cell) for cell in line))
    widths = [max(len(cell) for cell in column) for column in zip(headers, *lines, strict=True)]
    console = make_console(sys.stdout)  # print(width=...) can only narrow: widen the console
    console.width = max(console.width, sum(widths) + 2 * (len(widths) - 1))
    console.print(table)


def _key(row: UsageRow, name: str) -> str:
    value = {
        "partition": row.partition_key,
        "agent": row.agent_id,
        "model": row.model_profile_id,
        "day": row.day,
    }[name]
    return value or ""


def _numbers(row: UsageRow) -> list[str]:
    counts = [
        row.calls,
        row.input_tokens,
        row.cache_read_tokens,
        row.cache_write_tokens,
        row.output_tokens,
    ]
    return [*(str(count) for count in counts), _cost(row)]


def _cost(row: UsageRow) -> str:
    """The cost, saying when it is not the whole: calls of a profile without prices have an
    unknown cost (a 0 there would read as free)."""
    if row.cost_known:
        return plain_decimal(row.cost)
    if row.unpriced_calls == row.calls:
        return "unpriced"
    return f"{plain_decimal(row.cost)} + {row.unpriced_calls} unpriced"


def _total(rows: list[UsageRow]) -> UsageRow:
    return UsageRow(
        partition_key=None,
        agent_id=None,
        model_profile_id=None,
        day=None,
        calls=sum(row.calls for row in rows),
        input_tokens=sum(row.input_tokens for row in rows),
        output_tokens=sum(row.output_tokens for row in rows),
        cache_read_tokens=sum(row.cache_read_tokens for row in rows),
        cache_write_tokens=sum(row.cache_write_tokens for row in rows),
        cost=sum((row.cost for row in rows), Decimal(0)),
        unpriced_calls=sum(row.unpriced_calls for row in rows),
    )


async def cmd_spend_limit(args: argparse.Namespace, ctx: Context) -> int:
    partition = ctx.settings.partition or DEFAULT_PARTITION
    limit = _dollars(args.per_day) if args.per_day is not None else None
    store = await asyncio.to_thread(open_store, ctx.settings.store_url())
    try:
        if args.per_day is not None or args.clear:
            await asyncio.to_thread(store.spending.set_limit, partition, "day", limit)
        limits = await asyncio.to_thread(store.spending.limits, partition)
    finally:
        store.close()
    day = limits.get("day")
    if day is None:
        ctx.out.print(f"partition '{partition}': no spend limit", markup=False)
    else:
        ctx.out.print(f"partition '{partition}': {plain_decimal(day)} USD per day", markup=False)
    return EXIT_OK


def _dollars(text: str) -> Decimal:
    try:
        amount = Decimal(text)
    except InvalidOperation:
        raise CliError(EXIT_USAGE, f"--per-day: not an amount of US dollars: {text!r}") from None
    if not amount.is_finite() or amount < 0:
        raise CliError(EXIT_USAGE, f"--per-day: must be zero or more US dollars: {text!r}")
    return amount
