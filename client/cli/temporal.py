"""Reaching Temporal from a command: a checked client, payload encryption, Web UI links."""

from __future__ import annotations

import asyncio
import getpass
import os
import socket
from typing import TYPE_CHECKING
from urllib.parse import quote

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from otherone.client.agent_client import AgentClient
from otherone.client.cli.context import Context
from otherone.client.cli.exits import EXIT_UNAVAILABLE, EXIT_USAGE, CliError
from otherone.client.cli.stores import existing_store
from otherone.worker.connection import (
    TemporalConnectError,
    TemporalConnection,
    connect,
    explain_connect_error,
    temporal_connection,
)
from otherone.worker.settings import Settings

if TYPE_CHECKING:
    from otherone.runs import AgentOutput
    from otherone.worker.codec import EncryptionCodec
    from otherone.worker.telemetry import WorkerTelemetry

#: Seconds to wait for Temporal to answer the first call before giving up with exit code 4.
CONNECT_TIMEOUT = 10.0


async def connect_checked(
    address: str,
    namespace: str,
    telemetry: WorkerTelemetry | None = None,
    *,
    codec: EncryptionCodec | None = None,
    settings: Settings | None = None,
) -> Client:
    """A client whose namespace answers, or `CliError` (4: unreachable, 2: no such namespace).

    ``telemetry`` (workers only) adds tracing and the Prometheus metrics runtime; ``codec``
    (`codec_from_settings`) encrypts payloads; ``settings`` give TLS and API key (not for the
    embedded dev server)."""
    connection = temporal_connection(settings) if settings is not None else TemporalConnection()
    try:
        # Client commands trace whenever OTEL_* names an exporter (None: `connect` decides), so
        # a run started here roots the tree's one trace.
        traced = telemetry.client_tracing if telemetry is not None else None
        runtime = telemetry.runtime if telemetry is not None else None
        client = await asyncio.wait_for(
            connect(
                address,
                namespace,
                tracing=traced,
                runtime=runtime,
                payload_codec=codec,
                tls=connection.tls,
                api_key=connection.api_key,
            ),
            CONNECT_TIMEOUT,
        )
        await asyncio.wait_for(
            client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=namespace)
            ),
            CONNECT_TIMEOUT,
        )
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise CliError(
                EXIT_USAGE, f"namespace '{namespace}' does not exist on Temporal at {address}"
            ) from None
        raise CliError(
            EXIT_UNAVAILABLE, explain_connect_error(error, address, connection)
        ) from None
    except TemporalConnectError as error:
        raise CliError(EXIT_UNAVAILABLE, error.message) from None
    except (RuntimeError, OSError, TimeoutError) as error:
        raise CliError(
            EXIT_UNAVAILABLE, explain_connect_error(error, address, connection)
        ) from None
    return client


async def connect_configured(settings: Settings) -> Client:
    """The client of the settings' Temporal (address, namespace, TLS, API key, encryption)."""
    return await connect_checked(
        settings.temporal_address,
        settings.namespace,
        codec=configured_codec(settings),
        settings=settings,
    )


def configured_codec(settings: Settings) -> EncryptionCodec | None:
    """`codec_from_settings`; the codec module (and cryptography) is loaded only when a key is
    configured, so a command against an unencrypted deployment starts without it."""
    if settings.encryption_keys is None and settings.encryption_key_file is None:
        return None  # what codec_from_settings answers for no keys
    from otherone.worker.codec import codec_from_settings

    return codec_from_settings(settings)


def cli_identity(settings: Settings) -> str:
    """Who this command decides approvals as: `Settings.identity`, else ``<user>@<host>`` (not
    the Temporal client's ``<pid>@<host>``: a person, and the same in every command)."""
    if settings.identity:
        return settings.identity
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's): its number
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


async def agent_client(
    ctx: Context, *, all_partitions: bool = False, store_when_needed: bool = False
) -> AgentClient:
    """An `AgentClient` of the settings' Temporal and (when it exists) store: with the store,
    outputs stored as artifacts are shown whole. Scoped to ``OTHERONE_PARTITION`` when set,
    unless ``all_partitions`` (an operator's explicit choice).

    ``store_when_needed``: the default SQLite file is left for `store_for_output` to open, so a
    command that reads no artifact skips SQLAlchemy (a fifth of `otherone show`'s start-up).
    Opening it does not touch the file, so nothing but the time differs; a ``--database-url``
    is still opened here, where a malformed one is reported."""
    settings = ctx.settings
    client = await connect_configured(settings)
    deferred = store_when_needed and settings.database_url is None
    return AgentClient(
        client,
        task_queue=settings.task_queue,
        store=None if deferred else existing_store(settings),
        partition_key=None if all_partitions else settings.partition,
        identity=cli_identity(settings),
    )


async def store_for_output(
    ctx: Context, agents: AgentClient, output: AgentOutput | None
) -> AgentOutput | None:
    """``output`` resolved like `AgentClient.resolve_output`, opening the store of a client
    made with ``store_when_needed`` only for an output stored as an artifact."""
    if output is not None and output.is_reference and agents.store is None:
        agents.store = existing_store(ctx.settings)
    return await agents.resolve_output(output)


def ui_base(settings: Settings) -> str:
    """Base URL of the Web UI that links point to (`Settings.ui_base_url`)."""
    return settings.ui_base_url()


async def ui_link(client: Client, base: str, namespace: str, run_id: str) -> str:
    """Web UI link of the workflow ``run_id`` (with its Temporal run id when it answers)."""
    link = f"{base}/namespaces/{quote(namespace, safe='')}/workflows/{quote(run_id, safe='')}"
    try:
        description = await client.get_workflow_handle(run_id).describe()
    except RPCError:
        return link
    return f"{link}/{quote(description.run_id, safe='')}/history"
