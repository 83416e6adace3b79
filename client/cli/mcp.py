"""``otherone mcp import FILE``: a Claude Desktop / Claude Code / VS Code / Cursor MCP
configuration as ``[mcp.<server>]`` tables (`otherone.mcp_import`), printed or written.

The tables go to stdout (or into ``--write`` FILE); the variables they reference, which the
worker needs, and the notes (servers left out or renamed) go to stderr. Secrets of the
imported file are never printed or written: they became ``${VAR}`` references.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK, EXIT_USAGE, CliError
from otherone.errors import InvalidRequestError
from otherone.mcp_import import ImportedConfig, read_client_config


async def cmd_mcp(args: argparse.Namespace, ctx: Context) -> int:
    """``mcp import`` (the only action: argparse has refused any other)."""
    source = "stdin" if args.file == "-" else args.file
    try:
        imported = read_client_config(_read(args.file), source)
    except InvalidRequestError as error:
        raise CliError(EXIT_USAGE, str(error)) from None
    for note in imported.notes:
        ctx.err.print(f"note: {note}", markup=False)
    if not imported.servers:
        raise CliError(EXIT_USAGE, f"no MCP server of {source} could be imported")
    text = imported.toml(source)
    if args.write is None:
        ctx.out.print(text, markup=False, end="")
    else:
        _write(Path(args.write), imported, text)
        ctx.err.print(
            f"wrote {len(imported.servers)} MCP server(s) to {args.write}: "
            + ", ".join(f"[mcp.{server.name}]" for server in imported.servers),
            markup=False,
        )
    if imported.variables:
        ctx.err.print(
            "set these on the worker (environment variables or entries of its secrets file, "
            "OTHERONE_SECRETS_FILE) before it starts:",
            markup=False,
        )
        for variable in sorted(imported.variables.values(), key=lambda found: found.name):
            ctx.err.print(f"  {variable.name}  {variable.where}", markup=False)
    return EXIT_OK


def _read(file: str) -> str:
    if file == "-":
        return sys.stdin.read()
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(EXIT_USAGE, f"cannot read {file}: {error}") from None


def _write(path: Path, imported: ImportedConfig, text: str) -> None:
    """Append the tables to ``path`` (created if missing), refusing a server it declares."""
    existing = ""
    if path.exists():
        try:
            existing = path.read_text(encoding="utf-8")
            declared = tomllib.loads(existing).get("mcp", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
            raise CliError(EXIT_USAGE, f"cannot add to {path}: {error}") from None
        taken = sorted(server.name for server in imported.servers if server.name in declared)
        if taken:
            raise CliError(
                EXIT_USAGE,
                f"{path} already declares {', '.join(f'[mcp.{name}]' for name in taken)}: "
                "nothing written (remove those tables, or print with no --write and merge)",
            )
    separator = "\n" if existing and not existing.endswith("\n\n") else ""
    if existing and not existing.endswith("\n"):
        separator = "\n\n"
    try:
        with path.open("a", encoding="utf-8") as file:
            file.write(separator + text)
    except OSError as error:
        raise CliError(EXIT_USAGE, f"cannot write {path}: {error}") from None
