"""`otherone serve`: the HTTP API (runs, results, trees, messages, cancellation, sessions, live
Server-Sent Events, AG-UI) and the page at ``/``. See the README's "HTTP API" section."""

from otherone.api.app import ApiContext, ApiToken, create_app, openapi_schema
from otherone.api.server import ApiServer, serve

__all__ = ["ApiContext", "ApiServer", "ApiToken", "create_app", "openapi_schema", "serve"]
