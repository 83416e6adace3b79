"""Determinism guard: checked-in histories of real runs must replay on the current workflow code."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from otherone.worker.app import sandbox_runner
from otherone.workflows import AgentRunWorkflow
from tests.histories.broken_workflow import ReorderedAgentRunWorkflow
from tests.histories.scenarios import SCENARIOS

HISTORIES = Path(__file__).parent / "histories"
#: Histories of the current workflow code (`make record-histories`) and of earlier versions.
RECORDED = sorted(HISTORIES.glob("*.json")) + sorted((HISTORIES / "legacy").glob("*.json"))


def _history(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


def _replayer(*workflows: type) -> Replayer:
    return Replayer(
        workflows=list(workflows),
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )


def test_every_scenario_is_checked_in_now_and_from_before() -> None:
    current = {path.stem.split(".")[0] for path in HISTORIES.glob("*.json")}
    assert current == set(SCENARIOS), "run `make record-histories`"
    legacy = {path.stem for path in (HISTORIES / "legacy").glob("*.json")}
    assert legacy >= {"tools_and_streaming", "nested_call", "cancelled_tree", "signal_mid_run"}
    # Recorded once by record_local_timeout.py (their timing does not always cooperate): the
    # only runs whose local prepare_run / finish_run timed out (`store_steps._store_activity`).
    assert legacy >= {"local_finish_timed_out", "local_prepare_timed_out"}
    assert any(path.name.endswith(".2.json") for path in HISTORIES.glob("continue_as_new.*"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda path: path.stem)
async def test_recorded_history_replays(path: Path) -> None:
    result = await _replayer(AgentRunWorkflow).replay_workflow(_history(path))
    assert result.replay_failure is None


async def test_replayer_catches_a_nondeterministic_change() -> None:
    with pytest.raises(NondeterminismError):
        await _replayer(ReorderedAgentRunWorkflow).replay_workflow(
            _history(HISTORIES / "tools_and_streaming.json")
        )
