"""``otherone upgrade check``: before a deploy, replay the runs that would move to the new code
(`otherone.worker.upgrade`; runs pinned to their build are left out, docs/upgrading.md)."""

from __future__ import annotations

import argparse

from otherone.client.cli.context import Context


async def cmd_upgrade(args: argparse.Namespace, ctx: Context) -> int:
    """``upgrade check`` (the only action: argparse has refused any other)."""
    from otherone.worker import upgrade

    if not args.verbose:
        upgrade.quiet_replay_warnings()
    return await upgrade.check_main(
        args.query,
        verbose=args.verbose,
        include_pinned=args.include_pinned,
        settings=ctx.settings,
    )
