"""``otherone dev`` (a local Temporal dev server and a worker) and ``otherone worker`` (a worker
against an existing server). Both serve until a signal, then drain in-flight activities."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from temporalio.client import Client

from otherone.client.cli.context import Context
from otherone.client.cli.dev_folder import (
    claim_dev_folder,
    dev_settings,
    settings_hint,
    write_dev_env,
)
from otherone.client.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError, exit_now
from otherone.client.cli.stores import open_store, safe_url
from otherone.client.cli.temporal import connect_checked
from otherone.config import RuntimeConfig
from otherone.examples import EXAMPLE_CONFIG
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.worker.app import AgentWorker, build_worker
from otherone.worker.codec import EncryptionCodec, codec_from_settings
from otherone.worker.devserver import DevServer
from otherone.worker.logs import configure_logging
from otherone.worker.queues import ALL_ROLES, WorkerRole
from otherone.worker.retention import prune_events_periodically
from otherone.worker.settings import DEFAULT_DATA_DIR, DEV_ENV_FILE, Settings
from otherone.worker.shutdown import ActivityTracker, ShutdownReport, WorkerFailed, serve
from otherone.worker.telemetry import WorkerTelemetry, worker_telemetry


async def cmd_dev(args: argparse.Namespace, ctx: Context) -> int:
    settings = ctx.settings
    configure_logging(settings.log_level)
    config_path = _config_path(settings, ctx.err)
    config = load_config(config_path)
    codec = codec_from_settings(settings)
    data_dir = settings.data_dir.resolve()
    with claim_dev_folder(settings, data_dir):
        store = open_store(settings.store_url())
        return await _dev(args, ctx, settings, config, config_path, codec, data_dir, store)


async def _dev(
    args: argparse.Namespace,
    ctx: Context,
    settings: Settings,
    config: RuntimeConfig,
    config_path: Path,
    codec: EncryptionCodec | None,
    data_dir: Path,
    store: Store,
) -> int:
    server = DevServer(
        port=settings.temporal_port,
        ui_port=settings.ui_port,
        db_file=data_dir / "temporal.db",
        namespace=settings.namespace,
        log_file=data_dir / "temporal.log",
        extra_args=_ui_codec_args(settings),
    )
    try:
        ctx.err.print("starting the Temporal dev server…", style="dim")
        await server.start()
        telemetry = worker_telemetry(settings)
        tracker = ActivityTracker()
        client = await connect_checked(server.address, settings.namespace, telemetry, codec=codec)
        worker = _build_worker(client, config, store, settings, telemetry, tracker)
        needed = dev_settings(server, settings, config_path)
        dev_env = write_dev_env(data_dir, needed, settings)
        rows = [
            ("temporal", f"{server.address}  (namespace {settings.namespace})"),
            ("web ui", server.ui_url or "-"),
            ("task queue", settings.task_queue),
            ("config", str(config_path)),
            ("state", f"{server.db_file}  (server log {data_dir / 'temporal.log'})"),
            ("store", safe_url(settings.store_url())),
        ]
        for label, value in rows:
            ctx.out.print(f"{label:<11} {value}", markup=False)
        api: contextlib.AbstractAsyncContextManager[None] = contextlib.nullcontext()
        if getattr(args, "serve", False):
            from otherone.client.cli.http_api import api_beside_dev

            api = api_beside_dev(ctx, client, store, config, server.ui_url)
        hint = settings_hint(needed, settings)
        if dev_env.parent == DEFAULT_DATA_DIR.resolve():
            ctx.out.print(
                f"other commands in this folder read {dev_env}; elsewhere set: {hint}",
                markup=False,
            )
        else:
            ctx.out.print(f"other commands need: {hint}", markup=False)
        ctx.out.print("ready: Ctrl-C to stop", style="dim")
        sys.stdout.flush()
        async with api, _event_pruning(settings, store), worker.background():
            report = await _serve(worker, ctx, tracker)
    finally:
        ctx.err.print("stopping the Temporal dev server…", style="dim")
        (data_dir / DEV_ENV_FILE).unlink(missing_ok=True)
        await server.stop()
        store.close()
    _leave_if_unclean(report)
    return EXIT_OK


async def cmd_worker(args: argparse.Namespace, ctx: Context) -> int:
    settings = ctx.settings
    configure_logging(settings.log_level)
    config_path = _config_path(settings, ctx.err)
    config = load_config(config_path)
    codec = codec_from_settings(settings)
    store = open_store(settings.store_url())
    try:
        telemetry = worker_telemetry(settings)
        tracker = ActivityTracker()
        client = await connect_checked(
            settings.temporal_address, settings.namespace, telemetry, codec=codec, settings=settings
        )
        worker = _build_worker(
            client, config, store, settings, telemetry, tracker, roles=settings.worker_roles
        )
        ctx.err.print(
            f"worker on task queue {', '.join(worker.task_queues)} "
            f"(roles {','.join(settings.worker_roles)}) at {settings.temporal_address} "
            f"(namespace {settings.namespace}, config {config_path}, "
            f"store {safe_url(settings.store_url())}); Ctrl-C to stop",
            markup=False,
        )
        async with _event_pruning(settings, store), worker.background():
            report = await _serve(worker, ctx, tracker)
        _leave_if_unclean(report)
    finally:
        store.close()
    return EXIT_OK


def _build_worker(
    client: Client,
    config: RuntimeConfig,
    store: Store,
    settings: Settings,
    telemetry: WorkerTelemetry,
    tracker: ActivityTracker,
    *,
    roles: Iterable[WorkerRole | str] = ALL_ROLES,
) -> AgentWorker:
    """The worker the settings describe (queues, slots, grace period), traced and tracked;
    ``roles`` narrows what it serves (`otherone worker --roles`; all by default)."""
    return build_worker(
        client,
        config,
        store,
        task_queue=settings.task_queue,
        max_concurrent_activities=settings.max_concurrent_activities,
        max_concurrent_local_activities=settings.max_concurrent_local_activities,
        max_cached_workflows=settings.max_cached_workflows,
        interceptors=[*telemetry.interceptors(config), tracker],
        graceful_shutdown_timeout=timedelta(seconds=settings.shutdown_grace_seconds),
        model_task_queue=settings.model_task_queue,
        tool_task_queue=settings.tool_task_queue,
        max_concurrent_model_calls=settings.max_concurrent_model_calls,
        max_concurrent_tool_calls=settings.max_concurrent_tool_calls,
        roles=roles,
        workflow_sandbox=settings.workflow_sandbox,
        deployment=settings.worker_deployment(),
        reconcile_every=timedelta(seconds=settings.reconcile_seconds),
    )


def _config_path(settings: Settings, err: Console) -> Path:
    """The configuration to load; the example one when the default file is absent."""
    path = settings.config
    if path.is_file():
        return path
    if "config" in settings.model_fields_set:
        raise CliError(EXIT_USAGE, f"config file {path} not found")
    err.print(f"note: {path} not found; using the example configuration {EXAMPLE_CONFIG}")
    return EXAMPLE_CONFIG


def _ui_codec_args(settings: Settings) -> list[str]:
    """``otherone dev``'s Web UI decodes payloads through ``OTHERONE_UI_CODEC_ENDPOINT``."""
    endpoint = settings.ui_codec_endpoint
    return ["--ui-codec-endpoint", endpoint] if endpoint else []


async def _serve(worker: AgentWorker, ctx: Context, tracker: ActivityTracker) -> ShutdownReport:
    """Run ``worker`` until a signal, then drain it (`otherone.worker.shutdown.serve`): in-flight
    activities get ``shutdown_grace_seconds`` to finish; a second signal stops waiting."""

    def notify(message: str) -> None:
        ctx.err.print(message, style="dim", markup=False)

    try:
        return await serve(
            worker.workers,
            ctx.stop,
            tracker=tracker,
            health_file=ctx.settings.health_file,
            notify=notify,
            force=ctx.force,
        )
    except WorkerFailed as error:
        raise CliError(EXIT_FAILED, str(error)) from None
    finally:
        await worker.release()  # MCP servers stop with the worker


@contextlib.asynccontextmanager
async def _event_pruning(settings: Settings, store: Store) -> AsyncIterator[None]:
    """Prune old events in the background while the worker serves (`otherone.worker.retention`)."""
    if not settings.event_retention_hours:
        yield
        return
    retention = timedelta(hours=settings.event_retention_hours)
    task = asyncio.create_task(prune_events_periodically(store, retention))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _leave_if_unclean(report: ShutdownReport) -> None:
    """After a drain that left activities running (they ignored cancellation, e.g. a tool
    blocked in a thread, or a second signal came): exit 0 at once. `asyncio.run`'s cleanup
    would otherwise wait for their threads for ever; Temporal retries them elsewhere."""
    if not report.clean:
        exit_now(EXIT_OK)
