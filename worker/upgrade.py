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
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from temporalio.api.enums.v1 import VersioningBehavior
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.worker import Replayer

from otherone.worker.app import sandbox_runner
from otherone.worker.upgrade_options import RUNNING_RUNS, add_check_options
from otherone.workflows import AgentRunWorkflow

if TYPE_CHECKING:
    from otherone.worker.settings import Settings

CONNECT_TIMEOUT_SECONDS = 15.0


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
    include_pinned: bool = False,
) -> ReplayCheck:
    """Replay the histories of the runs ``query`` lists on ``workflows`` (this code's).

    Runs pinned to a build (Worker Versioning: `otherone.worker.versioning`) never move to
    another build's code, so they are left out unless ``include_pinned`` (e.g. before moving
    them with ``temporal workflow update-options``); unversioned runs move to the first version
    made current, and are checked."""
    replayer = Replayer(
        workflows=list(workflows),
        data_converter=client.data_converter,
        workflow_runner=sandbox_runner(),
    )
    checked = 0
    failures: dict[str, str] = {}
    details: dict[str, str] = {}
    histories = _histories(client, query, include_pinned)
    async with replayer.workflow_replay_iterator(histories) as results:
        async for result in results:
            checked += 1
            if result.replay_failure is not None:
                workflow_id = result.history.workflow_id
                failures[workflow_id] = _one_line(result.replay_failure)
                details[workflow_id] = f"{type(result.replay_failure).__name__}: "
                details[workflow_id] += str(result.replay_failure)
    return ReplayCheck(checked=checked, failures=failures, details=details)


async def _histories(
    client: Client, query: str, include_pinned: bool
) -> AsyncIterator[WorkflowHistory]:
    async for execution in client.list_workflows(query):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        if not include_pinned and await _pinned(handle):
            continue
        yield await handle.fetch_history()


async def _pinned(handle: WorkflowHandle[Any, Any]) -> bool:
    """Asked of the run itself: a listing's versioning info can lag or be left out."""
    described = await handle.describe()
    versioning = described.raw_description.workflow_execution_info.versioning_info
    return versioning.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_PINNED


def _one_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


async def check_main(
    query: str,
    *,
    verbose: bool = False,
    include_pinned: bool = False,
    workflows: Sequence[type] = (AgentRunWorkflow,),
    settings: Settings | None = None,
) -> int:
    """The check against the Temporal of ``settings`` (default: the environment's); the exit
    code (0 all replay, 1 some would fail, 2 bad settings, 4 Temporal unreachable)."""
    from pydantic import ValidationError

    from otherone.errors import ConfigurationError, UnavailableError
    from otherone.worker.codec import codec_from_settings
    from otherone.worker.connection import connect, temporal_connection
    from otherone.worker.settings import Settings

    try:
        settings = settings or Settings()
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
    check = await replay_check(
        client, query=query, workflows=workflows, include_pinned=include_pinned
    )
    for workflow_id, reason in sorted(check.failures.items()):
        print(f"would fail: {workflow_id}: {reason}")
        if verbose:
            print(textwrap.indent(check.details[workflow_id], "    "))
    verdict = "all replay" if check.ok else f"{len(check.failures)} would fail"
    print(f"{check.checked} run(s) checked: {verdict}")
    return 0 if check.ok else 1


def quiet_replay_warnings() -> None:
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
    add_check_options(parser)
    args = parser.parse_args(argv)
    return run_check(args, workflows)


def run_check(args: argparse.Namespace, workflows: Sequence[type] = (AgentRunWorkflow,)) -> int:
    """Run the check the parsed ``args`` ask for (its own event loop)."""
    if not args.verbose:
        quiet_replay_warnings()
    return asyncio.run(
        check_main(
            args.query,
            verbose=args.verbose,
            include_pinned=args.include_pinned,
            workflows=workflows,
        )
    )


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # a process that used a Client can abort at exit (sdk-python#300)
