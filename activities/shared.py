"""What every activity of a run shares: the worker's store, providers and snapshots
(`ActivityContext`), store I/O that rides out outages (made through
`otherone.activities.store_calls`), event emission and how failures are classified for the
workflow.

Each activity classifies its failures for the workflow: `ApplicationError(type=<FailureCode>)`,
retryable or not, so Temporal owns retries and the workflow decides outcomes. Every write is
idempotent under activity retries.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import JsonValue
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from otherone import pricing
from otherone.activities import store_calls
from otherone.activities.context import tool_error_content
from otherone.activities.decided_events import owed_decided_bodies
from otherone.activities.mcp_prompt_calls import fetch_instructions
from otherone.activities.mcp_sessions import McpSessions
from otherone.activities.memory_tools import MemoryTools
from otherone.activities.message_parts import parts_meta, tool_images_meta
from otherone.activities.providers import default_providers
from otherone.activities.providers.base import ModelProvider
from otherone.activities.run_refs import RunRefs
from otherone.activities.store_calls import heartbeat_if_running, store_call
from otherone.activities.tool_events import deferred_tool_events
from otherone.authorization import AgentCallAuthorizer
from otherone.config import RuntimeConfig, RuntimeSnapshot
from otherone.contracts import STORE_OUTAGE_PATIENCE, PendingEntry, RunRef
from otherone.definitions import ModelProfile
from otherone.errors import FailureCode, OtheroneError
from otherone.store import EntryRow, Store
from otherone.store.errors import describe_store_error, is_outage
from otherone.store.events import EntryEvents
from otherone.store.memory import MemoryStore

T = TypeVar("T")

#: A store call is retried in place for `STORE_OUTAGE_PATIENCE` (a database restart) before
#: the attempt fails (defined with the contracts: tool activities' timeouts cover it); first
#: after this many seconds, then twice as long each time, up to the maximum.
STORE_RETRY_FIRST_DELAY = 0.25
STORE_RETRY_MAX_DELAY = 2.0
#: What descendants still report under the `lifecycle_only` event visibility.
LIFECYCLE_EVENTS = frozenset(
    {
        "run_started",
        "run_completed",
        "run_failed",
        "run_cancelled",
        "agent_call_started",
        "agent_call_completed",
        "approval_requested",
        "approval_decided",
        # Why the agent has fewer tools than it was granted: said whatever the visibility.
        "mcp_unavailable",
    }
)
EXPECTED_FAILURES = frozenset(
    {
        FailureCode.AGENT_NOT_FOUND,
        FailureCode.BUDGET_EXCEEDED,
        FailureCode.INVALID_CONFIGURATION,
        FailureCode.SESSION_BUSY,
    }
)


def failure(
    code: FailureCode, message: str, *, retryable: bool = False, **kwargs: Any
) -> ApplicationError:
    """An error the workflow maps to `AgentFailure(code)`; non-retryable unless said otherwise.

    Expected outcomes (a busy session, an unknown agent, a spent budget) are marked benign so
    the worker logs them at debug level instead of as tracebacks.
    """
    category = (
        ApplicationErrorCategory.BENIGN
        if code in EXPECTED_FAILURES
        else ApplicationErrorCategory.UNSPECIFIED
    )
    return ApplicationError(
        message, type=code.value, non_retryable=not retryable, category=category, **kwargs
    )


class ActivityContext:
    """One worker's configuration, store, providers and snapshot cache, shared by its activities."""

    def __init__(
        self,
        config: RuntimeConfig,
        store: Store,
        providers: dict[str, ModelProvider] | None = None,
        authorizer: AgentCallAuthorizer | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.authorizer = authorizer
        self.providers: dict[str, ModelProvider] = {**default_providers(), **(providers or {})}
        self.memory_tools = MemoryTools(MemoryStore(store.engine))
        self._snapshots: dict[str, RuntimeSnapshot] = {}
        self._current = config.snapshot()
        pricing.preload(config.models.values())  # the price table, before any call needs it
        #: This worker's sessions to the configured MCP servers (closed by `aclose`).
        self.mcp = McpSessions(config.mcp_servers)
        #: Events of a run this worker could not store, not yet reported (run id -> count).
        self._lost_events: dict[str, int] = {}
        #: Run references by key: model and tool inputs carry only the key.
        self.run_refs = RunRefs()

    def provider_for(self, profile: ModelProfile, role: str = "model") -> ModelProvider:
        """The provider that serves ``profile`` on this worker; a model error if there is none
        (``role`` names the profile's use in the message, e.g. "summary model")."""
        provider = self.providers.get(profile.provider)
        if provider is None:
            raise failure(
                FailureCode.MODEL_ERROR,
                f"provider '{profile.provider}' of {role} '{profile.id}' "
                "is not available on this worker",
            )
        return provider

    async def io(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a store call in a thread, riding out a database outage of up to
        `STORE_OUTAGE_PATIENCE` in place (heartbeating); then a retryable storage error.

        Waiting here rather than failing the attempt matters for model and tool activities:
        their few Temporal attempts are meant for provider and tool faults, and a retried model
        call costs tokens. Every store write is idempotent, so repeating one is safe.

        Only outages are waited for (`is_outage`): a statement the database refuses (bad data, a
        constraint, a bug) would be refused again, so it fails the run at once with a
        non-retryable `storage_error`. Messages and logs name the driver's error, never the
        statement or its parameters (user data).
        """
        return await self._ridden_out(store_calls.in_thread, function, *args, **kwargs)

    async def brief_io(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`io` for a store call whose work is small and bounded (a turn's rows and events, a
        run's start or end): made on the event loop when the store allows it
        (`store_call`), which on SQLite costs less than the hop to a thread and back."""
        return await self._ridden_out(
            functools.partial(store_call, self.store), function, *args, **kwargs
        )

    async def io_to_its_end(
        self, function: Callable[..., T], *args: Any, brief: bool = False, **kwargs: Any
    ) -> T:
        """`brief_io` (``brief``) or `io`, whose thread, if the call needs one, is awaited to its
        end even when the caller is cancelled meanwhile (`store_calls.in_thread_to_its_end`):
        for a write whose outcome the caller must know (an attempt's end is stored once)."""
        call = (
            functools.partial(store_calls.store_call_to_its_end, self.store)
            if brief
            else store_calls.in_thread_to_its_end
        )
        return await self._ridden_out(call, function, *args, **kwargs)

    async def _ridden_out(
        self,
        call: Callable[..., Awaitable[T]],
        function: Callable[..., T],
        *args: Any,
        **kwargs: Any,
    ) -> T:
        """``call(function, ...)``, outages ridden out as `io` says."""
        delay, waited = STORE_RETRY_FIRST_DELAY, 0.0
        # Heartbeating once a call or an outage lasts (also while a call hangs in its thread):
        # the activity's heartbeat timeout must not end the attempt while the store is merely
        # slow or down. A quick call sends none (a heartbeat is a server request).
        while True:
            try:
                return await call(function, *args, **kwargs)
            except OtheroneError:
                raise
            except Exception as error:
                described = describe_store_error(error)
                if not is_outage(error):
                    activity.logger.error("store refused a write: %s", described)
                    raise failure(
                        FailureCode.STORAGE_ERROR, f"storage: {described}"
                    ) from None  # the chained error would put its SQL in the logs
                if waited >= STORE_OUTAGE_PATIENCE.total_seconds():
                    raise failure(
                        FailureCode.STORAGE_ERROR, f"storage: {described}", retryable=True
                    ) from None
                activity.logger.warning(
                    "store unavailable, retrying in %.1fs: %s", delay, described
                )
            heartbeat_if_running()  # an outage being ridden out: still alive
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, STORE_RETRY_MAX_DELAY)

    async def snapshot(self, version: str | None) -> RuntimeSnapshot:
        """The run's snapshot: the worker's current one for a new root, else the stored one."""
        if version is None:
            current = await self._with_mcp_tools(self._current)
            if current.version not in self._snapshots:  # kept here = stored (or read from it)
                await self.io(self.store.save_snapshot, current)
                self._snapshots[current.version] = current
            return current
        cached = self._snapshots.get(version)
        if cached is not None:
            return cached
        loaded = await self.io(self.store.load_snapshot, version)
        if loaded is None:
            raise failure(FailureCode.INTERNAL_ERROR, f"runtime snapshot '{version}' is not stored")
        self._snapshots[version] = loaded
        return loaded

    async def _with_mcp_tools(self, snapshot: RuntimeSnapshot) -> RuntimeSnapshot:
        """A new root run's snapshot gets the MCP tools as the servers list them right now, so
        the run (and every replay of it) keeps that list while new roots see changes."""
        if not self.mcp:
            return snapshot
        found = await self.mcp.discover(taken=snapshot.tools)
        # The agents' `instructions_from` prompts too: kept in the snapshot like the tools.
        instructions = await fetch_instructions(self.mcp, snapshot.agents.values())
        return snapshot.with_mcp(
            found.servers, found.schemas, found.refs, found.resources, instructions
        )

    async def emit(self, ref: RunRef, *bodies: dict[str, Any]) -> None:
        """Store the events the run's visibility lets through. Observation only: a failure to
        store one never fails the run, but is never silent either: the run's next stored
        events begin with an `events_lost` marker counting what this worker could not write
        (sequence numbers alone would hide the gap). (`EventBuffer` batches an activity's.)"""
        visible = self.visible(ref, bodies)
        if visible:
            await self.write_events(ref, visible)

    def deferred_events(self, ref: RunRef, pending: Sequence[PendingEntry]) -> EntryEvents | None:
        """The events inline tool results among ``pending`` left to their entries' writer
        (`deferred_tool_events`), for `Store.turn_context` / `append_entries_with_their_events`;
        None when there are none."""
        if all(entry.tool_arguments is None for entry in pending):
            return None
        return EntryEvents(
            ref, lambda written: self.visible(ref, deferred_tool_events(pending, written))
        )

    def visible(self, ref: RunRef, bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The events of ``bodies`` the run's event visibility lets through."""
        return [body for body in bodies if _visible(ref, body)]

    async def write_events(self, ref: RunRef, visible: list[dict[str, Any]]) -> None:
        """Write ``visible`` events (one transaction); a failure is counted, never raised."""
        batch = self.with_lost_marker(ref, visible)
        try:
            await store_call(self.store, self.store.append_events, ref, batch)
        except Exception as error:
            self.count_lost(ref, batch, error)

    def with_lost_marker(self, ref: RunRef, visible: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``visible``, after an `events_lost` marker if earlier events of the run were lost."""
        if not visible:
            return visible
        lost = self._lost_events.pop(ref.run_id, 0)
        return [{"type": "events_lost", "count": lost}, *visible] if lost else visible

    def owes_lost_marker(self, ref: RunRef) -> bool:
        """Whether events of ``ref``'s run were lost here and not announced yet."""
        return ref.run_id in self._lost_events

    def count_lost(self, ref: RunRef, batch: list[dict[str, Any]], error: BaseException) -> None:
        """``batch`` (maybe led by a marker) was not written: count it for the next marker."""
        count = sum(
            int(body.get("count", 0)) if body.get("type") == "events_lost" else 1 for body in batch
        )
        self._lost_events[ref.run_id] = self._lost_events.get(ref.run_id, 0) + count
        activity.logger.warning(
            "event store write failed (%d event(s) of run %s lost so far): %s",
            self._lost_events[ref.run_id],
            ref.run_id,
            describe_store_error(error),
        )

    async def emit_decided(
        self,
        ref: RunRef,
        events: Sequence[Mapping[str, JsonValue]],
        *,
        once: str | None = None,
    ) -> None:
        """Store the events the workflow decided (`DecidedEvents`), before the activity's own.

        Every attempt offers them, each keyed (`EVENT_KEY`) by ``once`` and its position, and
        the store keeps the first: an attempt killed before it stored them leaves them to its
        retry, and a retry of one that did repeats nothing. ``once`` names where they were
        decided; by default this activity (`attempt_key`: the same for all its attempts), else
        e.g. the run's finish, which Temporal may run again from attempt 1 (a local activity
        after its workflow task failed). An event marked `IF_MISSING` is stored only if the
        run's stored events still lack it: the call it ends may have been announced by its own
        activity before the run ended.
        """
        await self.emit(ref, *await self.decided_bodies(ref, events, once=once))

    async def decided_bodies(
        self,
        ref: RunRef,
        events: Sequence[Mapping[str, JsonValue]],
        *,
        once: str | None = None,
    ) -> list[dict[str, Any]]:
        """The events of `emit_decided` still to store (keyed by ``once``, those marked
        `IF_MISSING` only if still owed), for a caller that stores them with its own writes."""
        if not events:
            return []
        return await owed_decided_bodies(self.io, self.store, ref, events, once or attempt_key())

    async def io_with_events(
        self,
        ref: RunRef,
        bodies: Sequence[dict[str, Any]],
        together: Callable[[list[dict[str, Any]] | None], T],
        *,
        brief: bool = False,
    ) -> T:
        """``together(batch)`` through `io` (`brief_io` if ``brief``): the caller's writes and
        ``bodies`` in one transaction, ``batch`` being those of ``bodies`` the run's visibility
        lets through (in their order), after an `events_lost` marker if one is owed.

        Events stay observation only. A write the store refuses (not an outage: `io`) is made
        again without any event (``together(None)``: the caller leaves out every event, its
        entries' too) and ``batch`` is counted lost, so a refused event never costs the
        caller's own writes. An outage fails the attempt as any store write does: its retry
        writes the (keyed) events, so only the marker taken along is owed again."""
        batch = self.with_lost_marker(ref, self.visible(ref, bodies))
        io = self.brief_io if brief else self.io
        try:
            return await io(together, batch)
        except ApplicationError as error:
            if not error.non_retryable:
                self._owe_marker_again(ref, batch)
                raise
            refused: BaseException = error
        except asyncio.CancelledError:
            raise  # (its thread may still commit the batch, marker included)
        except BaseException:
            self._owe_marker_again(ref, batch)
            raise
        result = await io(together, None)
        if batch:
            self.count_lost(ref, batch, refused)
        return result

    def _owe_marker_again(self, ref: RunRef, batch: list[dict[str, Any]]) -> None:
        """The `events_lost` marker leading ``batch`` (`with_lost_marker`) was not written."""
        if batch and batch[0].get("type") == "events_lost":
            lost = int(batch[0].get("count", 0))
            self._lost_events[ref.run_id] = self._lost_events.get(ref.run_id, 0) + lost


def write_pending(context: ActivityContext, ref: RunRef, pending: tuple[PendingEntry, ...]) -> int:
    """Write ``pending`` (`materialise`), with the events inline tool results among them left
    to their entries (one transaction); returns the entries written."""
    store = context.store
    rows = materialise(store, ref, pending)
    events = context.deferred_events(ref, pending)
    if events is None:
        return store.append_entries(ref.partition_key, ref.session_id, rows)
    return store.append_entries_with_their_events(ref.partition_key, ref.session_id, rows, events)


def materialise(store: Store, ref: RunRef, pending: tuple[PendingEntry, ...]) -> list[EntryRow]:
    """Turn pending entries into rows, reading referenced tool results from the store."""
    stored = store.get_tool_results(ref.partition_key, ref.run_id, tool_result_ids(pending))
    return pending_rows(ref, pending, stored)


def attempt_key(*parts: str) -> str:
    """What keys an activity's events (with ``parts`` saying which) the same on each of its
    attempts: the scheduled activity (its id within the workflow run, which a new run after
    continue-as-new counts again from 1, hence the run too)."""
    info = activity.info()
    return ":".join(("activity", info.workflow_run_id or "", info.activity_id, *parts))


def tool_result_ids(pending: tuple[PendingEntry, ...]) -> list[str]:
    """The tool calls whose stored results ``pending`` refers to (spawn tools' answers: the
    agent calls whose children stored their results, `PendingEntry.stored_results_of`)."""
    ids = [entry.tool_result_of for entry in pending if entry.tool_result_of]
    return ids + [call_id for entry in pending for call_id in entry.stored_results_of]


def pending_rows(
    ref: RunRef, pending: tuple[PendingEntry, ...], stored: Mapping[str, str]
) -> list[EntryRow]:
    """Rows of ``pending``, given the ``stored`` results they refer to (call id -> content)."""
    rows: list[EntryRow] = []
    for entry in pending:
        content, error_kind = entry.content, entry.error_kind
        if entry.tool_result_of is not None:
            found = stored.get(entry.tool_result_of)
            if found is not None and content is not None:
                # A fallback (the run ended as the call did): the call's real result wins.
                content, error_kind = found, None
            elif found is not None:
                content = found
            elif content is None:
                content = tool_error_content("tool result was lost")
        if entry.stored_results_of and content is not None:
            content = with_stored_results(content, entry.stored_results_of, stored)
        rows.append(
            EntryRow(
                entry_key=entry.key,
                role=entry.role,
                content=content or "",
                tool_call_id=entry.tool_call_id,
                tool_name=entry.tool_name,
                error_kind=error_kind.value if error_kind else None,
                run_id=ref.run_id,
                meta=parts_meta(entry.parts)
                or (tool_images_meta(content) if entry.role == "tool" and content else None),
            )
        )
    return rows


def with_stored_results(content: str, call_ids: tuple[str, ...], stored: Mapping[str, str]) -> str:
    """A spawn tool's answer with the results of ``call_ids`` its children stored in place of
    the inline ones (which stay where a child stored none, e.g. one terminated from outside)."""
    found = {call_id: stored[call_id] for call_id in call_ids if call_id in stored}
    if not found:
        return content
    try:
        body = json.loads(content)
    except json.JSONDecodeError:
        return content
    if not isinstance(body, dict):
        return content

    def swap(item: Any) -> Any:
        call_id = item.get("call_id") if isinstance(item, dict) else None
        if not isinstance(call_id, str) or call_id not in found:
            return item
        try:
            return json.loads(found[call_id])
        except json.JSONDecodeError:
            return item

    if isinstance(body.get("results"), list):
        body["results"] = [swap(item) for item in body["results"]]
    if "result" in body:
        body["result"] = swap(body["result"])
    return json.dumps(body, ensure_ascii=False)


def _visible(ref: RunRef, body: dict[str, Any]) -> bool:
    """The seed's visibility rule: it filters descendants' events only."""
    if ref.depth == 0 or ref.event_visibility == "all":
        return True
    return ref.event_visibility == "lifecycle_only" and body.get("type") in LIFECYCLE_EVENTS
