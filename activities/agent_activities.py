"""The activities of an agent run: prepare, model call, tool call, finish.

All I/O of a run happens here. Each activity classifies its failures for the workflow:
`ApplicationError(type=<FailureCode>)`, retryable or not, so Temporal owns retries and the
workflow decides outcomes. Every write is idempotent under activity retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from otherone.activities.artifacts import needs_offload, offload_turn, store_blob
from otherone.activities.compaction import plan_compaction, summary_messages
from otherone.activities.context import (
    agent_call_tool_definition,
    build_child_input,
    generation_settings,
    messages_from_entries,
    parent_excerpt,
    system_prompt_for,
    tool_definitions,
    tool_error_content,
    turn_from_entry,
    wire_tool_calls,
)
from otherone.activities.memory_tools import MEMORY_POLICY_METADATA_KEY, MemoryTools
from otherone.activities.model_stream import OutputLimitExceeded, TurnCollector, valid_unicode
from otherone.activities.output import apply_result_contract
from otherone.activities.providers import default_providers
from otherone.activities.providers.base import ModelProvider, ModelRequest, ProviderError, TextDelta
from otherone.authorization import AgentCallAuthorizer, CallerView
from otherone.config import AGENT_CALL_TOOL, AgentNotFoundError, RuntimeConfig, RuntimeSnapshot
from otherone.contracts import (
    ACTIVITY_CALL_MODEL,
    ACTIVITY_FINISH_RUN,
    ACTIVITY_PREPARE_CALL,
    ACTIVITY_PREPARE_RUN,
    ACTIVITY_RUN_TOOL,
    CallPlan,
    FinishRunInput,
    ModelCallInput,
    ModelTurn,
    PendingEntry,
    PrepareCallInput,
    PrepareRunInput,
    RunPlan,
    RunRef,
    ToolCallInput,
    ToolOutcome,
    ToolSettings,
)
from otherone.definitions import AgentDefinition, ModelOverrides, RuntimeLimits
from otherone.errors import FailureCode, OtheroneError
from otherone.runs import AgentCallResult, RunOutcome, RunRecord, RunStatus
from otherone.store import EntryRow, SessionBusyError, Store, estimate_tokens
from otherone.store.memory import MemoryStore
from otherone.tools import ToolContext, ToolError, ToolErrorKind

T = TypeVar("T")

#: Deltas are written to the event store at most this often (batching keeps the store calm).
DELTA_FLUSH_SECONDS = 0.05
HEARTBEAT_EVERY_SECONDS = 1.0
LEASE_SLACK = timedelta(minutes=1)
#: Tool `started` events carry the arguments, cut to this size (events are for people).
EVENT_ARGUMENTS_CHARS = 2000
#: A store call is retried in place for this long (a database restart) before the attempt fails.
STORE_OUTAGE_PATIENCE = timedelta(minutes=2)
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


class AgentActivities:
    """Activities bound to one worker's configuration, store and providers."""

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
        self._snapshots: dict[str, RuntimeSnapshot] = {}
        self._current = config.snapshot()
        self.memory_tools = MemoryTools(MemoryStore(store.engine))

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.prepare_run,
            self.call_model,
            self.run_tool,
            self.prepare_call,
            self.finish_run,
        ]

    # helpers -----------------------------------------------------------------------------

    async def _io(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a store call in a thread, riding out a database outage of up to
        `STORE_OUTAGE_PATIENCE` in place (heartbeating); then a retryable storage error.

        Waiting here rather than failing the attempt matters for model and tool activities:
        their few Temporal attempts are meant for provider and tool faults, and a retried model
        call costs tokens. Every store write is idempotent, so repeating one is safe.
        """
        delay, waited = STORE_RETRY_FIRST_DELAY, 0.0
        # Heartbeating throughout (also while a call hangs in its thread): the activity's
        # heartbeat timeout must not end the attempt while the store is merely slow or down.
        async with _heartbeating():
            while True:
                try:
                    return await asyncio.to_thread(function, *args, **kwargs)
                except OtheroneError:
                    raise
                except Exception as error:  # the driver's errors are many; all retryable here
                    if waited >= STORE_OUTAGE_PATIENCE.total_seconds():
                        raise failure(
                            FailureCode.STORAGE_ERROR, f"storage: {error}", retryable=True
                        ) from error
                    activity.logger.warning(
                        "store unavailable, retrying in %.1fs: %s", delay, error
                    )
                await asyncio.sleep(delay)
                waited += delay
                delay = min(delay * 2, STORE_RETRY_MAX_DELAY)

    async def snapshot(self, version: str | None) -> RuntimeSnapshot:
        """The run's snapshot: the worker's current one for a new root, else the stored one."""
        if version is None:
            await self._io(self.store.save_snapshot, self._current)
            self._snapshots[self._current.version] = self._current
            return self._current
        cached = self._snapshots.get(version)
        if cached is not None:
            return cached
        loaded = await self._io(self.store.load_snapshot, version)
        if loaded is None:
            raise failure(FailureCode.INTERNAL_ERROR, f"runtime snapshot '{version}' is not stored")
        self._snapshots[version] = loaded
        return loaded

    async def emit(self, ref: RunRef, *bodies: dict[str, Any]) -> None:
        """Store the events the run's visibility lets through. Observation only: a failure to
        store one never fails the run."""
        visible = [body for body in bodies if _visible(ref, body)]
        if not visible:
            return
        try:
            await asyncio.to_thread(self.store.append_events, ref, visible)
        except Exception as error:
            activity.logger.warning("event store write failed: %s", error)

    # prepare -----------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_PREPARE_RUN)
    async def prepare_run(self, input: PrepareRunInput) -> RunPlan:
        async with _heartbeating():  # a killed worker is noticed in seconds, not minutes
            return await self._prepare_run(input)

    async def _prepare_run(self, input: PrepareRunInput) -> RunPlan:
        snapshot = await self.snapshot(input.ref.snapshot_version or None)
        try:
            agent = snapshot.agent(input.ref.agent_id)
            limits = snapshot.limits.tightened(input.request.limits)
        except AgentNotFoundError as error:
            raise failure(FailureCode.AGENT_NOT_FOUND, error.message) from error
        except ValueError as error:
            raise failure(FailureCode.INVALID_CONFIGURATION, str(error)) from error
        profile = snapshot.resolve_model(agent, input.caller_model_profile_id)
        timeout = _run_timeout(agent.limits.timeout_millis, limits, root=input.ref.depth == 0)
        # The lease expires with the run (plus slack for finishing), so a run terminated from
        # outside cannot lock its session for longer than it could have run.
        lease_until = datetime.now(UTC) + timeout + LEASE_SLACK
        if input.inherited_deadline is not None:
            lease_until = min(lease_until, input.inherited_deadline + LEASE_SLACK)
        try:
            await self._io(
                self.store.acquire_session,
                input.ref.partition_key,
                input.ref.session_id,
                input.ref.run_id,
                internal=input.internal_session,
                lease_until=lease_until,
            )
        except SessionBusyError as error:
            raise failure(FailureCode.SESSION_BUSY, error.message) from error
        ref = input.ref.model_copy(update={"snapshot_version": snapshot.version})
        await self._io(self.store.upsert_run_record, _running_record(input, agent.version))
        started: dict[str, Any] = {"type": "run_started"}
        if ref.agent_call_id is not None:
            started["agent_call_id"] = ref.agent_call_id  # links the child to its caller's call
        await self.emit(ref, started)
        return RunPlan(
            snapshot_version=snapshot.version,
            agent_id=agent.id,
            agent_version=agent.version,
            model_profile_id=profile.id,
            model_label=f"{profile.provider}/{profile.model}",
            limits=limits,
            max_iterations=min(
                _max_iterations(agent.limits.max_iterations, limits),
                input.max_iterations or limits.max_iterations_per_run,
            ),
            result_limit_bytes=min(
                agent.limits.max_result_bytes or limits.max_result_bytes, limits.max_result_bytes
            ),
            timeout=timeout,
            parallel_tool_calls=bool(agent.model_overrides.parallel_tool_calls),
            tools={
                name: settings
                for name in snapshot.tool_names_for(agent)
                if (settings := self._tool_settings(snapshot, name)) is not None
            },
            reachable_agents=tuple(target.id for target in snapshot.reachable_agents(agent)),
            continue_as_new_after_turns=snapshot.policy.continue_as_new_after_turns,
        )

    def _tool_settings(self, snapshot: RuntimeSnapshot, name: str) -> ToolSettings | None:
        """How the workflow runs a tool: a user tool's from the snapshot, or a built-in's."""
        source = snapshot.tools.get(name) or self.memory_tools.get(name)
        if source is None:
            return None
        return ToolSettings(
            timeout_seconds=source.timeout_seconds, max_attempts=source.max_attempts
        )

    # model -------------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_CALL_MODEL)
    async def call_model(self, input: ModelCallInput) -> ModelTurn:
        ref = input.ref
        assistant_key = f"{ref.run_id}:t{input.turn}:assistant"
        done, rows, summary = await self._io(self._prepare_context, input, assistant_key)
        await self.emit(ref, *_call_completed_events(input.pending))
        if done is not None:
            # A retry after the turn was already stored: never call the model twice.
            return await self._returnable(_with_output(done, input), input)
        snapshot = await self.snapshot(ref.snapshot_version)
        agent = snapshot.agent(ref.agent_id)
        profile = snapshot.models[input.model_profile_id]
        provider = self.providers.get(profile.provider)
        if provider is None:
            raise failure(
                FailureCode.MODEL_ERROR,
                f"provider '{profile.provider}' of model '{profile.id}' "
                "is not available on this worker",
            )
        system_prompt = system_prompt_for(snapshot, agent)
        tools = _offered_tools(snapshot, agent, self.memory_tools)
        request = ModelRequest(
            profile=profile,
            agent_id=agent.id,
            run_id=ref.run_id,
            turn=input.turn,
            attempt=activity.info().attempt,
            messages=[],
            tools=tools,
            settings=generation_settings(profile, agent),
        )
        rows, summary = await self._compact(provider, request, input, system_prompt, rows, summary)
        request = dataclasses.replace(
            request, messages=messages_from_entries(system_prompt, rows, summary)
        )
        queued = sum(1 for entry in input.pending if entry.queued)
        started: list[dict[str, Any]] = (
            [{"type": "user_message_queued", "count": queued}] if queued else []
        )
        await self.emit(ref, *started, _model_started(input.turn, request.attempt))
        turn = await self._stream(provider, request, input, ref)
        await self._io(
            self.store.append_entries,
            ref.partition_key,
            ref.session_id,
            [_assistant_row(assistant_key, ref, turn)],
        )
        await self.emit(
            ref,
            {
                "type": "model_completed",
                "turn": input.turn,
                "attempt": request.attempt,
                "usage": _usage(turn),
            },
        )
        return await self._returnable(_with_output(turn, input), input)

    async def _returnable(self, turn: ModelTurn, input: ModelCallInput) -> ModelTurn:
        """Keep what goes back into the workflow's history under the inline payload limit."""
        snapshot = await self.snapshot(input.ref.snapshot_version)
        if not needs_offload(turn, snapshot.policy.inline_payload_bytes):
            return turn
        return await self._io(offload_turn, self.store, input.ref, turn, input.turn)

    def _prepare_context(
        self, input: ModelCallInput, assistant_key: str
    ) -> tuple[ModelTurn | None, list[EntryRow], str | None]:
        """Write pending entries; then the context: latest summary and the entries after it."""
        ref = input.ref
        written = self._materialise(ref, input.pending)
        self.store.append_entries(ref.partition_key, ref.session_id, written)
        existing = self.store.get_entry(ref.partition_key, ref.session_id, assistant_key)
        if existing is not None:
            return turn_from_entry(existing), [], None
        compaction = self.store.latest_compaction(ref.partition_key, ref.session_id)
        after = compaction.up_to_entry_id if compaction else None
        entries = self.store.load_entries(ref.partition_key, ref.session_id, after_id=after)
        return None, entries, compaction.summary if compaction else None

    async def _compact(
        self,
        provider: ModelProvider,
        request: ModelRequest,
        input: ModelCallInput,
        system_prompt: str,
        rows: list[EntryRow],
        summary: str | None,
    ) -> tuple[list[EntryRow], str | None]:
        """Summarise the older part of the context when it nears the window (the seed's rule)."""
        fixed = estimate_tokens(system_prompt + json.dumps(request.tools) + (summary or ""))
        plan = plan_compaction(
            rows,
            fixed_tokens=fixed,
            context_window=input.context_window,
            threshold=input.compaction_threshold,
        )
        if plan is None:
            return rows, summary
        provider, summary_request = await self._summary_request(provider, request, input)
        summary_request = dataclasses.replace(
            summary_request,
            messages=summary_messages(summary, plan.summarise),
            tools=[],
            purpose="summary",
        )
        text = await self._summarise(provider, summary_request)
        ref = input.ref
        await self._io(
            self.store.add_compaction,
            ref.partition_key,
            ref.session_id,
            key=f"{ref.run_id}:t{input.turn}:compaction",
            summary=text,
            up_to_entry_id=plan.up_to_entry_id,
            tokens=estimate_tokens(text),
        )
        await self.emit(
            ref,
            {
                "type": "context_compacted",
                "turn": input.turn,
                "summarised_entries": len(plan.summarise),
                "kept_entries": len(plan.keep),
            },
        )
        return list(plan.keep), text

    async def _summary_request(
        self, provider: ModelProvider, request: ModelRequest, input: ModelCallInput
    ) -> tuple[ModelProvider, ModelRequest]:
        """The runtime policy's `summary_model` writes summaries when set, else the agent's."""
        snapshot = await self.snapshot(input.ref.snapshot_version)
        profile_id = snapshot.policy.summary_model
        if profile_id is None or profile_id == request.profile.id:
            return provider, request
        profile = snapshot.models[profile_id]
        summariser = self.providers.get(profile.provider)
        if summariser is None:
            raise failure(
                FailureCode.MODEL_ERROR,
                f"provider '{profile.provider}' of summary model '{profile.id}' "
                "is not available on this worker",
            )
        # The summary profile's own settings: the agent's overrides are for its turns.
        agent = snapshot.agent(input.ref.agent_id).model_copy(
            update={"model_overrides": ModelOverrides()}
        )
        settings = generation_settings(profile, agent)
        return summariser, dataclasses.replace(request, profile=profile, settings=settings)

    async def _summarise(self, provider: ModelProvider, request: ModelRequest) -> str:
        parts: list[str] = []
        try:
            async with _heartbeating():
                async for event in provider.stream(request):
                    if isinstance(event, TextDelta):
                        parts.append(event.text)
        except ProviderError as error:
            delay = timedelta(seconds=error.retry_after) if error.retry_after else None
            raise failure(
                FailureCode.MODEL_ERROR,
                f"compaction: {error.message}",
                retryable=error.retryable,
                next_retry_delay=delay,
            ) from error
        return "".join(parts).strip() or "(no summary)"

    def _materialise(self, ref: RunRef, pending: tuple[PendingEntry, ...]) -> list[EntryRow]:
        """Turn pending entries into rows, reading referenced tool results from the store."""
        ids = [entry.tool_result_of for entry in pending if entry.tool_result_of]
        stored = self.store.get_tool_results(ref.partition_key, ref.run_id, ids)
        rows: list[EntryRow] = []
        for entry in pending:
            content = entry.content
            if entry.tool_result_of is not None:
                content = stored.get(
                    entry.tool_result_of, tool_error_content("tool result was lost")
                )
            rows.append(
                EntryRow(
                    entry_key=entry.key,
                    role=entry.role,
                    content=content or "",
                    tool_call_id=entry.tool_call_id,
                    tool_name=entry.tool_name,
                    error_kind=entry.error_kind.value if entry.error_kind else None,
                    run_id=ref.run_id,
                )
            )
        return rows

    async def _stream(
        self, provider: ModelProvider, request: ModelRequest, input: ModelCallInput, ref: RunRef
    ) -> ModelTurn:
        deltas = _DeltaBuffer(self, ref, input.turn, request.attempt)
        collector = TurnCollector(limit_bytes=input.result_limit_bytes)

        async def on_thinking(text: str) -> None:
            if ref.include_thinking_events:
                await deltas.add("thinking_delta", text)

        try:
            async with _heartbeating():
                turn = await collector.consume(
                    provider.stream(request),
                    lambda text: deltas.add("model_delta", text),
                    on_thinking,
                )
        except OutputLimitExceeded as error:
            raise failure(FailureCode.BUDGET_EXCEEDED, f"max_result_bytes: {error}") from error
        except ProviderError as error:
            delay = timedelta(seconds=error.retry_after) if error.retry_after else None
            raise failure(
                FailureCode.MODEL_ERROR,
                error.message,
                retryable=error.retryable,
                next_retry_delay=delay,
            ) from error
        finally:
            await deltas.flush()
        return turn

    # tools -------------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_RUN_TOOL)
    async def run_tool(self, input: ToolCallInput) -> ToolOutcome:
        ref, call = input.ref, input.call
        spec = self.config.tools.get(call.name) or self.memory_tools.get(call.name)
        info = activity.info()
        if spec is None:
            return ToolOutcome(
                tool_call_id=call.id,
                name=call.name,
                error_kind=ToolErrorKind.FATAL,
                error=f"tool '{call.name}' is not registered on this worker",
            )
        await self.emit(
            ref,
            {
                "type": "tool_started",
                "tool_call_id": call.id,
                "tool_name": call.name,
                "arguments": call.arguments[:EVENT_ARGUMENTS_CHARS],
            },
        )
        context = ToolContext(
            tool_call_id=call.id,
            tool_name=call.name,
            run_id=ref.run_id,
            root_run_id=ref.root_run_id,
            agent_id=ref.agent_id,
            session_id=ref.session_id,
            partition_key=ref.partition_key,
            idempotency_key=f"{ref.run_id}:{call.id}",
            attempt=info.attempt,
            metadata={MEMORY_POLICY_METADATA_KEY: await self._memory_policy(ref)},
        )
        kind, content = await self._invoke(
            spec.invoke, call.arguments, context, spec.timeout_seconds, spec.max_attempts
        )
        outcome = await self._store_tool_result(input, kind, valid_unicode(content))
        await self.emit(
            ref,
            {
                "type": "tool_completed",
                "tool_call_id": call.id,
                "tool_name": call.name,
                "error": outcome.error,
            },
        )
        return outcome

    async def _memory_policy(self, ref: RunRef) -> str:
        """The calling agent's memory policy, for tools (the seed passes it to every tool)."""
        snapshot = await self.snapshot(ref.snapshot_version)
        return snapshot.agent(ref.agent_id).memory.value

    async def _invoke(
        self,
        invoke: Callable[..., Any],
        arguments: str,
        context: ToolContext,
        timeout_seconds: float,
        max_attempts: int,
    ) -> tuple[ToolErrorKind | None, str]:
        """Run the tool; classified errors go back to the model, others retry then turn fatal."""
        try:
            async with _heartbeating():
                result = await asyncio.wait_for(invoke(arguments, context), timeout_seconds)
        except ToolError as error:
            return error.kind, tool_error_content(error.message)
        except TimeoutError:
            return ToolErrorKind.TIMED_OUT, tool_error_content(
                f"tool timed out after {timeout_seconds:g}s"
            )
        except Exception as error:
            if context.attempt < max_attempts:
                raise  # Temporal retries it; the tool got the same idempotency key
            return ToolErrorKind.FATAL, tool_error_content(f"{type(error).__name__}: {error}")
        return None, json.dumps(result, ensure_ascii=False)

    async def _store_tool_result(
        self, input: ToolCallInput, kind: ToolErrorKind | None, content: str
    ) -> ToolOutcome:
        ref, call = input.ref, input.call
        size = len(content.encode())
        error = json.loads(content).get("error") if kind is not None else None
        if size > input.result_limit_bytes:
            # The run ends (the seed's rule), but the result is kept for whoever investigates.
            artifact = await self._io(
                store_blob,
                self.store,
                ref,
                f"oversized result of tool call {call.id}",
                content.encode(),
                "application/json",
            )
            return ToolOutcome(
                tool_call_id=call.id,
                name=call.name,
                result_bytes=size,
                oversized=True,
                error=f"tool result of {size} bytes exceeds max_result_bytes "
                f"({input.result_limit_bytes}); stored as artifact {artifact.artifact_id}",
            )
        await self._io(
            self.store.put_tool_result,
            ref.partition_key,
            ref.run_id,
            call.id,
            tool_name=call.name,
            content=content,
            error_kind=kind.value if kind else None,
        )
        return ToolOutcome(
            tool_call_id=call.id, name=call.name, error_kind=kind, error=error, result_bytes=size
        )

    # finish ------------------------------------------------------------------------------

    # agent calls --------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_PREPARE_CALL)
    async def prepare_call(self, input: PrepareCallInput) -> CallPlan:
        """Check an agent call (the seed's order) and build the child's input; deny = raise."""
        async with _heartbeating():
            return await self._prepare_call(input)

    async def _prepare_call(self, input: PrepareCallInput) -> CallPlan:
        caller, request = input.caller, input.request
        await self.emit(
            caller,
            {"type": "agent_call_started", "call_id": input.call_id, "target": request.target},
        )
        try:
            return await self._check_call(input)
        except ApplicationError as error:
            await self.emit(
                caller,
                {
                    "type": "agent_call_completed",
                    "call_id": input.call_id,
                    "target": request.target,
                    "outcome": "failed",
                    "code": error.type,
                },
            )
            raise

    async def _check_call(self, input: PrepareCallInput) -> CallPlan:
        caller, request, limits = input.caller, input.request, input.limits
        snapshot = await self.snapshot(caller.snapshot_version)
        caller_agent = snapshot.agent(caller.agent_id)
        if not request.task.strip():
            raise failure(FailureCode.INVALID_CONFIGURATION, "Agent call task is required")
        context_bytes = (
            len(json.dumps(request.context).encode()) if request.context is not None else 0
        )
        if context_bytes > limits.max_context_transfer_bytes:
            raise failure(
                FailureCode.BUDGET_EXCEEDED, "max_context_transfer_bytes: context is too large"
            )
        target = snapshot.agents.get(request.target)
        if target is None:
            raise failure(FailureCode.AGENT_NOT_FOUND, f"agent '{request.target}' is not defined")
        if not (
            caller_agent.callable_agents.allows(target.id)
            and snapshot.policy.callable_agents.allows(target.id)
        ):
            raise failure(
                FailureCode.AGENT_CALL_DENIED,
                f"agent '{caller.agent_id}' may not call '{target.id}'",
            )
        if not snapshot.policy.allow_recursive_calls and target.id in input.ancestry:
            chain = " -> ".join((*input.ancestry, target.id))
            raise failure(FailureCode.AGENT_CALL_CYCLE, f"agent call cycle: {chain}")
        if caller.depth + 1 > limits.max_depth:
            raise failure(
                FailureCode.MAX_DEPTH_EXCEEDED, f"max_depth ({limits.max_depth}) would be exceeded"
            )
        await self._authorize(input, target)
        child_input = await self._child_input(input, target)
        return CallPlan(target_id=target.id, child_input=child_input)

    async def _authorize(self, input: PrepareCallInput, target: AgentDefinition) -> None:
        if self.authorizer is None:
            return
        caller = input.caller
        view = CallerView(
            run_id=caller.run_id,
            root_run_id=caller.root_run_id,
            agent_id=caller.agent_id,
            depth=caller.depth,
            partition_key=caller.partition_key,
            session_id=caller.session_id,
            ancestry=input.ancestry,
        )
        decision = self.authorizer(view, target, input.request)
        if inspect.isawaitable(decision):
            decision = await decision
        if not decision.allowed:
            raise failure(
                FailureCode.AGENT_CALL_DENIED,
                f"agent '{caller.agent_id}' may not call '{target.id}': {decision.reason}",
            )

    def _parent_session(self, caller: RunRef) -> tuple[list[EntryRow], str | None]:
        compaction = self.store.latest_compaction(caller.partition_key, caller.session_id)
        rows = self.store.load_entries(caller.partition_key, caller.session_id)
        return rows, compaction.summary if compaction else None

    async def _child_input(self, input: PrepareCallInput, target: AgentDefinition) -> str:
        caller, limit = input.caller, input.limits.max_context_transfer_bytes
        excerpt = None
        if target.context.kind != "explicit_only":
            rows, summary = await self._io(self._parent_session, caller)
            excerpt = parent_excerpt(rows, target.context, limit, summary)
        text = build_child_input(
            caller.agent_id, input.request.task, input.request.context, excerpt
        )
        if len(text.encode()) > limit:
            raise failure(
                FailureCode.BUDGET_EXCEEDED,
                f"max_context_transfer_bytes: the child's input is {len(text.encode())} bytes "
                f"(limit {limit})",
            )
        return text

    # finish ------------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_FINISH_RUN)
    async def finish_run(self, input: FinishRunInput) -> None:
        async with _heartbeating():
            await self._finish_run(input)

    async def _finish_run(self, input: FinishRunInput) -> None:
        ref = input.ref
        rows = await self._io(self._materialise, ref, input.pending)
        await self.emit(ref, *_call_completed_events(input.pending))
        await self._io(self.store.append_entries, ref.partition_key, ref.session_id, rows)
        if input.release_session:
            await self._io(
                self.store.release_session, ref.partition_key, ref.session_id, ref.run_id
            )
        if input.record is not None:
            await self._io(self.store.upsert_run_record, input.record)
            await self._io(self._store_call_result, input.record)
        await self.emit(ref, _terminal_event(input))
        if input.record is not None:
            await self._announce_to_caller(ref, input.record)

    async def _announce_to_caller(self, ref: RunRef, record: RunRecord) -> None:
        """`agent_call_completed` in the caller's name, the moment the child has ended (the
        caller itself may be waiting for other children, or be a trusted call's client)."""
        if record.parent_run_id is None or record.agent_call_id is None:
            return
        try:
            caller = await asyncio.to_thread(
                self.store.get_run_record, ref.partition_key, record.parent_run_id
            )
        except Exception as error:  # observation only
            activity.logger.warning("caller record read failed: %s", error)
            return
        if caller is None:
            return
        caller_ref = ref.model_copy(
            update={
                "run_id": caller.run_id,
                "parent_run_id": caller.parent_run_id,
                "agent_call_id": caller.agent_call_id,
                "agent_id": caller.agent_id,
                "depth": caller.depth,
                "session_id": caller.session_id or "",
            }
        )
        await self.emit(
            caller_ref,
            {
                "type": "agent_call_completed",
                "call_id": record.agent_call_id,
                "target": record.agent_id,
                "outcome": OUTCOME_FOR_STATUS[record.status].value,
                "child_run_id": record.run_id,
            },
        )

    def _store_call_result(self, record: RunRecord) -> None:
        """A child stores the `agent.call` result its caller will read, so that the result (up
        to max_result_bytes) reaches the caller's model by reference, not through history."""
        if record.parent_run_id is None or record.agent_call_id is None:
            return
        result = AgentCallResult(
            call_id=record.agent_call_id,
            target=record.agent_id,
            run_id=record.run_id,
            outcome=OUTCOME_FOR_STATUS[record.status],
            failure=record.failure,
            # The caller's model reads the value (bounded by max_result_bytes), not a reference.
            output=self.store.resolve_output(record.output) if record.output else None,
            usage=record.usage,
        )
        self.store.put_tool_result(
            record.partition_key,
            record.parent_run_id,
            record.agent_call_id,
            tool_name=AGENT_CALL_TOOL,
            content=result.model_dump_json(exclude_none=True),
            error_kind=None,
        )


class _DeltaBuffer:
    """Batches stream deltas into few event writes; each carries the activity attempt."""

    def __init__(self, owner: AgentActivities, ref: RunRef, turn: int, attempt: int) -> None:
        self.owner, self.ref, self.turn, self.attempt = owner, ref, turn, attempt
        self.parts: list[tuple[str, str]] = []
        # The first delta goes out at once (first-token latency); later ones are batched.
        self.last_flush = float("-inf")

    async def add(self, kind: str, text: str) -> None:
        if self.parts and self.parts[-1][0] == kind:
            self.parts[-1] = (kind, self.parts[-1][1] + text)
        else:
            self.parts.append((kind, text))
        if time.monotonic() - self.last_flush >= DELTA_FLUSH_SECONDS:
            await self.flush()

    async def flush(self) -> None:
        parts, self.parts = self.parts, []
        self.last_flush = time.monotonic()
        if parts:
            await self.owner.emit(
                self.ref,
                *(
                    {"type": kind, "content": text, "turn": self.turn, "attempt": self.attempt}
                    for kind, text in parts
                ),
            )


def _heartbeat_if_running() -> None:
    """Heartbeat when called inside an activity (store helpers also run in tests directly)."""
    with contextlib.suppress(RuntimeError):
        activity.heartbeat()


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[None]:
    """Heartbeat while the body runs, so cancellation reaches it and stalls are detected."""

    async def beat() -> None:
        while True:
            _heartbeat_if_running()
            await asyncio.sleep(HEARTBEAT_EVERY_SECONDS)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


OUTCOME_FOR_STATUS = {
    RunStatus.COMPLETED: RunOutcome.COMPLETED,
    RunStatus.FAILED: RunOutcome.FAILED,
    RunStatus.CANCELLED: RunOutcome.CANCELLED,
    RunStatus.TIMED_OUT: RunOutcome.TIMED_OUT,
    RunStatus.BUDGET_EXCEEDED: RunOutcome.BUDGET_EXCEEDED,
}


def _running_record(input: PrepareRunInput, agent_version: int) -> RunRecord:
    ref = input.ref
    return RunRecord(
        run_id=ref.run_id,
        root_run_id=ref.root_run_id,
        parent_run_id=ref.parent_run_id,
        agent_call_id=ref.agent_call_id,
        agent_id=ref.agent_id,
        agent_definition_version=agent_version,
        session_id=ref.session_id,
        partition_key=ref.partition_key,
        status=RunStatus.RUNNING,
        depth=ref.depth,
        started_at=datetime.now(UTC),
        metadata=input.request.metadata,
    )


def _offered_tools(
    snapshot: RuntimeSnapshot, agent: AgentDefinition, memory_tools: MemoryTools
) -> list[dict[str, Any]]:
    """What the model sees: allowed tools, memory tools, `agent.call` if anyone is reachable."""
    names = snapshot.tool_names_for(agent)
    tools = tool_definitions(snapshot, names) + memory_tools.definitions(names)
    reachable = snapshot.reachable_agents(agent)
    if reachable:
        tools.append(agent_call_tool_definition(reachable))
    return tools


def _with_output(turn: ModelTurn, input: ModelCallInput) -> ModelTurn:
    """Apply the run's result contract to a final answer."""
    if turn.tool_calls:
        return turn
    output, problem = apply_result_contract(turn.content, input.result_contract)
    return turn.model_copy(update={"output": output, "output_error": problem})


def _visible(ref: RunRef, body: dict[str, Any]) -> bool:
    """The seed's visibility rule: it filters descendants' events only."""
    if ref.depth == 0 or ref.event_visibility == "all":
        return True
    return ref.event_visibility == "lifecycle_only" and body.get("type") in LIFECYCLE_EVENTS


def _model_started(turn: int, attempt: int) -> dict[str, Any]:
    """A retry's deltas replace the earlier attempts' text of the same turn: say so."""
    event: dict[str, Any] = {"type": "model_started", "turn": turn, "attempt": attempt}
    if attempt > 1:
        event["supersedes_attempt"] = attempt - 1
    return event


def _call_completed_events(pending: tuple[PendingEntry, ...]) -> list[dict[str, Any]]:
    """`agent_call_completed` for child results that reached this run inline.

    A child that stores its result for the caller announces the completion itself (see
    `_announce_to_caller`); a refused call was announced by `prepare_call`. What is left are
    results of children that never stored theirs (runs that began before results went by
    reference, or a child that could not start).
    """
    events: list[dict[str, Any]] = []
    for entry in pending:
        if entry.tool_name != AGENT_CALL_TOOL or entry.tool_result_of is not None:
            continue
        try:
            result = json.loads(entry.content or "")
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict) and "outcome" in result and result.get("run_id"):
            events.append(
                {
                    "type": "agent_call_completed",
                    "call_id": result.get("call_id"),
                    "target": result.get("target"),
                    "outcome": result.get("outcome"),
                    "child_run_id": result.get("run_id"),
                }
            )
    return events


def _max_iterations(agent_limit: int | None, limits: RuntimeLimits) -> int:
    return min(agent_limit or limits.max_iterations_per_run, limits.max_iterations_per_run)


def _run_timeout(agent_millis: int | None, limits: RuntimeLimits, *, root: bool) -> timedelta:
    timeout = min(limits.run_timeout, limits.root_timeout) if root else limits.run_timeout
    if agent_millis is not None:
        timeout = min(timeout, timedelta(milliseconds=agent_millis))
    return timeout


def _usage(turn: ModelTurn) -> dict[str, Any]:
    return {
        "input_tokens": turn.input_tokens,
        "output_tokens": turn.output_tokens,
        "total_tokens": turn.total_tokens,
    }


def _assistant_row(key: str, ref: RunRef, turn: ModelTurn) -> EntryRow:
    return EntryRow(
        entry_key=key,
        role="assistant",
        content=turn.content,
        tool_calls=wire_tool_calls(turn.tool_calls) or None,
        usage={**_usage(turn), "finish_reason": turn.finish_reason},
        run_id=ref.run_id,
    )


def _terminal_event(input: FinishRunInput) -> dict[str, Any]:
    if input.status is RunStatus.COMPLETED:
        return {"type": "run_completed"}
    if input.status is RunStatus.CANCELLED:
        return {"type": "run_cancelled"}
    return {
        "type": "run_failed",
        "status": input.status.value,
        "failure": input.failure.model_dump(mode="json") if input.failure else None,
    }
