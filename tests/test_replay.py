"""Determinism guard: checked-in histories of real runs must replay on the current workflow code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from otherone.worker.app import sandbox_runner
from otherone.workflows import AgentRunWorkflow, WebhookDeliveryWorkflow
from tests.histories import recorded_history
from tests.histories.broken_workflow import ReorderedAgentRunWorkflow
from tests.histories.scenarios import SCENARIOS

HISTORIES = Path(__file__).parent / "histories"
#: Histories of the current workflow code (`make record-histories`, and `once/`: recorded by a
#: script of their own); `previous/` would hold the last release's while a patch needs them.
RECORDED = sorted(HISTORIES.glob("*.json")) + sorted(HISTORIES.glob("*/*.json"))


def _replayer(*workflows: type) -> Replayer:
    return Replayer(
        workflows=list(workflows),
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )


def test_every_scenario_is_checked_in_now_and_from_before() -> None:
    current = {path.stem.split(".")[0] for path in HISTORIES.glob("*.json")}
    assert current == set(SCENARIOS), "run `make record-histories`"
    # Recorded once by record_local_timeout.py (their timing does not always cooperate): the
    # only runs whose local prepare_run / finish_run timed out (`store_steps._store_activity`).
    once = {path.stem for path in (HISTORIES / "once").glob("*.json")}
    assert once >= {"local_finish_timed_out", "local_prepare_timed_out"}
    assert any(path.name.endswith(".2.json") for path in HISTORIES.glob("continue_as_new.*"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda path: path.stem)
async def test_recorded_history_replays(path: Path) -> None:
    replayer = _replayer(AgentRunWorkflow, WebhookDeliveryWorkflow)
    result = await replayer.replay_workflow(recorded_history(path))
    assert result.replay_failure is None


async def test_replayer_catches_a_nondeterministic_change() -> None:
    with pytest.raises(NondeterminismError):
        await _replayer(ReorderedAgentRunWorkflow).replay_workflow(
            recorded_history(HISTORIES / "tools_and_streaming.json")
        )


async def test_the_strict_sandbox_runs_its_own_copy_of_the_run_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every module of the run's workflow code (the loop, state and end split out of
    `agent_run`, the tool steps, the message queue, ...) is re-imported by the strict sandbox
    like `agent_run` itself, so the tests' sandbox guards it against non-deterministic calls (a
    module imported inside `imports_passed_through()` is not proxied: ``datetime.now()`` there
    went unnoticed). A spy on the worker's own copies is reached by a replay without the
    sandbox's re-import (``passthrough``), never under it."""
    from otherone.worker.app import workflow_runner
    from otherone.workflows import finishing, messages, run_state, tool_steps, turns

    reached: list[str] = []

    def spy(name: str, original: Any) -> Any:
        def spied(*args: Any, **kwargs: Any) -> Any:
            reached.append(name)
            return original(*args, **kwargs)

        return spied

    monkeypatch.setattr(turns, "_charge", spy("turns", turns._charge))
    monkeypatch.setattr(finishing, "_result", spy("finishing", finishing._result))
    monkeypatch.setattr(
        run_state.RunState, "take_queued", spy("run_state", run_state.RunState.take_queued)
    )
    monkeypatch.setattr(messages.MessageQueue, "take", spy("messages", messages.MessageQueue.take))
    monkeypatch.setattr(tool_steps.ToolSteps, "run", spy("tool_steps", tool_steps.ToolSteps.run))
    passthrough = Replayer(
        workflows=[AgentRunWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner("passthrough"),
    )
    for name in ("single_agent.json", "tools_and_streaming.json"):
        history = recorded_history(HISTORIES / name)
        assert (await passthrough.replay_workflow(history)).replay_failure is None
    assert set(reached) == {"turns", "finishing", "run_state", "messages", "tool_steps"}
    reached.clear()
    for name in ("single_agent.json", "tools_and_streaming.json"):
        history = recorded_history(HISTORIES / name)
        result = await _replayer(AgentRunWorkflow).replay_workflow(history)
        assert result.replay_failure is None
    assert reached == []
