"""The worker's part of the redaction layer (`otherone.redaction`).

* `RedactingActivityInterceptor` scrubs an activity's error (and the errors chained to it) of
  every secret the process resolved *before* anything outside the activity formats it: the
  span interceptors that record exceptions, the SDK's failure log line, the failure converter.
  It is the innermost interceptor, so every other one sees the redacted error.
* `remember_configured_secrets` registers, when a worker is built, every secret its
  configuration references and the process can already read (provider keys, MCP server
  ``${VAR}`` references and ``headers_env`` values, the secrets file's entries), so even a
  text produced before the first model call or MCP session is redacted.
"""

from __future__ import annotations

import contextlib
from typing import Any

from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from otherone.activities.mcp_transports import resolved_settings, worker_variables
from otherone.activities.providers.base import ProviderError
from otherone.activities.providers.secrets import read_secrets_file, resolve_api_key
from otherone.config import RuntimeConfig
from otherone.redaction import install_log_redaction, remember, scrub_exception

__all__ = ["RedactingActivityInterceptor", "remember_configured_secrets"]


class RedactingActivityInterceptor(Interceptor):
    """Worker interceptor: activity errors leave the activity redacted."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _RedactedErrors(next)


class _RedactedErrors(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await super().execute_activity(input)
        except BaseException as error:
            scrub_exception(error)  # the same error, its texts redacted in place
            raise


def remember_configured_secrets(config: RuntimeConfig) -> None:
    """Register the secrets ``config`` references that this process can read now (a missing
    one is not an error here: the call that needs it reports it)."""
    install_log_redaction()
    with contextlib.suppress(ProviderError):
        for entry in read_secrets_file().values():
            remember(entry)
    for profile in config.models.values():
        with contextlib.suppress(ProviderError):
            key = resolve_api_key(profile)
            remember(key.value if key is not None else None)
    for server in config.mcp_servers.values():
        # As a session start would: the same resolution registers the same values.
        with contextlib.suppress(ProviderError):
            resolved_settings(server, worker_variables(), strict=False)
