"""Patch checks: the exception, for hot fixes of a release's workflow code.

Since 0.1.0 workflow changes ship as new builds under Worker Versioning (docs/upgrading.md): a
run stays on the build it started on, so a change needs no branch for the histories of older
code. A hot fix that must reach runs already waiting on the current build (a bug that would
fail them) is the exception: the new behaviour goes behind `patched(id)`, which records a
marker in new runs' histories and takes the old path when a history without the marker is
replayed. Each patch id is listed in the CHANGELOG and folded into the code at the next minor
release (runs on the old build drained), as the pre-release patches were folded into 0.1.0.

Every check goes through `patched` (tests/test_patches.py enforces it), so the ids in use are
found in one grep.
"""

from __future__ import annotations

from temporalio import workflow


def patched(patch_id: str) -> bool:
    """`workflow.patched(patch_id)`: True on new runs and on histories that recorded the
    marker; False when replaying a history from before the patch."""
    return workflow.patched(patch_id)
