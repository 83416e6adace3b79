"""Patch markers: a new run records one, for baseline 1, instead of one per pre-release patch
(`otherone.workflows.patches`). Histories recorded before, with a marker per patch, replay
through `tests/histories/legacy/*.markers.json` (`tests/test_replay.py`)."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from otherone.contracts.agent_calls import child_run_id
from otherone.workflows import patches
from tests.histories import recorded_history, scenarios

WORKFLOWS = Path(patches.__file__).resolve().parent
LEGACY = Path(__file__).parent / "histories" / "legacy"
#: sha256 of baseline 1's 22 patch ids, sorted, one a line (`workflows/patches.py`).
BASELINE_1_DIGEST = "3a403c8479a5119ff4630ec8679c1b899ae3b4f35a8e694b535a3d3367d46669"


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
    """A run with an agent call passes the checks of `CANCELLABLE_PREPARE`,
    `LOCAL_PREPARE_FINISH`, `PAIRED_EVENTS`, `BOUNDED_FINISH`, `SEED_CALL_ORDER`,
    `READABLE_CHILD_IDS`, `GENEROUS_ALLOWANCES` and `CALL_RESULTS_BY_REFERENCE` (eight markers
    and eight upserts in `legacy/agent_call.markers.json`): one marker and one
    `TemporalChangeVersion` upsert for them all now."""
    root = await scenarios.agent_call(client, task_queue, tmp_path)
    child = child_run_id(root, root, "to_b", "b")
    for run_id in (root, child):
        history = await client.get_workflow_handle(run_id).fetch_history()
        assert _patch_ids(history.events) == [patches.BASELINE_1], run_id
        assert _change_versions(history.events) == [[patches.BASELINE_1]], run_id


def test_baseline_1_stands_for_the_patches_it_was_recorded_with() -> None:
    """Never changed: runs that recorded `baseline-1` took the old path of every other patch
    (several of these ids are in no recorded history, so no replay would catch a swap). The
    set is pinned by its digest rather than written out a second time: any id added, dropped
    or respelt changes it."""
    assert patches.BASELINE_1 == "baseline-1"
    ids = "\n".join(sorted(patches.BASELINE_1_PATCHES)).encode()
    assert hashlib.sha256(ids).hexdigest() == BASELINE_1_DIGEST


def test_workflow_code_checks_patches_through_the_baseline() -> None:
    """Every patch check goes through `patches.patched` (a bare `workflow.patched` would record
    its own marker, and a baseline id misspelt in the set would too): each id of the set is a
    patch id constant some check names."""
    checked: set[str] = set()
    for path in WORKFLOWS.rglob("*.py"):
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
            if isinstance(node, ast.ImportFrom) and node.module == "temporalio.workflow":
                names = {alias.name for alias in node.names}
                assert "patched" not in names, f"{path.name}:{node.lineno}: use `patches.patched`"
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if node.func.attr == "patched":
                assert isinstance(owner, ast.Name) and owner.id == "patches", (
                    f"{path.name}:{node.lineno}: check patches with `patches.patched`"
                )
                argument = node.args[0]
                assert isinstance(argument, ast.Name), f"{path.name}:{node.lineno}"
                checked.add(constants[argument.id])
    assert checked >= patches.BASELINE_1_PATCHES


def test_histories_recorded_with_a_marker_per_patch_are_kept() -> None:
    """The recordings from before baseline 1 (replayed by `tests/test_replay.py`) hold the
    per-patch markers, never `baseline-1`: they are what runs in flight at its deploy look like."""
    recorded = {
        path.name.removesuffix(".markers.json"): _patch_ids(recorded_history(path).events)
        for path in LEGACY.glob("*.markers.json")
    }
    assert not [name for name, ids in recorded.items() if patches.BASELINE_1 in ids]
    assert set(recorded["single_agent"]) == {
        "cancellable-prepare",
        "local-prepare-finish",
        "paired-activity-events",
        "bounded-finish",
    }
    assert len(recorded["agent_call"]) == 8
    assert {"spawn_await", "handoff_chain.1", "output_retry"} <= set(recorded)
