"""Log lines of our long-running processes (`otherone worker`, `otherone dev`).

One line per record on stderr, with time, level and logger, at ``OTHERONE_LOG_LEVEL`` (INFO by
default, so operators see start, shutdown and retention pruning). A container's log driver or
systemd adds nothing it needs to parse.
"""

from __future__ import annotations

import logging

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Libraries whose INFO lines are internals (Alembic's plugin set-up and migration context at
#: every start): only their warnings are shown.
QUIET_LIBRARIES = ("alembic",)


class _StderrLines(logging.StreamHandler):  # type: ignore[type-arg]
    """Our handler, recognisable so that configuring twice adds no second one."""


def configure_logging(level: str = "INFO") -> None:
    """Send our and the SDK's records at ``level`` and above to stderr, once per process."""
    root = logging.getLogger()
    if not any(isinstance(handler, _StderrLines) for handler in root.handlers):
        handler = _StderrLines()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
