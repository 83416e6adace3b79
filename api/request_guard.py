"""Requests a browser was tricked into sending: refused before any endpoint runs.

Without tokens the API listens on loopback only, and anything that reaches it is trusted; two
ways a web page on another site still could:

- **DNS rebinding**: the page's own host name made to resolve to 127.0.0.1, so the browser
  treats the API as same-origin and reads every answer. Its requests carry that foreign name
  in ``Host``: without tokens, only loopback names are served (421 otherwise).
- **Cross-site requests**: a form or a ``no-cors`` fetch can POST without reading the answer
  (the cancel endpoint takes no body, so no preflight stops it). Browsers name the sending page
  in ``Origin``: a POST from an origin that is neither the API's own nor a configured CORS
  origin is refused (403). Programs send no ``Origin``.

With tokens neither check applies: a browser never sends a bearer token on its own, and the
token, not the host name, decides.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from otherone.api.problems import problem

#: Host names that are this machine whatever DNS says.
_LOOPBACK_NAMES = frozenset({"localhost"})


class RequestGuard:
    """Plain ASGI (event streams pass untouched): the two checks above, without tokens."""

    def __init__(
        self, app: ASGIApp, *, authenticated: bool, cors_origins: Sequence[str] = ()
    ) -> None:
        self.app = app
        self.authenticated = authenticated
        self.cors_origins = frozenset(origin.rstrip("/") for origin in cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        if not self.authenticated and not is_loopback_host(host):
            refused = problem(
                421,
                "misdirected_request",
                f"this server answers to loopback host names only (Host: {host[:100]!r}); "
                "serving other hosts needs tokens (OTHERONE_SERVE_TOKENS)",
            )
            await refused(scope, receive, send)
            return
        origin = headers.get(b"origin")
        if (
            not self.authenticated
            and scope["method"] not in ("GET", "HEAD", "OPTIONS")
            and origin is not None
            and not self._allowed(origin.decode("latin-1"), host)
        ):
            refused = problem(
                403,
                "cross_site_request",
                "a request sent by a page of another site is refused (its Origin is neither "
                "this server nor a configured CORS origin)",
            )
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed(self, origin: str, host: str) -> bool:
        if origin.rstrip("/") in self.cors_origins:
            return True
        parts = urllib.parse.urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def is_loopback_host(host: str) -> bool:
    """Whether a ``Host`` header names this machine: ``localhost``, 127.0.0.0/8 or ``[::1]``
    (with any port)."""
    try:
        name = urllib.parse.urlsplit(f"//{host}").hostname or ""
    except ValueError:
        return False
    if name.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
