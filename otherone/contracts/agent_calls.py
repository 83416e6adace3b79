"""Calls to other agents (``agent.call``, ``agent.spawn``): their inputs, plans and ends."""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from pydantic import JsonValue, StringConstraints

from otherone.contracts.refs import RunRef, _Contract
from otherone.definitions import RuntimeLimits
from otherone.runs import AgentCallRequest, AgentCallResult, AgentRunResult


class SpawnedCall(_Contract):
    """One `agent.spawn` of a run: its handle (the call id), its child and, once it ended (or
    was refused), its result."""

    call_id: str
    target: str
    #: The child's run id (= workflow id); None when the call was refused before a child ran.
    run_id: str | None = None
    result: AgentCallResult | None = None
    #: An `agent.await` (or status, cancel) has returned the result to the model.
    reported: bool = False


class DescribeRunsInput(_Contract):
    """Activity input: the runs (workflow ids) to ask Temporal about."""

    run_ids: tuple[str, ...]


class EndedRun(_Contract):
    """A run Temporal reports as ended: the status of its latest execution (``completed``,
    ``failed``, ``canceled``, ``terminated``, ``timed_out``; ``not_found`` when Temporal no
    longer knows it) and, when it completed, its result."""

    run_id: str
    status: str
    result: AgentRunResult | None = None


class EndedRuns(_Contract):
    """Activity result: the asked-about runs that have ended (running ones are left out)."""

    ended: tuple[EndedRun, ...] = ()


class SpawnEnded(_Contract):
    """Signal payload: a spawned child's result, sent by the child to its caller."""

    call_id: str
    result: AgentRunResult


class CallAgentInput(_Contract):
    """Update payload of a trusted programmatic call (same idempotency by call id)."""

    call_id: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    request: AgentCallRequest


class PrepareCallInput(_Contract):
    caller: RunRef
    ancestry: tuple[str, ...]
    call_id: str
    request: AgentCallRequest
    limits: RuntimeLimits
    #: Events the workflow decided since its last activity (stored first).
    events: tuple[dict[str, JsonValue], ...] = ()
    #: Made with `agent.spawn` (announced as such): the caller does not wait for the child.
    spawned: bool = False
    #: The workflow id the child will have (announced in `agent_call_started`, so viewers need
    #: not know which id formula the run is on). None from runs recorded before it was sent.
    child_run_id: str | None = None
    #: The caller's model profile (a target whose model is ``inherit`` runs on it).
    caller_model_profile_id: str | None = None


class CallPlan(_Contract):
    """A checked agent call: who runs, with what input (task, context, parent excerpt)."""

    target_id: str
    child_input: str
    #: The child's Web UI details (markdown); None from checks recorded before they existed.
    details: str | None = None


_SAFE_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def child_run_id(
    root_run_id: str, caller_run_id: str, call_id: str, target: str | None = None
) -> str:
    """Workflow id of the child started by ``call_id``: the same call id, the same child.

    With the ``target`` agent (runs on the `readable-child-ids` path):
    ``<caller>/<target>.<call id>``, e.g. ``invoice-42-3f9a1c0b7d2e4f6a/researcher.call_1``.
    Agent ids hold no ``.`` and call ids kept as they are hold no ``.`` or ``/``, so the id
    reads back unambiguously and stays unique per caller. Without ``target``: the formula
    before readable ids (``<caller>/<call id>``), still used by runs on the old path and by
    events stored before. Either way the call id is hashed when it holds other characters
    than letters, digits, ``_-``, and a deep tree whose id would grow too long falls back to
    ``<root>/<digest>`` (keeping the target when known).
    """
    digest = hashlib.sha256(f"{caller_run_id}\x00{call_id}".encode()).hexdigest()
    safe = call_id if _SAFE_CALL_ID.fullmatch(call_id) else f"h{digest[:24]}"
    if target is None:
        candidate = f"{caller_run_id}/{safe}"
        return candidate if len(candidate) <= 255 else f"{root_run_id}/{digest[:40]}"
    candidate = f"{caller_run_id}/{target}.{safe}"
    return candidate if len(candidate) <= 255 else f"{root_run_id}/{target}.h{digest[:40]}"
