"""The arguments of ``otherone usage`` and ``otherone spend-limit`` (apart from `parser`, which
is long enough; like it, this imports no command module)."""

from __future__ import annotations

from typing import Any

from otherone.partitions import DEFAULT_PARTITION

GROUPINGS_HELP = "partition, agent, model, day"


def add_usage(command: Any) -> None:
    """``usage`` and ``spend-limit`` (``command`` is `build_parser`'s ``command``)."""
    usage = command(
        "usage",
        "tokens, cache tokens, model calls and cost, summed",
        "What model calls used and cost, summed by --by (from the store at --database-url): "
        f"of --partition (default: {DEFAULT_PARTITION}), or of every partition with "
        "--all-partitions (operators). Days are UTC days; costs are exact US dollars "
        "(calls of unpriced profiles count 0).",
    )
    usage.add_argument(
        "--by",
        default="agent,model,day",
        metavar="KEYS",
        help=f"group by these, comma-separated: one or more of {GROUPINGS_HELP} "
        "(default: agent,model,day)",
    )
    usage.add_argument("--since", metavar="DAY", help="from this UTC day on (YYYY-MM-DD)")
    usage.add_argument("--until", metavar="DAY", help="up to this UTC day, included")
    usage.add_argument(
        "--all-partitions",
        action="store_true",
        help="every partition's usage (operators): grouped by partition too",
    )
    usage.add_argument("--json", action="store_true", help="print the rows as JSON")
    limit = command(
        "spend-limit",
        "show or set a partition's spend limit per day",
        f"The spend limit per UTC day of --partition (default: {DEFAULT_PARTITION}), held in "
        "the store at --database-url and enforced by every worker: once the partition's "
        "calls of the day cost that much, new runs are refused and running ones stop at "
        "their next model call (budget_exceeded). Without options: show it.",
    )
    action = limit.add_mutually_exclusive_group()
    action.add_argument("--per-day", metavar="USD", help="set the limit, in US dollars")
    action.add_argument("--clear", action="store_true", help="remove the limit")
