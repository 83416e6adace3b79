"""The base of every contract, and `RunRef`: who is acting (carried by most inputs)."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict

from otherone.runs import EventVisibility


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunRef(_Contract):
    """Who is acting: enough lineage for storage scoping and event envelopes."""

    run_id: str
    root_run_id: str
    parent_run_id: str | None = None
    #: The `agent.call` that started this run (children only).
    agent_call_id: str | None = None
    agent_id: str
    depth: int = 0
    partition_key: str
    session_id: str
    #: The run's fixed snapshot ("" only in the prepare step of a new root).
    snapshot_version: str
    include_thinking_events: bool = False
    #: The root request's event visibility; it filters the events of descendants only.
    event_visibility: EventVisibility = "all"

    def key(self) -> str:
        """A short digest of this reference: model and tool inputs carry it instead of the
        whole reference (written into history twice per turn); a worker resolves it from its
        cache (`otherone.activities.run_refs`) or, once, by `QUERY_RUN_REF`."""
        return hashlib.blake2b(self.model_dump_json().encode(), digest_size=5).hexdigest()


def resolved_ref(ref: RunRef | str) -> RunRef:
    """The reference of an input whose activity has resolved its compact key."""
    if isinstance(ref, str):
        raise TypeError(f"run reference '{ref}' was not resolved")
    return ref
