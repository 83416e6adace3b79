"""Continue-as-new of a run (a long run's fresh history, a handoff's next agent), onto the
current build when its own stopped being current (`otherone.worker.versioning`)."""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import RunInput


def continue_as_new(input: RunInput) -> NoReturn:
    """Continue as new with ``input``. A run pinned to a build that is no longer the
    deployment's current one starts its next history on the current build: the carried state
    is data the new code reads, not a history it replays. (Unversioned workers: never true.)"""
    if workflow.info().is_target_worker_deployment_version_changed():
        workflow.continue_as_new(
            input,
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )
    workflow.continue_as_new(input)
