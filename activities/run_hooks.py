"""``on_run_start`` and ``on_run_end`` hooks (`otherone.hooks`), inside `prepare_run` and
`finish_run`: a run's start may be refused (it fails ``hook_refused`` before any model call);
its end is only observed (a hook's error is an event, never blocks the end). Both steps may run
again (a retried or re-run local activity): the hooks run at least once."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import JsonValue
from temporalio import activity

from otherone.activities.shared import ActivityContext, failure
from otherone.config import RuntimeSnapshot
from otherone.contracts import FinishRunInput, RunRef
from otherone.definitions import AgentDefinition
from otherone.errors import FailureCode
from otherone.hook_policy import stage_names
from otherone.hooks import HookFailed, HookRefusal, RunView, run_stage
from otherone.store.records import EVENT_KEY, event_key

logger = logging.getLogger(__name__)


def _view(ref: RunRef, metadata: dict[str, JsonValue]) -> RunView:
    return RunView(
        run_id=ref.run_id,
        root_run_id=ref.root_run_id,
        parent_run_id=ref.parent_run_id,
        agent_id=ref.agent_id,
        depth=ref.depth,
        partition_key=ref.partition_key,
        metadata=metadata,
    )


async def on_run_start(
    context: ActivityContext,
    snapshot: RuntimeSnapshot,
    agent: AgentDefinition,
    ref: RunRef,
    metadata: dict[str, JsonValue],
) -> None:
    """Raise the run's failure when a hook refuses it or fails."""
    names = stage_names(snapshot.policy.hooks, agent.hooks, "on_run_start")
    if not names:
        return
    try:
        await run_stage(context.config.hooks, names, "on_run_start", _view(ref, metadata))
    except HookRefusal as refusal:
        message = f"hook '{refusal.hook}' refused the run: {refusal.reason}"
        raise failure(FailureCode.HOOK_REFUSED, message) from None
    except HookFailed as error:
        raise failure(FailureCode.HOOK_FAILED, str(error)) from None


async def on_run_end(context: ActivityContext, input: FinishRunInput) -> list[dict[str, Any]]:
    """Run the hooks on the run's end; the events to store with it (a hook's error)."""
    ref = input.ref
    if not ref.snapshot_version or not context.config.hooks.names():
        return []  # ended before it was prepared (no agent), or no hook is registered at all
    try:
        snapshot = await context.snapshot(ref.snapshot_version)
    except Exception as error:  # a run's end is stored all the same: hooks never block it
        logger.warning("run %s ended; its on_run_end hooks were skipped: %s", ref.run_id, error)
        return []
    agent = snapshot.agents.get(ref.agent_id)
    names = stage_names(snapshot.policy.hooks, agent.hooks, "on_run_end") if agent else ()
    if not names:
        return []
    record_metadata = input.record.metadata if input.record is not None else {}
    view = _view(ref, record_metadata).model_copy(
        update={
            "status": input.status.value,
            "failure": input.failure.model_dump(mode="json") if input.failure else None,
            "usage": input.usage.model_dump(mode="json"),
        }
    )
    try:
        await run_stage(context.config.hooks, names, "on_run_end", view)
    except (HookRefusal, HookFailed) as error:
        activity.logger.warning("run %s: on_run_end hook: %s", ref.run_id, error)
        return [
            {
                "type": "hook_failed",
                "stage": "on_run_end",
                "error": str(error),
                EVENT_KEY: event_key(ref.run_id, "on-run-end-hook"),
            }
        ]
    return []
