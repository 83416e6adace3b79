"""Patch checks: one marker a run for every patch of baseline 1, not one marker per patch.

`workflow.patched(id)` records a marker in a new run's history, and Temporal's core adds an
upsert of the `TemporalChangeVersion` search attribute next to it (a visibility update on the
server). A usual run met four of the pre-release patches (`CANCELLABLE_PREPARE`,
`LOCAL_PREPARE_FINISH`, `PAIRED_EVENTS`, `BOUNDED_FINISH`) and a run with an agent call four
more: eight to sixteen history events and four to eight visibility updates a run, for code every
new run takes anyway (issue 17: four cost ~2.4 ms a one-turn run on the bare floor, measured).

So a run checks `BASELINE_1` once, first thing (`check_baseline`): a run started on code that
has every patch in `BASELINE_1_PATCHES` records that one marker, and those patches then hold
without markers of their own. A history recorded before has no `BASELINE_1` marker: replayed,
the check is false and each patch is checked as before, by its own marker (the recordings in
`tests/histories/legacy/*.markers.json`).

`BASELINE_1_PATCHES` is frozen: a run that recorded `BASELINE_1` took the old path of any patch
not in it, so adding an id would switch that run to the new path on replay (nondeterminism).
A patch added later is checked with `patched` as any other (its own marker); folding such
patches takes a new baseline id with its own set, checked the same way (docs/upgrading.md).
"""

from __future__ import annotations

from temporalio import workflow

#: Patch id of baseline 1: the run started on code with every patch in `BASELINE_1_PATCHES`.
BASELINE_1 = "baseline-1"

#: The patches baseline 1 stands for (the pre-release ones). Never change this set.
BASELINE_1_PATCHES = frozenset(
    {
        "bounded-finish",
        "call-results-by-reference",
        "cancellable-prepare",
        "generous-allowances",
        "handoff-summary-usage",
        "local-prepare-finish",
        "mcp-failures-to-model",
        "output-retries",
        "paired-activity-events",
        "readable-child-ids",
        "run-id-is-workflow-id",
        "seed-call-order",
        "self-described",
        "skip-calls-after-cancellation",
        "status-of-carried-spawns",
        "stop-after-cancelled-children",
        "stop-when-a-turn-outlives-cancel",
        "stop-when-an-answer-outlives-cancel",
        "stored-end-outlives-handlers",
        "tool-concurrency-limit",
        "wait-for-cancelled-tools",
        "watch-carried-spawns",
    }
)


def check_baseline() -> None:
    """Check `BASELINE_1` (recording its marker in a new run), first thing in the run's first
    workflow task: the marker then opens every new history and `TemporalChangeVersion` lists
    it from the start. (Not needed for consistency: `patched` checks `BASELINE_1` before any id
    of the set, and the SDK keeps the first answer for the rest of the run.)"""
    workflow.patched(BASELINE_1)


def patched(patch_id: str) -> bool:
    """`workflow.patched(patch_id)`, without a marker of its own in a run of baseline 1."""
    if patch_id in BASELINE_1_PATCHES and workflow.patched(BASELINE_1):
        return True
    return workflow.patched(patch_id)
