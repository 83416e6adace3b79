"""``otherone run`` (start a run and stream it), ``send`` (queue messages), ``cancel``."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from otherone.client.agent_client import AgentClient, build_request, root_run_id
from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_OK, EXIT_USAGE, CliError, one_line
from otherone.client.cli.output import exit_code, follow_run, print_outcome
from otherone.client.cli.stores import event_store, existing_store, watch_store
from otherone.client.cli.temporal import agent_client, connect_configured, ui_base, ui_link
from otherone.client.cli.watching import watch_tree
from otherone.client.console import EventPrinter
from otherone.client.request_checks import most_specific
from otherone.errors import InvalidRequestError
from otherone.parts import PART_ADAPTER, Part, QueuedMessage
from otherone.result_contracts import check_contract
from otherone.runs import AgentRunRequest, AgentRunResult
from otherone.store import Store
from otherone.toml_config import load_config


async def cmd_run(args: argparse.Namespace, ctx: Context) -> int:
    settings = ctx.settings
    request = _request_from(args, settings.partition)  # validate before touching the network
    if args.follow and args.quiet:
        raise CliError(EXIT_USAGE, "--follow: not allowed with --quiet")
    streaming = not (args.json or args.quiet)
    # With the configuration file the workers read, a request for an agent it does not define
    # (or with limits above its own) is refused before a run starts (exit 2). A file named
    # (--config, OTHERONE_CONFIG) must exist; the default one may be absent.
    config = load_config(settings.config) if settings.config.is_file() else None
    if config is None and "config" in settings.model_fields_set:
        raise CliError(EXIT_USAGE, f"config file {settings.config} not found")
    client = await connect_configured(settings)
    store: Store | None = None
    if args.follow:
        store = watch_store(settings)  # refused before the run starts
    elif streaming:
        store = event_store(settings, ctx.err)
    else:
        store = existing_store(settings)  # to read an output stored as an artifact
    try:
        agents = AgentClient(
            client,
            task_queue=settings.task_queue,
            store=store,
            partition_key=settings.partition,
            config=config,
        )
        run_id = root_run_id(request)
        ctx.interrupt_note = (
            f"interrupted: run {run_id} keeps going "
            f"(`otherone show {run_id}`, `otherone cancel {run_id}`)"
        )
        handle = await agents.start(request)
        if not (args.quiet or args.json):  # machine output stays as it was (JSON names the run)
            # At once, so a second terminal can send/cancel/watch it while it runs.
            link = await ui_link(client, ui_base(settings), settings.namespace, handle.run_id)
            ctx.err.print(f"run {handle.run_id} started · {link}", style="dim", markup=False)
        if args.follow:
            return await watch_tree(
                ctx, agents, handle.run_id, json_lines=args.json, verbose=args.verbose
            )
        if not streaming:
            return _print_unstreamed(ctx, await handle.result(), json_line=args.json)
        printer = EventPrinter(handle.run_id, sys.stdout, ctx.err, verbose=args.verbose)
        result = await follow_run(handle, store, printer)
        link = await ui_link(client, ui_base(settings), settings.namespace, result.run_id)
        return print_outcome(ctx.err, result, printer, link)
    finally:
        if store is not None:
            store.close()


def _request_from(args: argparse.Namespace, partition: str | None) -> AgentRunRequest:
    text = text_argument(args.text, "TEXT")
    parts = attached_parts(args)
    fields: dict[str, Any] = {
        "entry_agent": args.agent,
        "input": text if not parts else [{"role": "user", "content": [_text(text), *parts]}],
    }
    session: dict[str, Any] = {}
    if args.session is not None:
        session["session_id"] = args.session
    if args.context_window is not None:
        session["context_window"] = args.context_window
    if session:
        fields["session"] = session
    if partition is not None:
        fields["runtime_context"] = {"partition_key": partition}
    contract = _result_contract(args)
    if contract is not None:
        fields["result_contract"] = contract
    if args.output_retries is not None:
        fields["output_retries"] = args.output_retries
    if args.model is not None:
        fields["model"] = args.model
    if args.webhook is not None:
        fields["webhook"] = args.webhook
    # Always start by key (a random one if none was given): the run id is then known before
    # the start RPC, so an interrupt at any moment can still name the run, and a start that is
    # retried after a network error cannot create a second run.
    given = args.idempotency_key  # an explicit "" is refused by validation, not replaced
    fields["idempotency_key"] = _random_key(args.agent) if given is None else given
    request = build_request(**fields)
    check_contract(request.result_contract)  # a broken schema is refused before any start
    return request


def _parts_message(text: str, parts: list[dict[str, Any]], field: str) -> tuple[Part, ...]:
    try:
        return tuple(PART_ADAPTER.validate_python(part) for part in [_text(text), *parts])
    except ValidationError as error:
        where, message = most_specific(error)
        raise InvalidRequestError(message, field=f"{field}.{where}") from None


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def attached_parts(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--image`` and ``--file`` as parts (JSON): an http(s) URL as such, else a path the
    client reads, checks and stores (`otherone.part_storage`) before the run starts."""
    parts: list[dict[str, Any]] = []
    for image in args.image:
        source = "url" if image.startswith(("http://", "https://")) else "path"
        parts.append({"type": "image", source: image})
    parts += [{"type": "file", "path": path} for path in args.file]
    return parts


def _result_contract(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--result-kind`` / ``--result-schema`` as a result contract (None: neither given)."""
    if args.result_schema is None:
        return None if args.result_kind is None else {"kind": args.result_kind}
    text = text_argument(args.result_schema, "--result-schema")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as error:
        raise CliError(EXIT_USAGE, f"--result-schema: not JSON: {error}") from None
    return {"kind": args.result_kind or "json", "schema": schema}


def _random_key(agent: str) -> str:
    """A fresh key that makes a readable run id: ``assistant-<16 hex>`` becomes the id
    ``assistant-<16 hex>-<16 hex>`` (an invalid agent name is refused by validation, not here)."""
    return f"{agent[:64]}-{uuid.uuid4().hex[:16]}"


def _print_unstreamed(ctx: Context, result: AgentRunResult, *, json_line: bool) -> int:
    """``--json``: the result as one JSON line; ``--quiet``: the output text (and a failure's
    one line on stderr)."""
    if json_line:
        sys.stdout.write(result.model_dump_json() + "\n")
    else:
        if result.text:
            sys.stdout.write(result.text + "\n")
        if result.failure is not None:
            ctx.err.print(
                f"error: run {result.run_id} {result.outcome.value}: "
                f"{result.failure.code.value}: {one_line(result.failure.message)}",
                markup=False,
            )
    return exit_code(result)


def text_argument(value: str, name: str) -> str:
    """A text argument as given, or read: ``-`` from stdin, ``@FILE`` from a UTF-8 file (the OS
    refuses command lines over ~128 KiB, and shells mangle long or multi-line text); ``@@...``
    is the text ``@...`` (a message that starts with @, e.g. a mention)."""
    if value == "-":
        return sys.stdin.read()
    if value.startswith("@@"):
        return value[1:]
    if not value.startswith("@") or len(value) == 1:
        return value
    path = Path(value[1:])
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise CliError(EXIT_USAGE, f"{name}: cannot read {path}: {reason}") from None


async def cmd_send(args: argparse.Namespace, ctx: Context) -> int:
    texts: list[str] = [text_argument(text, "TEXT") for text in args.texts]
    for index, text in enumerate(texts):
        if not text.strip():
            raise CliError(EXIT_USAGE, f"messages.{index}: must be a non-empty string")
    messages: list[QueuedMessage] = list(texts)
    parts = attached_parts(args)
    if parts:  # the last message carries them
        messages[-1] = _parts_message(texts[-1], parts, f"messages.{len(texts) - 1}")
    agents = await agent_client(ctx, all_partitions=args.all_partitions)
    await agents.send_message(args.run_id, messages)
    noun = "message" if len(texts) == 1 else "messages"
    ctx.err.print(f"queued {len(texts)} {noun} for run {args.run_id}", markup=False)
    return EXIT_OK


async def cmd_cancel(args: argparse.Namespace, ctx: Context) -> int:
    agents = await agent_client(ctx, all_partitions=args.all_partitions)
    await agents.cancel(args.run_id)
    ctx.err.print(f"cancellation requested for run {args.run_id}", markup=False)
    return EXIT_OK
