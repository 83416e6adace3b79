"""``otherone codec-server``: Temporal's codec protocol over HTTP, so the Web UI (and the
``temporal`` CLI) can show payloads encrypted with ``OTHERONE_ENCRYPTION_KEYS``."""

from __future__ import annotations

import argparse
import asyncio
import sys

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK, EXIT_USAGE, CliError
from otherone.worker.codec import codec_from_settings
from otherone.worker.codec_server import CodecServer, default_cors_origins


async def cmd_codec_server(args: argparse.Namespace, ctx: Context) -> int:
    settings = ctx.settings
    codec = codec_from_settings(settings)
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
        cors_origins=args.cors_origin or default_cors_origins(settings.ui_base_url()),
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
