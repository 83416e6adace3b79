"""Headers every answer of the HTTP API carries: never framed, never content-sniffed.

The page (``/``, and the same files under ``/assets``) decides approvals: framed by another
site, a click on it could be stolen (clickjacking). Setting the headers on every answer, not on
chosen routes, leaves no route that forgets them (``/assets/index.html`` did): on JSON answers
they are harmless. ``nosniff`` keeps a browser from running an answer as a script or a page
that was not served as one.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Added to every HTTP answer unless the endpoint set the header itself.
SECURITY_HEADERS: dict[str, str] = {
    "X-Frame-Options": "DENY",  # older browsers; CSP's frame-ancestors is the standard one
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


class SecurityHeaders:
    """Plain ASGI (event streams pass untouched: only their first message is changed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers.append(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
