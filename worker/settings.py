"""Process settings from environment variables (prefix ``OTHERONE_``) or a ``.env`` file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_TASK_QUEUE = "otherone"
DEFAULT_DATA_DIR = Path(".otherone")


#: Environment variables that name an OTLP endpoint (tracing then defaults to on).
OTLP_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def otel_trace_exporters(environ: Mapping[str, str] | None = None) -> list[str]:
    """Trace exporters the ``OTEL_*`` variables ask for (`worker.telemetry.configure_tracing`).

    ``OTEL_TRACES_EXPORTER`` (comma list, ``none`` dropped), else ``otlp`` when an OTLP
    endpoint is set, else none.
    """
    env = os.environ if environ is None else environ
    declared = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if declared:
        names = [name.strip().lower() for name in declared.split(",") if name.strip()]
        return [name for name in names if name != "none"]
    return ["otlp"] if any(env.get(name, "").strip() for name in OTLP_ENDPOINT_VARS) else []


def _otel_exporter_configured() -> bool:
    return bool(otel_trace_exporters())


class Settings(BaseSettings):
    """Where the worker and the CLI find Temporal, the configuration and the database."""

    model_config = SettingsConfigDict(env_prefix="OTHERONE_", env_file=".env", extra="ignore")

    temporal_address: str = Field("127.0.0.1:7233", description="Temporal frontend host:port.")
    namespace: str = Field("default", description="Temporal namespace.")
    task_queue: str = Field(
        DEFAULT_TASK_QUEUE, description="Task queue of agent workflows and activities."
    )
    config: Path = Field(
        Path("otherone.toml"), description="Path of the runtime configuration (TOML)."
    )
    data_dir: Path = Field(
        DEFAULT_DATA_DIR, description="Directory for the dev server's and store's files."
    )
    database_url: str | None = Field(
        None, description="SQLAlchemy URL of our store; default: SQLite file in data_dir."
    )
    ui_port: int = Field(8233, description="Port of the Temporal Web UI started by `otherone dev`.")
    temporal_port: int = Field(
        7233, description="Port of the dev server started by `otherone dev`."
    )
    max_concurrent_activities: int = Field(64, gt=0, description="Activity slots of one worker.")
    tracing: bool = Field(
        default_factory=_otel_exporter_configured,
        description="OpenTelemetry tracing (exporters from OTEL_* variables); default: on when "
        "OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER names an exporter.",
    )
    metrics_port: int | None = Field(
        None, gt=0, lt=65536, description="Serve Temporal worker metrics (Prometheus) on this port."
    )
    metrics_host: str = Field(
        "127.0.0.1", description="Address the Prometheus metrics endpoint binds to."
    )

    def store_url(self) -> str:
        from store import default_database_url

        return self.database_url or default_database_url(self.data_dir)
