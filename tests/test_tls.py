"""Reaching a production Temporal over TLS and mutual TLS, from settings.

The dev server speaks plaintext, so the test puts a TLS-terminating proxy in front of it (ALPN
h2, like a load balancer before a Temporal frontend), with certificates made here by a throw-away
CA. A real `otherone run` goes through it; without the client certificate the proxy refuses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import TLSConfig
from temporalio.testing import WorkflowEnvironment

from otherone.errors import ConfigurationError, UnavailableError
from otherone.examples import EXAMPLE_CONFIG
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.worker.app import connect
from otherone.worker.connection import TemporalConnectError, temporal_connection
from otherone.worker.settings import Settings
from tests.harness import agent_env
from tests.test_cli import address_of, cli_env, otherone


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(
    subject: str,
    issuer: x509.Name,
    signer: ec.EllipticCurvePrivateKey,
    key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        return path

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    pem = serialization.Encoding.PEM
    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _issue("test CA", _name("test CA"), ca_key, ca_key, ca=True)
    server = _issue("localhost", ca.subject, ca_key, server_key, server=True)
    client = _issue("otherone worker", ca.subject, ca_key, client_key)
    return Pki(
        ca=write("ca.pem", ca.public_bytes(pem)),
        server_cert=write("server.pem", server.public_bytes(pem)),
        server_key=write("server.key", pem_key(server_key)),
        client_cert=write("client.pem", client.public_bytes(pem)),
        client_key=write("client.key", pem_key(client_key)),
    )


@contextlib.asynccontextmanager
async def tls_proxy(pki: Pki, upstream: str, *, mutual: bool) -> AsyncIterator[str]:
    """TLS (h2) on a free port in front of the plaintext ``upstream``; yields host:port."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.set_alpn_protocols(["h2"])
    if mutual:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    host, port = upstream.rsplit(":", 1)
    pipes: set[asyncio.Task[None]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writers.extend((writer, up_writer))
        for task in (pipe(reader, up_writer), pipe(up_reader, writer)):
            pipes.add(asyncio.create_task(task))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in pipes:
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
        for writer in writers:
            writer.close()


async def test_the_cli_reaches_temporal_through_mutual_tls_and_is_refused_without_a_cert(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path)
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    try:
        config = load_config(EXAMPLE_CONFIG)
        async with (
            agent_env(client, task_queue, config, tmp_path, store=store),
            tls_proxy(pki, address_of(temporal_env), mutual=True) as address,
        ):
            tls_env = {
                **env,
                "OTHERONE_TEMPORAL_ADDRESS": address,
                "OTHERONE_TEMPORAL_TLS_CA_FILE": str(pki.ca),
                "OTHERONE_TEMPORAL_TLS_SERVER_NAME": "localhost",
            }
            with_cert = {
                **tls_env,
                "OTHERONE_TEMPORAL_TLS_CERT_FILE": str(pki.client_cert),
                "OTHERONE_TEMPORAL_TLS_KEY_FILE": str(pki.client_key),
            }
            answered = await otherone("run", "assistant", "Weather in Paris?", env=with_cert)
            refused = await otherone("show", "run-unknown", env=tls_env, limit=60)
    finally:
        store.close()
    assert answered.code == 0, answered.describe()
    assert "sunny in Paris" in answered.stdout
    assert refused.code == 4, refused.describe()  # unreachable: the handshake was refused
    assert "client certificate" in refused.stderr, refused.stderr


def test_connection_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("OTHERONE_")]:
        monkeypatch.delenv(name)  # a developer's own settings must not leak in
    monkeypatch.chdir(tmp_path)  # nor a .env file
    pki = make_pki(tmp_path)
    assert temporal_connection(Settings(temporal_tls_server_name="temporal.internal")).tls
    assert temporal_connection(Settings()).tls is False
    cloud = temporal_connection(Settings(temporal_api_key="key-123"))  # type: ignore[arg-type]
    assert cloud.tls is True and cloud.api_key == "key-123"
    mutual = temporal_connection(
        Settings(
            temporal_tls_ca_file=pki.ca,
            temporal_tls_cert_file=pki.client_cert,
            temporal_tls_key_file=pki.client_key,
        )
    )
    assert isinstance(mutual.tls, TLSConfig)
    assert mutual.tls.server_root_ca_cert == pki.ca.read_bytes()
    assert mutual.tls.client_private_key == pki.client_key.read_bytes()
    with pytest.raises(ValidationError, match="OTHERONE_TEMPORAL_TLS_KEY_FILE"):
        Settings(temporal_tls_cert_file=pki.client_cert)
    with pytest.raises(ConfigurationError) as unreadable:
        temporal_connection(Settings(temporal_tls_ca_file=tmp_path / "missing.pem"))
    assert unreadable.value.field == "OTHERONE_TEMPORAL_TLS_CA_FILE"
    assert "key-123" not in repr(Settings(temporal_api_key="key-123"))  # type: ignore[arg-type]


async def _connect_error(address: str, **options: Any) -> str:
    with pytest.raises(TemporalConnectError) as raised:
        await asyncio.wait_for(connect(address, **options), 30)
    assert isinstance(raised.value, UnavailableError)
    return raised.value.message


async def test_connection_errors_name_the_cause_and_the_setting(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Refused, unknown host, TLS to a plaintext server, plaintext to a TLS server, an
    untrusted certificate, a wrong server name, a missing client certificate: each says so."""
    plain = address_of(temporal_env)
    pki = make_pki(tmp_path)
    ca = pki.ca.read_bytes()
    refused = await _connect_error("127.0.0.1:1")
    assert "connection refused" in refused and "OTHERONE_TEMPORAL_ADDRESS" in refused
    unknown = await _connect_error("no-such-host.invalid:7233")
    assert "unknown host 'no-such-host.invalid'" in unknown
    tls_to_plain = await _connect_error(plain, tls=True)
    assert "does not speak TLS" in tls_to_plain and "OTHERONE_TEMPORAL_TLS" in tls_to_plain
    async with tls_proxy(pki, plain, mutual=True) as address:
        plain_to_tls = await _connect_error(address)
        assert "wants TLS (OTHERONE_TEMPORAL_TLS=true)" in plain_to_tls
        untrusted = await _connect_error(address, tls=True)
        assert "not trusted" in untrusted and "OTHERONE_TEMPORAL_TLS_CA_FILE" in untrusted
        wrong_name = await _connect_error(
            address, tls=TLSConfig(server_root_ca_cert=ca, domain="other.example")
        )
        assert "OTHERONE_TEMPORAL_TLS_SERVER_NAME" in wrong_name
        no_cert = await _connect_error(
            address, tls=TLSConfig(server_root_ca_cert=ca, domain="localhost")
        )
        assert "client certificate" in no_cert and "OTHERONE_TEMPORAL_TLS_CERT_FILE" in no_cert
