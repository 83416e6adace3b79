"""Process wiring: worker construction, settings, and the embedded Temporal dev server."""

from worker.app import build_worker, connect, sandbox_runner
from worker.devserver import DevServer, DevServerError
from worker.settings import Settings

__all__ = ["DevServer", "DevServerError", "Settings", "build_worker", "connect", "sandbox_runner"]
