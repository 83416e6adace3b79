"""Checked-in workflow histories (`make record-histories`) and how the tests read them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from temporalio.client import WorkflowHistory


def recorded_history(path: Path) -> WorkflowHistory:
    """The history in ``path`` under the workflow id it ran with: a run's id is its workflow
    id, and the run checks that (`RUN_ID_IS_WORKFLOW_ID`), so replaying it under another id
    (the file's name) would take the refusal path instead of the recorded one."""
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    run_id = _run_id(history)
    return history if run_id is None else dataclasses.replace(history, workflow_id=run_id)


def _run_id(history: WorkflowHistory) -> str | None:
    """``run_id`` of the run's input (its first event), if the input is one of ours."""
    payloads = history.events[0].workflow_execution_started_event_attributes.input.payloads
    try:
        run_id = json.loads(payloads[0].data).get("run_id")
    except (IndexError, ValueError, AttributeError):
        return None
    return run_id if isinstance(run_id, str) else None
