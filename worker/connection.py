"""How a process reaches a production Temporal server: TLS, mutual TLS and API keys.

The dev server speaks plaintext on 127.0.0.1; a production cluster (self-hosted behind TLS, or
Temporal Cloud) needs a server CA (or the system roots), often a client certificate, or an API
key. Everything comes from settings (`OTHERONE_TEMPORAL_TLS*`, `OTHERONE_TEMPORAL_API_KEY`) so
the worker, the CLI and `AgentClient` users connect the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from temporalio.service import TLSConfig

from otherone.errors import ConfigurationError
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
