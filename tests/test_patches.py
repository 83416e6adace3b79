"""Patch markers: a new run records one, for baseline 1, instead of one per pre-release patch
(`otherone.workflows.patches`). Histories recorded before, with a marker per patch, replay
through `tests/histories/legacy/*.markers.json` (`tests/test_replay.py`)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from otherone.contracts.agent_calls import child_run_id
from otherone.workflows import patches
from tests.histories import scenarios

WORKFLOWS = Path(patches.__file__).resolve().parent
LEGACY = Path(__file__).parent / "histories" / "legacy"


def _patch_ids(events: list[HistoryEvent]) -> list[str]:
    found = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        marker = event.marker_recorded_event_attributes
        if marker.marker_name == "core_patch":
            found.append(json.loads(marker.details["patch-data"].payloads[0].data)["id"])
    return found


def _change_versions(events: list[HistoryEvent]) -> list[list[str]]:
    """The `TemporalChangeVersion` values Temporal's core upserted, in order."""
    found = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            continue
        fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
        if "TemporalChangeVersion" in fields.indexed_fields:
            found.append(json.loads(fields.indexed_fields["TemporalChangeVersion"].data))
    return found


async def test_a_new_run_and_its_child_record_one_patch_marker_each(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run with a tool-less turn, an agent call and its end passes the checks of
    `CANCELLABLE_PREPARE`, `LOCAL_PREPARE_FINISH`, `PAIRED_EVENTS`, `BOUNDED_FINISH`,
    `SEED_CALL_ORDER`, `READABLE_CHILD_IDS` and `GENEROUS_ALLOWANCES`: one marker and one
    `TemporalChangeVersion` upsert for them all."""
    root = await scenarios.agent_call(client, task_queue, tmp_path)
    child = child_run_id(root, root, "to_b", "b")
    for run_id in (root, child):
        history = await client.get_workflow_handle(run_id).fetch_history()
        assert _patch_ids(history.events) == [patches.BASELINE_1], run_id
        assert _change_versions(history.events) == [[patches.BASELINE_1]], run_id


def test_baseline_1_stands_for_the_patches_it_was_recorded_with() -> None:
    """Never changed: runs that recorded `baseline-1` took the old path of every other patch."""
    assert patches.BASELINE_1 == "baseline-1"
    assert len(patches.BASELINE_1_PATCHES) == 22
    assert {"bounded-finish", "local-prepare-finish", "readable-child-ids"} < (
        patches.BASELINE_1_PATCHES
    )


def test_workflow_code_checks_patches_through_the_baseline() -> None:
    """Every patch check goes through `patches.patched` (a bare `workflow.patched` would record
    its own marker, and a baseline id misspelt in the set would too): each id of the set is a
    patch id constant some check names."""
    checked: set[str] = set()
    for path in WORKFLOWS.glob("*.py"):
        if path.name == "patches.py":
            continue
        tree = ast.parse(path.read_text())
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if node.func.attr in ("patched", "deprecate_patch"):
                assert isinstance(owner, ast.Name) and owner.id == "patches", (
                    f"{path.name}:{node.lineno}: check patches with `patches.patched`"
                )
                argument = node.args[0]
                assert isinstance(argument, ast.Name), f"{path.name}:{node.lineno}"
                checked.add(constants[argument.id])
    assert checked >= patches.BASELINE_1_PATCHES


def test_histories_recorded_with_a_marker_per_patch_are_kept() -> None:
    markers = {path.name.split(".")[0] for path in LEGACY.glob("*.markers.json")}
    assert {"single_agent", "agent_call", "spawn_await", "handoff_chain"} <= markers
