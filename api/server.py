"""Running the API: tokens and bind address from `Settings`, uvicorn, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

import uvicorn
from pydantic import SecretStr

from otherone.api.app import ApiContext, ApiToken, close_streams, create_app
from otherone.config import RuntimeConfig
from otherone.errors import ConfigurationError
from otherone.redaction import remember
from otherone.runs import PARTITION_PATTERN
from otherone.store import Store
from otherone.worker.settings import Settings

__all__ = ["ApiServer", "bind_host", "check_can_listen", "parse_tokens", "serve", "shown_ui_url"]

LOOPBACK = "127.0.0.1"
#: Seconds uvicorn gives open requests after SIGTERM (streams end at once: `close_streams`).
GRACEFUL_SHUTDOWN_SECONDS = 5
_TOKEN_SETTING = "OTHERONE_SERVE_TOKENS"
#: The longest decider identity (`ApprovalDecision.identity`'s limit).
MAX_IDENTITY_LENGTH = 256


def parse_tokens(value: SecretStr | str | None) -> dict[str, ApiToken]:
    """``'token:partition[=identity],...'`` -> {token: ApiToken} (a token has no ':', a
    partition may; the identity, who the token's approval decisions are made as, defaults to
    ``api:<partition>``); a bad entry names the setting."""
    text = value.get_secret_value() if isinstance(value, SecretStr) else (value or "")
    tokens: dict[str, ApiToken] = {}
    if text.strip(" ,") == "" and text:
        # Set, but to nothing ("", " " or ",,,"): a mistake, not a wish to serve without
        # authentication (that is the setting left out).
        raise ConfigurationError(
            "holds no token: leave it unset to serve without authentication (127.0.0.1 only)",
            field=_TOKEN_SETTING,
        )
    for index, entry in enumerate(part.strip() for part in text.split(",")):
        if not entry:
            continue
        token, separator, grant = entry.partition(":")  # a partition may hold colons
        partition, has_identity, identity = grant.partition("=")  # a partition has no '='
        if not separator or not token or not re.fullmatch(PARTITION_PATTERN, partition):
            raise ConfigurationError(
                f"entry {index + 1} must be 'token:partition' or 'token:partition=identity' "
                "with a valid partition",
                field=_TOKEN_SETTING,
            )
        if len(token) < 16:
            raise ConfigurationError(
                f"entry {index + 1}: tokens must be at least 16 characters", field=_TOKEN_SETTING
            )
        if has_identity and not 0 < len(identity.strip()) <= MAX_IDENTITY_LENGTH:
            raise ConfigurationError(
                f"entry {index + 1}: an identity after '=' must be 1-{MAX_IDENTITY_LENGTH} "
                "characters",
                field=_TOKEN_SETTING,
            )
        if token in tokens:  # the last grant winning would hand a tenant's runs to another
            raise ConfigurationError(
                f"entry {index + 1}: the token is given twice (a token grants one partition)",
                field=_TOKEN_SETTING,
            )
        remember(token)
        tokens[token] = ApiToken(partition, identity.strip() if has_identity else None)
    return tokens


def bind_host(settings: Settings, tokens: Mapping[str, object]) -> tuple[str, str | None]:
    """The address to bind and, when it differs from what was asked, why."""
    if tokens:
        return settings.serve_host or "0.0.0.0", None
    note = "no OTHERONE_SERVE_TOKENS: serving without authentication, on 127.0.0.1 only" + (
        f" (not {settings.serve_host})" if settings.serve_host not in (None, LOOPBACK) else ""
    )
    return LOOPBACK, note


def check_can_listen(host: str, port: int) -> None:
    """A clear error now when ``host:port`` cannot be listened on (a port in use), instead of
    uvicorn's after connecting to Temporal and the store. (Bound the way uvicorn binds, with
    SO_REUSEADDR, so a port left in TIME_WAIT by a server just stopped is not refused.)"""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise ConfigurationError(
                f"cannot listen on {host}:{port}: {error.strerror or error}",
                field="OTHERONE_SERVE_PORT",
            ) from None


def shown_ui_url(settings: Settings, ui_url: str | None, *, default: bool) -> str | None:
    """The Web UI address API clients are handed (`ApiContext.ui_url`): ``ui_url`` when
    OTHERONE_SERVE_SHOW_UI_URL says so (unset: ``default``, the command's), else None.

    Opt-in because the Web UI has no login and shows every partition: handed to the tenants of
    a server with tokens, it would show each of them the others' runs (if they can reach it)."""
    show = default if settings.serve_show_ui_url is None else settings.serve_show_ui_url
    return ui_url if show else None


def ui_note(ui_url: str | None, tokens: Mapping[str, object]) -> str | None:
    """What an operator handing the Web UI address to tenants should know, or None."""
    if ui_url is None or not tokens:
        return None
    return (
        f"OTHERONE_SERVE_SHOW_UI_URL: every token's holder is told the Web UI's address "
        f"({ui_url}), which has no login and shows every partition's runs"
    )


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: whoever runs the server owns the signals (the
    CLI's context, `serve`'s handlers, a test) and calls `ApiServer.stop`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ApiServer:
    """The API served by uvicorn in this event loop: ``async with ApiServer(...) as server``."""

    def __init__(
        self, context: ApiContext, *, host: str = LOOPBACK, port: int = 0, log_level: str = "info"
    ) -> None:
        self.app = create_app(context)
        config = uvicorn.Config(
            self.app,
            host=host,
            port=port,
            log_level=log_level.lower(),
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
            access_log=False,
        )
        self.server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the listening socket (the real port when 0 was asked)."""
        [listener] = [s for server in self.server.servers for s in server.sockets][:1]
        host, port = listener.getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self.server.serve(), name="otherone-api")
        while not self.server.started:
            if self._task.done():
                # uvicorn's way to say it could not bind is SystemExit (its reason logged).
                with contextlib.suppress(SystemExit):
                    await self._task  # raises what else stopped it
                config = self.server.config
                raise ConfigurationError(
                    f"cannot listen on {config.host}:{config.port} (in use, or not an "
                    "address of this machine)",
                    field="OTHERONE_SERVE_PORT",
                )
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Graceful: end the event streams (clients resume elsewhere with Last-Event-ID), let
        other requests finish for up to `GRACEFUL_SHUTDOWN_SECONDS`, close."""
        close_streams(self.app)
        self.server.should_exit = True
        if self._task is not None:
            await self._task

    async def wait(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set (then stop gracefully) or the server fails."""
        assert self._task is not None, "use `async with ApiServer(...)`"
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({stopping, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if self._task.done():
            await self._task  # it failed: raise why


def _configured(settings: Settings) -> RuntimeConfig:
    """The workers' configuration, whose agents the page offers: OTHERONE_CONFIG's (the example
    one when the default file is absent, as `otherone dev` does)."""
    from otherone.examples import EXAMPLE_CONFIG
    from otherone.toml_config import load_config

    path: Path = settings.config
    if not path.is_file() and "config" not in settings.model_fields_set:
        path = EXAMPLE_CONFIG
    return load_config(path)


async def serve(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    log: Callable[[str], None] | None = None,
) -> None:
    """`otherone serve`: connect, open the store, serve until ``stop`` is set (default: until
    SIGINT/SIGTERM), then end the streams and close."""
    from otherone.worker.codec import codec_from_settings
    from otherone.worker.connection import connect, temporal_connection

    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    tokens = parse_tokens(settings.serve_tokens)
    host, note = bind_host(settings, tokens)
    check_can_listen(host, settings.serve_port)  # before connecting to anything
    ui_url = shown_ui_url(settings, settings.ui_base_url(), default=False)
    for line in (note, ui_note(ui_url, tokens)):
        if line:
            say(f"note: {line}")
    config = await asyncio.to_thread(_configured, settings)
    connection = temporal_connection(settings)
    temporal = await connect(
        settings.temporal_address,
        settings.namespace,
        payload_codec=codec_from_settings(settings),
        tls=connection.tls,
        api_key=connection.api_key,
    )
    store = await asyncio.to_thread(Store.open, settings.store_url())
    context = ApiContext(
        temporal=temporal,
        store=store,
        task_queue=settings.task_queue,
        namespace=settings.namespace,
        tokens=tokens,
        agents=list(config.agents.values()),
        config=config,
        ui_url=ui_url,
        heartbeat_seconds=settings.serve_heartbeat_seconds,
        cors_origins=settings.serve_cors_origins,
    )
    try:
        async with ApiServer(
            context, host=host, port=settings.serve_port, log_level=settings.log_level
        ) as server:
            say(
                f"serving the API and the page on {server.url} (schema /openapi.json; "
                f"{len(tokens)} token(s)); Ctrl-C to stop"
            )
            await server.wait(stop or _signalled())
    finally:
        store.close()


def _signalled() -> asyncio.Event:
    """An event set by SIGINT/SIGTERM (for ``python -m otherone.api``)."""
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, event.set)
    return event
