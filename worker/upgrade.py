"""Before deploying changed workflow code: replay the runs in flight on it (docs/upgrading.md).

    python -m otherone.worker.upgrade [--query QUERY]

Run it from the *new* code against the deployment's Temporal (the usual ``OTHERONE_*``
settings: address, namespace, encryption keys). It lists the running `AgentRunWorkflow`
executions (or those ``QUERY`` selects), replays each history on this code's workflow, prints one
line per run that would fail, and exits 0 when every run replays, 1 otherwise (2: bad settings,
4: Temporal unreachable). A failure means the change needs a ``workflow.patched`` guard.
``--verbose`` adds each failure's full text and the SDK's workflow-task warnings (tracebacks),
which are otherwise kept out of the one-line-per-run output.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

from temporalio.client import Client
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.worker import Replayer

from otherone.contracts import WORKFLOW_NAME
from otherone.worker.app import sandbox_runner
from otherone.workflows import AgentRunWorkflow

CONNECT_TIMEOUT_SECONDS = 15.0
#: The runs a deploy meets: every agent run still running.
RUNNING_RUNS = f'WorkflowType="{WORKFLOW_NAME}" AND ExecutionStatus="Running"'


#: Longest reason printed for a run without ``--verbose``.
REASON_CHARS = 240


@dataclass(frozen=True)
class ReplayCheck:
    """How many histories were replayed, and why those that failed did (by workflow id):
    ``failures`` holds one line per run, ``details`` the whole failure text."""

    checked: int
    failures: dict[str, str] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


async def replay_check(
    client: Client,
    *,
    workflows: Sequence[type] = (AgentRunWorkflow,),
    query: str = RUNNING_RUNS,
) -> ReplayCheck:
    """Replay the histories of the runs ``query`` lists on ``workflows`` (this code's)."""
    replayer = Replayer(
        workflows=list(workflows),
        data_converter=client.data_converter,
        workflow_runner=sandbox_runner(),
    )
    checked = 0
    failures: dict[str, str] = {}
    details: dict[str, str] = {}
    histories = client.list_workflows(query).map_histories()
    async with replayer.workflow_replay_iterator(histories) as results:
        async for result in results:
            checked += 1
            if result.replay_failure is not None:
                workflow_id = result.history.workflow_id
                failures[workflow_id] = _one_line(result.replay_failure)
                details[workflow_id] = f"{type(result.replay_failure).__name__}: "
                details[workflow_id] += str(result.replay_failure)
    return ReplayCheck(checked=checked, failures=failures, details=details)


def _one_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


async def _main(
    query: str, *, verbose: bool = False, workflows: Sequence[type] = (AgentRunWorkflow,)
) -> int:
    from pydantic import ValidationError

    from otherone.errors import ConfigurationError, UnavailableError
    from otherone.worker.codec import codec_from_settings
    from otherone.worker.connection import connect, temporal_connection
    from otherone.worker.settings import Settings

    try:
        settings = Settings()
        codec = codec_from_settings(settings)
        connection = temporal_connection(settings)
    except (ValidationError, ConfigurationError) as error:
        print(f"error: settings: {error}".splitlines()[0], file=sys.stderr)
        return 2
    try:
        client = await asyncio.wait_for(
            connect(
                settings.temporal_address,
                settings.namespace,
                payload_codec=codec,
                tls=connection.tls,
                api_key=connection.api_key,
            ),
            CONNECT_TIMEOUT_SECONDS,
        )
    except (UnavailableError, TimeoutError) as error:
        reason = str(error) or f"no answer from Temporal at {settings.temporal_address} in time"
        print(f"error: {reason}", file=sys.stderr)
        return 4
    check = await replay_check(client, query=query, workflows=workflows)
    for workflow_id, reason in sorted(check.failures.items()):
        print(f"would fail: {workflow_id}: {reason}")
        if verbose:
            print(textwrap.indent(check.details[workflow_id], "    "))
    verdict = "all replay" if check.ok else f"{len(check.failures)} would fail"
    print(f"{check.checked} run(s) checked: {verdict}")
    return 0 if check.ok else 1


def _quiet_replay_warnings() -> None:
    """Keep the SDK's warnings about failed workflow tasks (the Rust core's and Python's, each
    with the whole failure) out of the output: they repeat what the one line per run says."""
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet))))


def main(
    argv: Sequence[str] | None = None, *, workflows: Sequence[type] = (AgentRunWorkflow,)
) -> int:
    """The command line; ``workflows`` replaces the code replayed on (tests, custom workers)."""
    parser = argparse.ArgumentParser(
        prog="python -m otherone.worker.upgrade",
        description="Replay the running agent runs on this code's workflow (pre-deploy check).",
    )
    parser.add_argument(
        "--query", default=RUNNING_RUNS, help=f"visibility query (default: {RUNNING_RUNS})"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print each failure in full, and the SDK's workflow-task warnings",
    )
    args = parser.parse_args(argv)
    if not args.verbose:
        _quiet_replay_warnings()
    return asyncio.run(_main(args.query, verbose=args.verbose, workflows=workflows))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # a process that used a Client can abort at exit (sdk-python#300)
