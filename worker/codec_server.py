"""A Temporal codec server: lets the Web UI and the ``temporal`` CLI show encrypted payloads.

Temporal's codec server protocol (what the Web UI's "codec endpoint" and
``temporal --codec-endpoint URL`` speak)::

    POST {endpoint}/decode   and   POST {endpoint}/encode
    Content-Type: application/json, X-Namespace: <namespace>, optional Authorization
    body and answer: {"payloads": [{"metadata": {"encoding": "<base64>"}, "data": "<base64>"}]}

Payloads are in proto3 JSON form (bytes as base64). ``{endpoint}`` may end in a namespace
segment (``/default/decode``: the CLI's ``{namespace}`` templating). The browser calls the
server cross-origin, so it answers the CORS preflight (``OPTIONS``) for the Web UI's origin(s).

Access: by default the server binds to 127.0.0.1 with no authentication: anyone who can open a
connection on this machine can decrypt payloads. Set a token (``OTHERONE_CODEC_SERVER_TOKEN``)
to require ``Authorization: Bearer <token>`` (the CLI sends it with ``--codec-auth``); keep it on
the loopback interface or put it behind an authenticating proxy before exposing it.

The stdlib ``http.server`` (one thread per request) is enough for one operator's UI and keeps
the runtime free of a web framework.
"""

from __future__ import annotations

import hmac
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Final, Self
from urllib.parse import urlsplit

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from otherone.worker.codec import EncryptionCodec, PayloadDecryptionError
from otherone.worker.settings import CODEC_SERVER_PORT

__all__ = ["DEFAULT_PORT", "MAX_BODY_BYTES", "CodecServer", "default_cors_origins"]

DEFAULT_PORT: Final = CODEC_SERVER_PORT
#: Temporal refuses payloads over 2 MB; a request carries at most a few (one event's).
MAX_BODY_BYTES: Final = 32 * 1024 * 1024
_ALLOWED_HEADERS: Final = "content-type, x-namespace, authorization"

Operation = Callable[[Iterable[Payload]], list[Payload]]


def default_cors_origins(ui_url: str) -> list[str]:
    """The origins of the Web UI at ``ui_url`` (`Settings.ui_base_url`: an `otherone dev`'s, as
    its ``dev.env`` says, or ``OTHERONE_UI_URL``); a local one under both of its names."""
    parts = urlsplit(ui_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    if parts.hostname not in ("127.0.0.1", "localhost"):
        return [origin]
    port = f":{parts.port}" if parts.port else ""
    return [f"{parts.scheme}://127.0.0.1{port}", f"{parts.scheme}://localhost{port}"]


class _HttpError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], app: CodecServer) -> None:
        self.app = app
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "otherone-codec-server"

    def do_OPTIONS(self) -> None:
        """CORS preflight: allowed for a known route and an allowed origin."""
        try:
            self._operation()
            if not self._origin_allowed():
                raise _HttpError(HTTPStatus.FORBIDDEN, "origin not allowed")
        except _HttpError as error:
            self._send_error(error)
            return
        self.send_response(HTTPStatus.NO_CONTENT)
        self._cors_headers()
        self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", _ALLOWED_HEADERS)
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        try:
            operation = self._operation()
            # A browser page of another origin must not use us as a decryption oracle (its
            # request carries its Origin; the CLI and curl send none).
            if self.headers.get("Origin") is not None and not self._origin_allowed():
                raise _HttpError(HTTPStatus.FORBIDDEN, "origin not allowed")
            self._authorize()
            payloads = self._read_payloads()
            try:
                answer = operation(payloads)
            except PayloadDecryptionError as error:
                raise _HttpError(HTTPStatus.BAD_REQUEST, error.message) from None
        except _HttpError as error:
            self._send_error(error)
            return
        body = json.dumps(json_format.MessageToDict(Payloads(payloads=answer))).encode()
        self._send(HTTPStatus.OK, body)

    def do_GET(self) -> None:
        self._reject_method()

    def do_PUT(self) -> None:
        self._reject_method()

    def do_DELETE(self) -> None:
        self._reject_method()

    # ------------------------------------------------------------------- request parts

    def _operation(self) -> Operation:
        """``/encode`` or ``/decode``, optionally under one namespace segment."""
        segments = [part for part in urlsplit(self.path).path.split("/") if part]
        codec = self.server.app.codec
        operations: dict[str, Operation] = {"encode": codec.encrypt, "decode": codec.decrypt}
        if 1 <= len(segments) <= 2 and segments[-1] in operations:
            return operations[segments[-1]]
        raise _HttpError(HTTPStatus.NOT_FOUND, f"no such endpoint {self.path!r}")

    def _authorize(self) -> None:
        token = self.server.app.token
        if token is None:
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise _HttpError(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")

    def _read_payloads(self) -> Sequence[Payload]:
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise _HttpError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "Content-Type must be JSON")
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "Content-Length required") from None
        if length < 0 or length > self.server.app.max_body_bytes:
            limit = self.server.app.max_body_bytes
            raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {limit} bytes")
        body = self.rfile.read(length)
        try:
            return json_format.Parse(body, Payloads()).payloads
        except (json_format.ParseError, UnicodeDecodeError) as error:
            raise _HttpError(
                HTTPStatus.BAD_REQUEST, f'body is not {{"payloads": [...]}}: {error}'
            ) from None

    # ------------------------------------------------------------------- answers

    def _origin_allowed(self) -> bool:
        origin = self.headers.get("Origin")
        return origin is None or origin in self.server.app.cors_origins

    def _cors_headers(self) -> None:
        origin = self.headers.get("Origin")
        if origin is not None and origin in self.server.app.cors_origins:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")

    def _reject_method(self) -> None:
        self._send_error(_HttpError(HTTPStatus.METHOD_NOT_ALLOWED, "use POST"))

    def _send_error(self, error: _HttpError) -> None:
        self._send(error.status, json.dumps({"error": error.message}).encode())

    def _send(self, status: HTTPStatus, body: bytes) -> None:
        self.send_response(status)
        self._cors_headers()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log = self.server.app.log
        if log is not None:
            namespace = self.headers.get("X-Namespace") if self.headers else None
            suffix = f" (namespace {namespace})" if namespace else ""
            log(f"{self.address_string()} {format % args}{suffix}")


class CodecServer:
    """The codec server on ``host:port`` (port 0: a free one), served from a thread.

    ``with CodecServer(codec) as server: ... server.url`` — or `start` / `stop`.
    """

    def __init__(
        self,
        codec: EncryptionCodec,
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        cors_origins: Iterable[str] = (),
        token: str | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.codec = codec
        self.host = host
        self.port = port
        self.cors_origins = frozenset(origin.rstrip("/") for origin in cors_origins)
        self.token = token or None
        self.max_body_bytes = max_body_bytes
        self.log = log
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Bind (``OSError`` when the port is taken) and serve in a daemon thread."""
        self._server = _Server((self.host, self.port), self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="codec-server", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
