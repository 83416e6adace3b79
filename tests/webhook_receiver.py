"""A real HTTP server on 127.0.0.1 that receives completion webhooks (tests only): it answers
each POST with the next scripted status (the last one repeats) and keeps what it received."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """What the server answers and what it got."""

    statuses: Sequence[int] = (200,)
    #: Set: the first POST waits until it is set (a receiver that holds the delivery).
    hold: threading.Event | None = None
    received: list[Received] = field(default_factory=list)
    url: str = ""
    answer_text: str = "ok"

    def next_status(self) -> int:
        index = min(len(self.received) - 1, len(self.statuses) - 1)
        return self.statuses[index]


@contextmanager
def receiving(receiver: Receiver) -> Iterator[Receiver]:
    """Serve ``receiver`` on a free port of 127.0.0.1 until the block ends."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            receiver.received.append(Received(self.path, dict(self.headers.items()), body))
            first = len(receiver.received) == 1
            if first and receiver.hold is not None:
                receiver.hold.wait(timeout=60)
            status = receiver.next_status()
            text = receiver.answer_text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        if receiver.hold is not None:
            receiver.hold.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
