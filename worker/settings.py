"""Process settings from environment variables (prefix ``OTHERONE_``) or a ``.env`` file.

`Settings` reads them itself (`environment_values`), the way pydantic-settings' environment and
dotenv sources did: names case-insensitive, an empty value unset, keyword arguments over
environment variables over the files (a later file over an earlier one) over the defaults.
Without pydantic-settings, a command starts ~20 ms faster (issue 16: `otherone show`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from otherone.errors import ConfigurationError
from otherone.partitions import PARTITION_PATTERN
from otherone.redaction import remember
from otherone.worker.queues import (
    ALL_ROLES,
    DEFAULT_LOCAL_ACTIVITY_SLOTS,
    WorkerRole,
    parse_roles,
)
from otherone.worker.sandbox import DEFAULT_WORKFLOW_SANDBOX, WorkflowSandbox
from otherone.worker.versioning import WorkerDeployment

DEFAULT_TASK_QUEUE = "otherone"
DEFAULT_DATA_DIR = Path(".otherone")
#: Where `otherone dev` leaves the settings other commands need to reach it (see `Settings`).
DEV_ENV_FILE = "dev.env"
#: The pid of the `otherone dev` that uses a data folder, in that folder while it runs.
DEV_PID_FILE = "dev.pid"
#: Seconds in-flight activities get to finish after SIGTERM (`Settings.shutdown_grace_seconds`).
DEFAULT_SHUTDOWN_GRACE_SECONDS = 30.0
#: Port of `otherone codec-server` unless --port says otherwise (here, not in
#: `otherone.worker.codec_server`, so the CLI's help does not load Temporal to show it).
CODEC_SERVER_PORT = 8888


#: Environment variables that name an OTLP endpoint (tracing then defaults to on).
OTLP_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def otel_trace_exporters(environ: Mapping[str, str] | None = None) -> list[str]:
    """Trace exporters the ``OTEL_*`` variables ask for
    (`otherone.worker.telemetry.configure_tracing`).

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


#: The GenAI conventions' content switch (their instrumentations read it too), and the values
#: that turn capture on ("true", and the newer instrumentations' span modes); anything else
#: (unset, "false", "NO_CONTENT", "EVENT_ONLY") leaves it off.
GENAI_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
GENAI_CONTENT_ON = frozenset({"true", "1", "yes", "span_only", "span_and_event"})


def genai_content_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for content."""
    env = os.environ if environ is None else environ
    return env.get(GENAI_CONTENT_ENV, "").strip().lower() in GENAI_CONTENT_ON


ENV_PREFIX = "OTHERONE_"
#: Files of ``OTHERONE_*`` lines (dotenv syntax), relative to the working directory, read when
#: they exist. `otherone dev` writes the address and Web UI it serves to DEV_ENV_FILE while it
#: runs, so other commands in the same folder reach it; a project's .env (later: wins) and real
#: environment variables (win over both) override it.
ENV_FILES: tuple[Path, ...] = (DEFAULT_DATA_DIR / DEV_ENV_FILE, Path(".env"))
#: One env file or several (`Settings`' ``_env_file``).
EnvFiles = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def environment_values(
    names: Iterable[str], env_files: Sequence[str | os.PathLike[str]] = ENV_FILES
) -> dict[str, str]:
    """Raw values of the settings ``names`` from ``OTHERONE_<NAME>`` variables and env files.

    An empty value means unset (the default applies), so a deployment can pass optional
    settings through as ``OTHERONE_X: ${OTHERONE_X:-}`` (docker-compose.yml). A file's line
    without ``=`` unsets the name for the files before it (as python-dotenv reads it: None).
    """
    from_files: dict[str, str | None] = {}
    for file in env_files:
        from_files.update(_read_env_file(Path(file).expanduser()))
    environ = {key.lower(): value for key, value in os.environ.items() if value != ""}
    values: dict[str, str] = {}
    for name in names:
        key = f"{ENV_PREFIX}{name}".lower()
        value = environ.get(key)
        if value is None:
            value = from_files.get(key)
        if value is not None:
            values[name] = value
    return values


def _read_env_file(path: Path) -> dict[str, str | None]:
    if not (path.is_file() or path.is_fifo()):
        return {}
    from dotenv import dotenv_values  # only when there is a file: most starts read none

    try:
        values = dotenv_values(path, encoding="utf-8")
    except UnicodeDecodeError as error:  # was a traceback, even for --help
        raise ConfigurationError(
            f"not UTF-8 text ({error.reason} at byte {error.start})", file=str(path)
        ) from None
    return {key.lower(): value for key, value in values.items() if value != ""}


class Settings(BaseModel):
    """Where the worker and the CLI find Temporal, the configuration and the database.

    ``Settings(**values)``: keyword arguments win over the environment (`environment_values`);
    ``_env_file`` replaces `ENV_FILES` (None: read no file)."""

    # validate_default: a default is checked like a given value (tracing's factory included).
    model_config = ConfigDict(extra="ignore", validate_default=True)

    def __init__(self, _env_file: EnvFiles | None = ENV_FILES, **values: Any) -> None:
        if _env_file is None:
            _env_file = ()
        elif isinstance(_env_file, str | os.PathLike):
            _env_file = (_env_file,)
        found = environment_values(type(self).model_fields, _env_file)
        super().__init__(**{**found, **values})

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
    ui_port: int = Field(
        8233, gt=0, lt=65536, description="Port of the Temporal Web UI started by `otherone dev`."
    )
    temporal_port: int = Field(
        7233, gt=0, lt=65536, description="Port of the dev server started by `otherone dev`."
    )
    temporal_tls: bool = Field(
        False,
        description="Connect to Temporal over TLS (implied by any temporal_tls_* file or an API "
        "key); without a CA file the system's root certificates are trusted.",
    )
    temporal_tls_ca_file: Path | None = Field(
        None, description="PEM file of the CA that signed the Temporal server's certificate."
    )
    temporal_tls_cert_file: Path | None = Field(
        None, description="PEM client certificate for mutual TLS (with temporal_tls_key_file)."
    )
    temporal_tls_key_file: Path | None = Field(
        None, description="PEM private key of temporal_tls_cert_file."
    )
    temporal_tls_server_name: str | None = Field(
        None, description="Name to verify the server's certificate against (default: the host)."
    )
    temporal_api_key: SecretStr | None = Field(
        None, description="API key for Temporal Cloud (sent as a bearer token; implies TLS)."
    )
    max_concurrent_activities: int = Field(64, gt=0, description="Activity slots of one worker.")
    # Worker Versioning (docs/upgrading.md): set both, or neither (an unversioned worker).
    deployment_name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]{1,100}$",
        description="Temporal Worker Deployment this worker belongs to (no '.'); with "
        "--build-id, runs stay on the build they started on (pinned) while it is current or "
        "draining.",
    )
    build_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.+-]{1,100}$",
        description="Build id of this worker's code within --deployment-name (e.g. 0.1.0 or a "
        "git commit): every worker of one build runs the same workflow code.",
    )
    max_concurrent_local_activities: int = Field(
        DEFAULT_LOCAL_ACTIVITY_SLOTS,
        gt=0,
        description="Local activity slots of one worker serving workflows: the prepare_run and "
        "finish_run of its runs, which it runs itself (Temporal's default: 100).",
    )
    max_cached_workflows: int = Field(
        1000,
        ge=0,
        description="Runs one worker keeps in memory between their workflow tasks (Temporal's "
        "sticky cache, least recently used first out; its default: 1000). A run waiting for a "
        "person stays cached until newer work pushes it out, so this, not the number of waiting "
        "runs, bounds a worker's memory. Keep it well above the runs active at once: below, "
        "they push each other out mid-turn (each workflow task a replay, a local activity "
        "cancelled with its run's eviction): 200 runs at once with 10 took minutes.",
    )
    # Task queues and roles (`otherone.worker.queues`): every worker of a deployment names the same
    # queues.
    model_task_queue: str | None = Field(
        None,
        description="Task queue of model calls; default: the workflow --task-queue (no split). "
        "Name one to scale model workers apart (--roles model).",
    )
    tool_task_queue: str | None = Field(
        None,
        description="Task queue of tool calls; default: the workflow --task-queue (no split). "
        "Name one to scale tool workers apart (--roles tools).",
    )
    worker_roles: tuple[WorkerRole, ...] = Field(
        ALL_ROLES,
        description="What `otherone worker` serves: a comma list of workflows, model, tools "
        "(or all); model/tools alone need their own model/tool task queue.",
    )
    max_concurrent_model_calls: int | None = Field(
        None,
        gt=0,
        description="Activity slots of the model task queue's worker (when split); default: "
        "max_concurrent_activities.",
    )
    max_concurrent_tool_calls: int | None = Field(
        None,
        gt=0,
        description="Activity slots of the tool task queue's worker (when split); default: "
        "max_concurrent_activities.",
    )
    workflow_sandbox: WorkflowSandbox = Field(
        DEFAULT_WORKFLOW_SANDBOX,
        description="How workflow code runs: off (fastest: Temporal's unsandboxed runner), "
        "passthrough (Temporal's sandbox, our workflow modules imported once) or strict (the "
        "full sandbox: our workflow modules re-imported per run, non-deterministic calls fail "
        "the workflow task; what the tests use). See docs/operations.md.",
    )
    tracing: bool = Field(
        default_factory=_otel_exporter_configured,
        description="OpenTelemetry tracing (exporters from OTEL_* variables); default: on when "
        "OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER names an exporter.",
    )
    trace_temporal_spans: bool = Field(
        True,
        description="With tracing, Temporal's own spans (StartWorkflow, RunActivity, ...) too; "
        "false: only the GenAI spans (invoke_agent, chat, execute_tool) and ours, one trace "
        "per run tree.",
    )
    trace_content: bool = Field(
        default_factory=genai_content_requested,
        description="Put prompts, answers, system instructions and tool arguments and results "
        "on the GenAI spans (redacted like the store, size-bounded); default: as "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT says (true), else off.",
    )
    partition: str | None = Field(
        None,
        description="Partition (tenant) the CLI acts for: runs start in it, and show, tree, "
        "watch, send, cancel and sessions see only its runs (404 for others, as a scoped "
        "AgentClient); unset: starts and sessions use the default partition and the other "
        "commands see every partition.",
    )
    identity: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="Who the CLI's approval decisions are made as (`decided_by`, and what a "
        "request's `approvers` must name); default '<user>@<host>', the same in every "
        "command, so the same decision repeated is recognised as such.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO",
        description="Level of the worker's log lines (stderr, one line each): DEBUG, INFO "
        "(start, shutdown, pruned events), WARNING, ERROR.",
    )
    ui_url: str | None = Field(
        None,
        description="Base URL of the Temporal Web UI that links printed by the CLI point to "
        "(e.g. http://localhost:8080); default: what `otherone dev` wrote in its data dir, "
        "else http://localhost:8233.",
    )
    metrics_port: int | None = Field(
        None, gt=0, lt=65536, description="Serve Temporal worker metrics (Prometheus) on this port."
    )
    metrics_host: str = Field(
        "127.0.0.1", description="Address the Prometheus metrics endpoint binds to."
    )
    event_retention_hours: float = Field(
        168.0,
        ge=0,
        le=24 * 365 * 100,  # finite: it becomes a timedelta (`inf` crashed the worker)
        description="Workers delete the stored events of run trees quiet for longer than this "
        "(hourly; whole trees only). 0 keeps events for ever.",
    )
    reconcile_seconds: float = Field(
        60.0,
        ge=0,
        le=24 * 3600,  # finite: it becomes a timedelta
        description="Every this many seconds a worker closes the store's records of runs that "
        "ended in Temporal without storing their end (terminated, timed out, failed by a bug, "
        "or while the store was down): the end Temporal reports, the session's lease given "
        "back, an end event (docs/operations.md). 0 disables it.",
    )
    shutdown_grace_seconds: float = Field(
        DEFAULT_SHUTDOWN_GRACE_SECONDS,
        ge=0,
        le=24 * 3600,  # finite: it becomes a timedelta (`inf` crashed the worker)
        description="On SIGTERM/Ctrl-C the worker stops polling and lets in-flight activities "
        "finish for up to this many seconds, then cancels them (Temporal retries them on another "
        "worker) and exits 0. Give the container at least this plus ~15 s to stop.",
    )
    health_file: Path | None = Field(
        None,
        description="While the worker runs, rewrite this file every 5 s (removed on shutdown); "
        "the container healthcheck `python -P worker/health.py` checks that it is fresh.",
    )
    encryption_keys: SecretStr | None = Field(
        None,
        description="Encrypt payloads stored by Temporal: 'id:base64key,...' (AES-256, 32 bytes "
        "each); the first key encrypts, every key decrypts (rotation). See "
        "`otherone.worker.codec`.",
    )
    encryption_key_file: Path | None = Field(
        None,
        description="File of encryption keys, one 'id:base64key' a line (after "
        "OTHERONE_ENCRYPTION_KEYS' keys; the first key listed encrypts).",
    )
    codec_server_token: SecretStr | None = Field(
        None,
        description="If set, `otherone codec-server` requires 'Authorization: Bearer <token>'.",
    )
    ui_codec_endpoint: str | None = Field(
        None,
        description="Codec server URL the Web UI of `otherone dev` decodes payloads with "
        "(e.g. http://127.0.0.1:8888 from `otherone codec-server`).",
    )

    serve_host: str | None = Field(
        None,
        description="Address `otherone serve` binds to; default 0.0.0.0 when serve_tokens are "
        "set, else 127.0.0.1. Without tokens the server binds to 127.0.0.1 whatever is asked.",
    )
    serve_port: int = Field(8000, gt=0, lt=65536, description="Port of `otherone serve`.")
    serve_tokens: SecretStr | None = Field(
        None,
        description="Bearer tokens of `otherone serve`, each bound to one partition: "
        "'token:partition,...'. A token sees and touches only its partition's runs, and decides "
        "approvals as its identity ('token:partition=identity', default 'api:<partition>'). "
        "Unset: no authentication, loopback only.",
    )
    serve_cors_origins: tuple[str, ...] = Field(
        (),
        description="Origins of web front ends on other sites allowed to call `otherone serve` "
        "from a browser: a comma list (e.g. https://app.example.com); default none (the page "
        "it serves itself needs none).",
    )
    serve_heartbeat_seconds: float = Field(
        15.0,
        gt=0,
        le=300,
        description="Seconds between SSE heartbeat comments on an idle event stream.",
    )
    serve_show_ui_url: bool | None = Field(
        None,
        description="Hand API clients the Temporal Web UI's address (OTHERONE_UI_URL): `ui_url` "
        "of /v1/info and of started runs, and the page's Web UI links. The Web UI has no login "
        "and shows every partition's runs, so unset it is off for `otherone serve` and on for "
        "`otherone dev --serve` (one local user).",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("workflow_sandbox", mode="before")
    @classmethod
    def _lower_workflow_sandbox(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("serve_cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(origin.strip() for origin in value.split(",") if origin.strip())
        return value

    @field_validator("partition")
    @classmethod
    def _partition(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(PARTITION_PATTERN, value):
            raise ValueError(
                "must be 1-128 letters, digits or _.:@- (starting with a letter or digit)"
            )
        return value

    @field_validator("worker_roles", mode="before")
    @classmethod
    def _roles(cls, value: Any) -> tuple[WorkerRole, ...]:
        return parse_roles(value)

    @model_validator(mode="after")
    def _secrets_redacted(self) -> Settings:
        """Secrets set whole are registered for redaction (`otherone.redaction`); the ones
        set as lists (tokens, encryption keys) by the code that parses them."""
        for secret in (self.temporal_api_key, self.codec_server_token):
            remember(secret.get_secret_value() if secret is not None else None)
        return self

    @model_validator(mode="after")
    def _deployment_pair(self) -> Settings:
        if (self.deployment_name is None) != (self.build_id is None):
            raise ValueError(
                "OTHERONE_DEPLOYMENT_NAME and OTHERONE_BUILD_ID must be set together (a "
                "versioned worker names its deployment and its build)"
            )
        return self

    def worker_deployment(self) -> WorkerDeployment | None:
        """This worker's deployment version, when versioned."""
        if self.deployment_name is None or self.build_id is None:
            return None
        return WorkerDeployment(self.deployment_name, self.build_id)

    @model_validator(mode="after")
    def _client_certificate_pair(self) -> Settings:
        if (self.temporal_tls_cert_file is None) != (self.temporal_tls_key_file is None):
            raise ValueError(
                "OTHERONE_TEMPORAL_TLS_CERT_FILE and OTHERONE_TEMPORAL_TLS_KEY_FILE must be set "
                "together (mutual TLS needs the certificate and its key)"
            )
        return self

    def ui_base_url(self) -> str:
        """Base URL of the Web UI that links point to (the CLI's and the API's alike):
        ``OTHERONE_UI_URL`` (compose sets it; `otherone dev` leaves it in its data dir), else
        the dev server's UI port on the Temporal host."""
        if self.ui_url:
            return self.ui_url.rstrip("/")
        host = self.temporal_address.rpartition(":")[0] or "127.0.0.1"
        if host in ("0.0.0.0", "[::]", "::"):
            host = "127.0.0.1"
        return f"http://{host}:{self.ui_port}"

    def store_url(self) -> str:
        from otherone.store import default_database_url

        return self.database_url or default_database_url(self.data_dir)
