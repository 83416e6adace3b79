"""0.1.0 folded the pre-release patches into the code: a new run records no patch marker (and
no `TemporalChangeVersion` upsert), and the patching that stays possible for hot fixes goes
through one function (`otherone.workflows.patches`, docs/upgrading.md)."""

from __future__ import annotations

import ast
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from otherone.contracts.agent_calls import child_run_id
from otherone.workflows import patches
from tests.histories import scenarios

WORKFLOWS = Path(patches.__file__).resolve().parent


def _markers_and_change_versions(events: list[HistoryEvent]) -> list[str]:
    found = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            name = event.marker_recorded_event_attributes.marker_name
            if name == "core_patch":
                found.append("core_patch marker")
        elif event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            if "TemporalChangeVersion" in fields.indexed_fields:
                found.append("TemporalChangeVersion upsert")
    return found


async def test_a_new_run_and_its_child_record_no_patch_marker(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run with an agent call took eight pre-release patch checks before baseline 1 and one
    marker after; since 0.1.0 none (each marker was a history event and a visibility write)."""
    root = await scenarios.agent_call(client, task_queue, tmp_path)
    for run_id in (root, child_run_id(root, root, "to_b", "b")):
        history = await client.get_workflow_handle(run_id).fetch_history()
        assert _markers_and_change_versions(history.events) == [], run_id


def test_workflow_code_checks_patches_only_through_patches_patched() -> None:
    """A hot fix's patch goes through `patches.patched` (one place to find the ids in use), never
    a bare `workflow.patched`; 0.1.0 has none."""
    ids: list[str] = []
    for path in WORKFLOWS.rglob("*.py"):
        if path.name == "patches.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "temporalio.workflow":
                names = {alias.name for alias in node.names}
                assert "patched" not in names, f"{path.name}:{node.lineno}: use `patches.patched`"
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr in ("patched", "deprecate_patch"):
                owner = node.func.value
                assert isinstance(owner, ast.Name) and owner.id == "patches", (
                    f"{path.name}:{node.lineno}: check patches with `patches.patched`"
                )
                ids.append(ast.unparse(node.args[0]))
    assert ids == [], "0.1.0 ships no patch: list a hot fix's id in CHANGELOG.md"
