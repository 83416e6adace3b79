"""Process wiring: worker construction, settings, and the embedded Temporal dev server.

Names are imported on first use, so that importing one light submodule (e.g.
`otherone.worker.settings` for the CLI's help) does not load Temporal's worker and every
activity.
"""

from typing import TYPE_CHECKING

from otherone.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from otherone.worker.app import build_worker, sandbox_runner
    from otherone.worker.connection import connect
    from otherone.worker.devserver import DevServer, DevServerError
    from otherone.worker.settings import Settings

#: Names served lazily by `__getattr__`: name → module that defines it.
_LAZY_EXPORTS = {
    "build_worker": "otherone.worker.app",
    "connect": "otherone.worker.connection",
    "sandbox_runner": "otherone.worker.app",
    "DevServer": "otherone.worker.devserver",
    "DevServerError": "otherone.worker.devserver",
    "Settings": "otherone.worker.settings",
}

__getattr__ = lazy_exports(__name__, _LAZY_EXPORTS)


__all__ = ["DevServer", "DevServerError", "Settings", "build_worker", "connect", "sandbox_runner"]
