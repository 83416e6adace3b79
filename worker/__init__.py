"""Process wiring: worker construction, settings, and the embedded Temporal dev server."""

from otherone.worker.app import build_worker, connect, sandbox_runner
from otherone.worker.devserver import DevServer, DevServerError
from otherone.worker.settings import Settings

__all__ = ["DevServer", "DevServerError", "Settings", "build_worker", "connect", "sandbox_runner"]
