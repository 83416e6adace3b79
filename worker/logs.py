"""Log lines of our long-running processes (`otherone worker`, `otherone dev`).

One line per record on stderr, with time, level and logger, at ``OTHERONE_LOG_LEVEL`` (INFO by
default, so operators see start, shutdown and retention pruning); expected failures (a retried
429, a cancelled activity) on one line too, unexpected ones with their traceback. A container's
log driver or systemd adds nothing it needs to parse.
"""

from __future__ import annotations

import asyncio
import logging

import temporalio.exceptions

from otherone.errors import FailureCode
from otherone.redaction import install_log_redaction, redact, redact_urls

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Libraries whose INFO lines are internals (Alembic's plugin set-up and migration context at
#: every start) or repeat what our own lines say with more than they should (the HTTP clients'
#: request lines: a URL's query string or user info may hold a credential): only their
#: warnings are shown, at any level.
QUIET_LIBRARIES = ("alembic", "httpx", "httpx2", "httpcore", "httpcore2")


class _StderrLines(logging.StreamHandler):  # type: ignore[type-arg]
    """Our handler, recognisable so that configuring twice adds no second one."""


class ExpectedFailuresOnOneLine(logging.Filter):
    """Failures we raise on purpose (`ApplicationError` with one of our failure codes: a retried
    429, a busy session, a spent budget) and cancellations are logged as one line, not as a
    chained traceback; anything else keeps its traceback, since that is where a bug shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and _expected(error):
            record.msg = redact(redact_urls(f"{record.getMessage()}: {_summary(error)}"))
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


def _expected(error: BaseException) -> bool:
    if isinstance(error, asyncio.CancelledError | temporalio.exceptions.CancelledError):
        return True
    return isinstance(error, temporalio.exceptions.ApplicationError) and error.type in _OUR_CODES


def _summary(error: BaseException) -> str:
    kind = getattr(error, "type", None) or type(error).__name__
    text = str(error).strip().splitlines()
    if not text:
        return kind
    # An ApplicationError's text may start with its type already ("model_error: model 'gpt'").
    return text[0] if text[0].startswith(f"{kind}: ") else f"{kind}: {text[0]}"


_OUR_CODES = frozenset(code.value for code in FailureCode)


#: The SDK's loggers that report a failed activity with its traceback (WARNING "Completing
#: activity as failed", and activities that fail while the worker shuts down).
SDK_ACTIVITY_LOGGERS = ("temporalio.activity", "temporalio.worker._activity")


def expected_failures_on_one_line() -> None:
    """Put `ExpectedFailuresOnOneLine` on the SDK's activity loggers themselves, once.

    A filter of our handler (`configure_logging`) reaches only `otherone worker` and `dev`;
    a process with an embedded worker that configured no logging (a script calling
    `build_worker`, `otherone demo`) printed every expected failure, e.g. a missing API key,
    as a 41-line chained traceback through Python's last-resort handler. A logger's own
    filter applies whatever the handler: the application's, pytest's or that last resort.
    """
    for name in SDK_ACTIVITY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(kept, ExpectedFailuresOnOneLine) for kept in logger.filters):
            logger.addFilter(ExpectedFailuresOnOneLine())


def configure_logging(level: str = "INFO") -> None:
    """Send our and the SDK's records at ``level`` and above to stderr, once per process,
    redacted of every secret the process resolved (`otherone.redaction`)."""
    install_log_redaction()
    root = logging.getLogger()
    if not any(isinstance(handler, _StderrLines) for handler in root.handlers):
        handler = _StderrLines()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler.addFilter(ExpectedFailuresOnOneLine())
        root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
