"""How a process reaches a production Temporal server: TLS, mutual TLS and API keys.

The dev server speaks plaintext on 127.0.0.1; a production cluster (self-hosted behind TLS, or
Temporal Cloud) needs a server CA (or the system roots), often a client certificate, or an API
key. Everything comes from settings (`OTHERONE_TEMPORAL_TLS*`, `OTHERONE_TEMPORAL_API_KEY`) so
the worker, the CLI and `AgentClient` users connect the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client, Interceptor
from temporalio.converter import (
    DataConverter,
    PayloadCodec,
)
from temporalio.runtime import Runtime
from temporalio.service import RPCStatusCode, TLSConfig

from otherone.errors import ConfigurationError, UnavailableError
from otherone.payloads import RedactingEncodedFailureConverter, compact_data_converter
from otherone.worker.settings import Settings


@dataclass(frozen=True)
class TemporalConnection:
    """What `otherone.worker.app.connect` needs besides the address and namespace."""

    # Out of reprs: the TLS config holds the client's private key.
    tls: TLSConfig | bool = field(default=False, repr=False)
    api_key: str | None = field(default=None, repr=False)


def temporal_connection(settings: Settings) -> TemporalConnection:
    """TLS and API-key options from settings; files are read here, errors name the setting."""
    api_key = settings.temporal_api_key.get_secret_value() if settings.temporal_api_key else None
    wants_tls = settings.temporal_tls or bool(
        api_key
        or settings.temporal_tls_ca_file
        or settings.temporal_tls_cert_file
        or settings.temporal_tls_server_name
    )
    if not wants_tls:
        return TemporalConnection(api_key=api_key)
    if not (
        settings.temporal_tls_ca_file
        or settings.temporal_tls_cert_file
        or settings.temporal_tls_server_name
    ):
        return TemporalConnection(tls=True, api_key=api_key)  # system roots, the address's name
    return TemporalConnection(
        tls=TLSConfig(
            server_root_ca_cert=_read(settings.temporal_tls_ca_file, "temporal_tls_ca_file"),
            client_cert=_read(settings.temporal_tls_cert_file, "temporal_tls_cert_file"),
            client_private_key=_read(settings.temporal_tls_key_file, "temporal_tls_key_file"),
            domain=settings.temporal_tls_server_name,
        ),
        api_key=api_key,
    )


def _read(path: Path | None, setting: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConfigurationError(
            f"cannot read {path}: {error.strerror}", field=f"OTHERONE_{setting.upper()}"
        ) from None


#: What the transport says when the server closes the connection right after connecting.
_DROPPED = (
    "close_notify",
    "CertificateRequired",
    "UnexpectedEof",
    "broken pipe",
    "ConnectionReset",
    "Connection reset",
    "connection closed",
    "transport error",
)


class TemporalConnectError(UnavailableError):
    """Temporal could not be reached; the message names the likely cause and the setting."""


def explain_connect_error(
    error: BaseException, address: str, connection: TemporalConnection
) -> str:
    """One line naming the likely cause of a failed connection, and the setting to check.

    The SDK reports every failure as a ``RuntimeError`` carrying the transport's error chain
    (tonic/rustls/hyper); the markers below are the ones that chain shows for each cause.
    """
    text = str(error)
    tls = connection.tls is not False
    where = f"Temporal at {address} (OTHERONE_TEMPORAL_ADDRESS)"
    if isinstance(error, TimeoutError):
        return f"no answer from {where} in time: a firewall, or the wrong port?"
    if "dns error" in text or "Name or service not known" in text:
        host = address.rsplit(":", 1)[0]
        return f"unknown host '{host}' for {where}"
    if "ConnectionRefused" in text or "Connection refused" in text:
        return f"connection refused by {where}: nothing listens there (is `otherone dev` running?)"
    if "InvalidContentType" in text or "InvalidMessage" in text:
        return (
            f"TLS handshake with {where} failed: the server does not speak TLS; unset "
            "OTHERONE_TEMPORAL_TLS (and OTHERONE_TEMPORAL_API_KEY, which implies TLS)"
        )
    if "InvalidCertificate" in text:
        return _certificate_problem(text, where)
    if _is_refused_credential(error):
        return (
            f"{where} refused our credentials: check OTHERONE_TEMPORAL_API_KEY (or the client "
            "certificate) and OTHERONE_NAMESPACE"
        )
    if any(marker in text for marker in _DROPPED):
        # Right after the handshake: a TLS server dropping a plaintext client, or a mutual-TLS
        # server dropping a client without a certificate it trusts.
        if tls:
            return (
                f"{where} closed the TLS connection: it wants a client certificate it trusts "
                "(OTHERONE_TEMPORAL_TLS_CERT_FILE / OTHERONE_TEMPORAL_TLS_KEY_FILE)"
            )
        return f"{where} dropped the connection: it probably wants TLS (OTHERONE_TEMPORAL_TLS=true)"
    return f"cannot reach {where}: {text.splitlines()[0] if text else type(error).__name__}"


def _certificate_problem(text: str, where: str) -> str:
    if "NotValidForName" in text:
        return (
            f"the TLS certificate of {where} is not valid for the name we expected: set "
            "OTHERONE_TEMPORAL_TLS_SERVER_NAME to a name the certificate carries"
        )
    if "Expired" in text:
        return f"the TLS certificate of {where} has expired"
    return (
        f"the TLS certificate of {where} is not trusted: set OTHERONE_TEMPORAL_TLS_CA_FILE to "
        "the CA that signed it"
    )


def _is_refused_credential(error: BaseException) -> bool:
    status = getattr(error, "status", None)
    return status in (RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.PERMISSION_DENIED) or (
        "Unauthenticated" in str(error) or "PermissionDenied" in str(error)
    )


# --------------------------------------------------------------------------- clients


def data_converter(payload_codec: PayloadCodec | None = None) -> DataConverter:
    """The pydantic data converter (activity payloads compacted: `otherone.payloads`), with
    ``payload_codec`` (e.g. encryption) when given.

    With a codec, failure messages and stack traces move into encoded attributes too, so the
    codec covers them (`DefaultFailureConverterWithEncodedAttributes`); readers need the codec.
    """
    if payload_codec is None:
        return compact_data_converter
    return dataclasses.replace(
        compact_data_converter,
        payload_codec=payload_codec,
        failure_converter_class=RedactingEncodedFailureConverter,
    )


async def connect(
    address: str,
    namespace: str = "default",
    *,
    tracing: bool | None = None,
    runtime: Runtime | None = None,
    payload_codec: PayloadCodec | None = None,
    tls: TLSConfig | bool = False,
    api_key: str | None = None,
) -> Client:
    """A client with the pydantic data converter (workers, clients and replayers must agree).

    ``tracing`` adds Temporal's OpenTelemetry ``TracingInterceptor`` (workers built from this
    client inherit it; see `otherone.worker.telemetry`), so a run tree started from this client
    is one trace. ``None`` (the default) turns it on whenever the ``OTEL_*`` variables name an
    exporter, installing our tracer provider unless the application installed its own.
    ``runtime`` is e.g. a Prometheus-metrics runtime
    (`otherone.worker.telemetry.prometheus_runtime`). ``payload_codec`` (e.g.
    `otherone.worker.codec`'s `EncryptionCodec`, from `codec_from_settings(Settings())`)
    encodes every payload this client and the workers built from it send; every client and
    worker of a namespace must use it. ``tls`` / ``api_key`` reach a production cluster
    (`otherone.worker.connection.temporal_connection` builds them from settings).

    Raises `TemporalConnectError` (an `UnavailableError`) naming the likely cause (refused,
    unknown host, TLS handshake, untrusted certificate, refused credentials) and the setting.
    """
    if tracing is None:
        tracing = _tracing_configured()
    interceptors: list[Interceptor] = []
    if tracing:  # OpenTelemetry is imported only then (a client command starts faster)
        from temporalio.contrib.opentelemetry import TracingInterceptor

        interceptors.append(TracingInterceptor())
    try:
        return await Client.connect(
            address,
            namespace=namespace,
            data_converter=data_converter(payload_codec),
            interceptors=interceptors,
            runtime=runtime,
            tls=tls,
            api_key=api_key,
        )
    except RuntimeError as error:
        connection = TemporalConnection(tls=tls, api_key=api_key)
        raise TemporalConnectError(explain_connect_error(error, address, connection)) from error


def _tracing_configured() -> bool:
    """True when ``OTEL_*`` names an exporter; then spans need an SDK provider to go anywhere."""
    from otherone.worker.settings import otel_trace_exporters

    if not otel_trace_exporters():
        return False
    from otherone.worker.telemetry import ensure_tracing

    ensure_tracing("otherone-client")
    return True
