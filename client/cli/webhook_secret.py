"""``otherone webhook-secret [--rotate]``: the partition's webhook signing secret (store only: no
Temporal client is loaded)."""

from __future__ import annotations

import argparse
import asyncio
import json

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK
from otherone.client.cli.stores import open_store
from otherone.runs import DEFAULT_PARTITION


async def cmd_webhook_secret(args: argparse.Namespace, ctx: Context) -> int:
    partition = ctx.settings.partition or DEFAULT_PARTITION
    store = await asyncio.to_thread(open_store, ctx.settings.store_url())
    try:
        secrets = store.webhook_secrets
        change = secrets.rotate if args.rotate else secrets.get
        secret = await asyncio.to_thread(change, partition)
    finally:
        store.close()
    if args.json:
        ctx.out.print(json.dumps(secret.as_json()), markup=False, soft_wrap=True)
        return EXIT_OK
    ctx.out.print(secret.secret, markup=False, soft_wrap=True)
    if args.rotate and secret.previous_secret is not None:
        ctx.err.print(
            f"partition '{partition}': rotated; the previous secret was {secret.previous_secret}",
            markup=False,
            soft_wrap=True,
        )
    return EXIT_OK
