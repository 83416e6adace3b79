"""The options of the pre-deploy replay check (`otherone.worker.upgrade`), without its imports:
`otherone --help` builds them without loading the workflow code."""

from __future__ import annotations

import argparse

from otherone.workflow_names import WORKFLOW_NAME

#: The runs a deploy meets: every agent run still running.
RUNNING_RUNS = f'WorkflowType="{WORKFLOW_NAME}" AND ExecutionStatus="Running"'


def add_check_options(parser: argparse.ArgumentParser) -> None:
    """The options of the check (here and `otherone upgrade check`)."""
    parser.add_argument(
        "--query", default=RUNNING_RUNS, help=f"visibility query (default: {RUNNING_RUNS})"
    )
    parser.add_argument(
        "--include-pinned",
        action="store_true",
        help="also replay runs pinned to a build (they stay on their build's code, so they "
        "are left out by default)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print each failure in full, and the SDK's workflow-task warnings",
    )
