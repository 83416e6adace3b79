"""Determinism guard: checked-in histories of real runs must replay on the current workflow code."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from tests.histories.broken_workflow import ReorderedAgentRunWorkflow
from worker.app import sandbox_runner
from workflows import AgentRunWorkflow

HISTORIES = Path(__file__).parent / "histories"
RECORDED = sorted(HISTORIES.glob("*.json"))


def _history(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


def _replayer(*workflows: type) -> Replayer:
    return Replayer(
        workflows=list(workflows),
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )


def test_histories_are_checked_in() -> None:
    assert {path.stem for path in RECORDED} >= {
        "tools_and_streaming",
        "parallel_tools",
        "signal_mid_run",
        "cancelled",
        "timed_out",
        "nested_call",
        "cancelled_tree",
        "timed_out_child",
    }


@pytest.mark.parametrize("path", RECORDED, ids=lambda path: path.stem)
async def test_recorded_history_replays(path: Path) -> None:
    result = await _replayer(AgentRunWorkflow).replay_workflow(_history(path))
    assert result.replay_failure is None


async def test_replayer_catches_a_nondeterministic_change() -> None:
    with pytest.raises(NondeterminismError):
        await _replayer(ReorderedAgentRunWorkflow).replay_workflow(
            _history(HISTORIES / "tools_and_streaming.json")
        )
