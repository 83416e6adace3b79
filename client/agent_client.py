"""`AgentClient`: start, follow, message, cancel and inspect agent runs.

Roots start through Temporal by idempotency key: the workflow id is derived from (partition,
key), Temporal refuses a second start of a running or finished id, and a memo with the request's
fingerprint lets us tell "the same request again" (return the same run) from "a different request
with a reused key" (`IdempotencyConflictError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, overload

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from otherone import search_attributes as attrs
from otherone.client.approval_requests import (
    approval_decision,
    decide_in_tree,
    open_requests_in_store,
    open_requests_of_runs,
    runs_waiting,
    send_decision,
)

# Part of this module's API (`otherone.client.build_request`, `.root_run_id`, `.RunHandle`, ...),
# defined in the modules below: served from here too.
from otherone.client.event_polling import BUSY_SECONDS as BUSY_SECONDS
from otherone.client.event_polling import poll_events
from otherone.client.request_checks import MAX_MESSAGES_PER_SIGNAL as MAX_MESSAGES_PER_SIGNAL
from otherone.client.request_checks import build_request as build_request
from otherone.client.request_checks import (
    check_against_config,
    check_input_size,
    check_root_run_id,
    validate_messages,
)
from otherone.client.root_starts import (
    check_session_free,
    keep_fingerprint,
    keyed_run,
    legacy_run,
    root_search_attributes,
    start_details,
    start_summary,
    with_session_id,
)
from otherone.client.root_starts import legacy_root_run_id as legacy_root_run_id
from otherone.client.root_starts import root_run_id as root_run_id
from otherone.client.run_handles import RunHandle as RunHandle
from otherone.client.run_handles import TypedRunHandle as TypedRunHandle
from otherone.client.run_results import (
    as_ended,
    forgotten_run,
    is_stuck,
    not_found_or,
    original_memo,
    original_result,
    record_from_result,
    result_from_record,
    result_of_broken_run,
    shown_execution,
    stored_record,
    stuck_record,
    task_failing,
    unanswered_update,
    with_stored_record,
)
from otherone.client.store_answers import answered
from otherone.client.typed_results import OutputT, output_adapter, typed_request
from otherone.errors import (
    IdempotencyConflictError,
    InvalidRequestError,
    RunNotActiveError,
    RunNotFoundError,
    UnavailableError,
)
from otherone.part_storage import store_parts, store_request_parts
from otherone.partitions import DEFAULT_PARTITION
from otherone.parts import DEFAULT_MAX_PART_BYTES, MessageToSend, QueuedMessage, TextPart
from otherone.result_contracts import check_contract
from otherone.runs import (
    PARTITION_PATTERN,
    AgentCallRequest,
    AgentCallResult,
    AgentOutput,
    AgentRunRequest,
    AgentRunResult,
    ForkOrigin,
    RunRecord,
)
from otherone.workflow_names import (
    MEMO_FINGERPRINT,
    MEMO_IDEMPOTENCY_KEY,
    QUERY_RECORD,
    SIGNAL_USER_MESSAGES,
    UPDATE_CALL_AGENT,
    WORKFLOW_NAME,
)

# The CLI imports this module: SQLAlchemy and the config models are not needed, and the contract
# models are imported by the methods that send or read one (`otherone show` builds none of them).
if TYPE_CHECKING:
    from otherone.client.forks import ForkHandle
    from otherone.config import RuntimeConfig
    from otherone.contracts import ApprovalRequest, EventRecord
    from otherone.store import Store

DEFAULT_TASK_QUEUE = "otherone"
QUERY_TIMEOUT = timedelta(seconds=10)
_EPOCH = datetime.fromtimestamp(0, UTC)


class AgentClient:
    """Client API of Otherone. ``store`` is needed to read events and large outputs.

    ``partition_key`` scopes the client to one tenant (e.g. one per request of a multi-tenant
    API): it starts runs of that partition only, and a run of another partition is reported as
    not found by every call (results, records, trees, events, messages, cancellation), so a
    leaked or guessed run id reveals nothing. Unscoped (None), the client is an operator's.

    ``identity`` is who its approval decisions are made as (what a request's ``approvers``
    name); default: the Temporal client's identity.
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str = DEFAULT_TASK_QUEUE,
        store: Store | None = None,
        partition_key: str | None = None,
        config: RuntimeConfig | None = None,
        legacy_run_ids: bool = True,
        identity: str | None = None,
        max_part_bytes: int = DEFAULT_MAX_PART_BYTES,
    ) -> None:
        if partition_key is not None and not re.fullmatch(PARTITION_PATTERN, partition_key):
            raise InvalidRequestError(
                "must be 1-128 letters, digits or _.:@- (starting with a letter or digit)",
                field="partition_key",
            )
        self.temporal = client
        self.task_queue = task_queue
        self.store = store
        self.partition_key = partition_key
        #: The workers' configuration, when the client knows it: requests for an agent it does
        #: not define, or with limits above its own, are refused before anything starts.
        self.config = config
        #: Look for a key's run under the id formula before readable ids first (one describe
        #: per keyed start), so a key whose run an earlier version started joins that run.
        #: Turn off once no such run is left within the namespace's retention.
        self.legacy_run_ids = legacy_run_ids
        self.identity = identity
        #: The most bytes an image or file part may have (`otherone.parts`).
        self.max_part_bytes = max_part_bytes

    # starting ----------------------------------------------------------------------------

    @overload
    async def run(
        self, request: AgentRunRequest, *, output_type: None = None
    ) -> AgentRunResult: ...

    @overload
    async def run(self, request: AgentRunRequest, *, output_type: type[OutputT]) -> OutputT: ...

    async def run(self, request: AgentRunRequest, *, output_type: Any = None) -> Any:
        """Start (or join, by idempotency key) a root run and wait for its result.

        With ``output_type`` (a pydantic model, or e.g. ``list[Model]``) the run must answer
        JSON valid for the type's JSON Schema, and the validated value is returned instead
        (`RunFailedError` when the run did not complete, `OutputValidationError` when pydantic
        refuses the value)."""
        if output_type is None:
            return await (await self.start(request)).result()
        return await (await self.start(request, output_type=output_type)).output()

    @overload
    async def start(self, request: AgentRunRequest, *, output_type: None = None) -> RunHandle: ...

    @overload
    async def start(
        self, request: AgentRunRequest, *, output_type: type[OutputT]
    ) -> TypedRunHandle[OutputT]: ...

    async def start(self, request: AgentRunRequest, *, output_type: Any = None) -> RunHandle:
        """Start a root run; the same idempotency key returns the same run. With
        ``output_type``, the handle's `output()` gives the validated value (see `run`)."""
        if output_type is None:
            return RunHandle(self, await self._start(request))
        adapter = output_adapter(output_type)
        run_id = await self._start(typed_request(request, adapter))
        return TypedRunHandle(self, run_id, adapter)

    async def fork(
        self,
        run_id: str,
        *,
        at_turn: int,
        input: str | None = None,
        definition: Literal["original", "current"] = "original",
    ) -> ForkHandle:
        """Fork root run ``run_id`` at turn ``at_turn``: a new root run in a new session that
        shares the original's turns before it and runs that turn again, with its own user
        message or ``input`` instead, under the original's definitions (``definition=
        "current"``: the workers' current ones). Needs a store. See `otherone.client.forks`."""
        from otherone.client.forks import fork_run

        return await fork_run(self, run_id, at_turn=at_turn, input=input, definition=definition)

    async def start_fork(
        self, request: AgentRunRequest, origin: ForkOrigin, snapshot_version: str | None
    ) -> str:
        """Start the root of a fork (`otherone.client.forks`): ``request`` names the fork's
        session, which already shares the original's turns. Its run id."""
        return await self._start(request, origin, snapshot_version)

    async def _start(
        self,
        request: AgentRunRequest,
        forked_from: ForkOrigin | None = None,
        snapshot_version: str | None = None,
    ) -> str:
        from otherone.contracts import RunInput

        partition = request.runtime_context.partition_key
        if self.partition_key is not None and partition != self.partition_key:
            raise InvalidRequestError(
                f"this client is scoped to partition '{self.partition_key}'",
                field="runtime_context.partition_key",
            )
        run_id = root_run_id(request)
        check_contract(request.result_contract)
        check_input_size(request)
        check_against_config(request, self.config)
        # Bytes are stored (or refused) once the request is known good: the run's input, and
        # its fingerprint, hold references only (the same image is the same reference).
        request = await asyncio.to_thread(
            store_request_parts, self.store, request, max_bytes=self.max_part_bytes
        )
        fingerprint = request.fingerprint()
        key = request.idempotency_key
        if key is not None:
            known = await keyed_run(self.store, partition, run_id)
            if known is not None:  # the key was used: never a new run under its id
                await self._join_known(partition, run_id, key, fingerprint, known.fingerprint)
                return run_id
        legacy = await self._legacy_run(request, fingerprint)
        if legacy is not None:
            return legacy
        await check_session_free(self.store, request, run_id, self._holds_its_lease)
        request = with_session_id(request)  # after the fingerprint: no part of it
        # A key used before (finished run) is refused; the fingerprint check below decides.
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self.temporal.start_workflow(
                WORKFLOW_NAME,
                RunInput(
                    run_id=run_id,
                    root_run_id=run_id,
                    request=request,
                    forked_from=forked_from,
                    snapshot_version=snapshot_version,
                ),
                id=run_id,
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                memo={MEMO_FINGERPRINT: fingerprint, MEMO_IDEMPOTENCY_KEY: request.idempotency_key},
                search_attributes=root_search_attributes(request, forked_from),
                static_summary=start_summary(request),
                static_details=start_details(request, self.config),
            )
        if key is not None:
            await self._check_fingerprint(run_id, key, fingerprint)
            await keep_fingerprint(self.store, partition, run_id, fingerprint)
        return run_id

    async def _legacy_run(self, request: AgentRunRequest, fingerprint: str) -> str | None:
        """The key's run when an earlier version started it under `legacy_root_run_id` (the
        start joins it, or raises `IdempotencyConflictError`), else None. The store answers
        first, as for a new id: such a run predates kept fingerprints, so once Temporal no
        longer keeps it only its record says the key was used (a second run under the new id
        would start otherwise); while Temporal keeps it, its memo decides and the fingerprint
        is kept for later."""
        key = request.idempotency_key
        legacy = legacy_root_run_id(request) if self.legacy_run_ids else None
        if key is None or legacy is None:
            return None
        partition = request.runtime_context.partition_key
        known = await keyed_run(self.store, partition, legacy)
        if known is not None:
            await self._join_known(partition, legacy, key, fingerprint, known.fingerprint)
            return legacy
        if await legacy_run(self.temporal, request) is None:
            return None
        await self._check_fingerprint(legacy, key, fingerprint)
        await keep_fingerprint(self.store, partition, legacy, fingerprint)
        return legacy

    async def _join_known(
        self, partition: str, run_id: str, key: str, fingerprint: str, kept: str | None
    ) -> None:
        """A start of a key the store knows, answered without starting anything: by the
        fingerprint kept for it, else (only its run's record is kept) by Temporal's memo while
        Temporal keeps the run; a run Temporal no longer keeps, whose request cannot be
        compared, is a conflict (a new run under its id is never started)."""
        if kept is not None:
            if kept != fingerprint:
                raise IdempotencyConflictError(key, run_id)
            return
        try:
            await self._check_fingerprint(run_id, key, fingerprint)
        except RunNotFoundError:
            raise IdempotencyConflictError(key, run_id) from None
        await keep_fingerprint(self.store, partition, run_id, fingerprint)

    async def _check_fingerprint(self, run_id: str, key: str, fingerprint: str) -> None:
        memo = await original_memo(self.temporal, run_id, await self._describe(run_id))
        if memo.get(MEMO_FINGERPRINT) != fingerprint:
            raise IdempotencyConflictError(key, run_id)

    def handle(self, run_id: str) -> RunHandle:
        return RunHandle(self, run_id)

    # following ---------------------------------------------------------------------------

    async def result(self, run_id: str) -> AgentRunResult:
        """The run's result (waits while it runs). Terminated runs become failed results. A
        run Temporal no longer keeps (namespace retention) is answered from its record in the
        store, when the client has one."""
        try:
            return await self._temporal_result(run_id)
        except RunNotFoundError:
            stored = await forgotten_run(self.store, self.partition_key, run_id)
            if stored is None:
                raise
        result = result_from_record(stored)
        return result.model_copy(update={"output": await self.resolve_output(result.output)})

    async def _temporal_result(self, run_id: str) -> AgentRunResult:
        await self._check_tenant(run_id)
        try:
            latest = await self._workflow(run_id).result()
            result = await original_result(self.temporal, run_id, latest)
        except WorkflowFailureError as error:
            return result_of_broken_run(run_id, error)
        except RPCError as error:
            raise not_found_or(error, run_id) from None
        return result.model_copy(update={"output": await self.resolve_output(result.output)})

    async def resolve_output(self, output: AgentOutput | None) -> AgentOutput | None:
        """An output with its value: outputs over the runtime policy's `inline_payload_bytes`
        travel through Temporal as an artifact reference and are read back from the store here
        (without a store the reference is returned as it is)."""
        if output is None or not output.is_reference or self.store is None:
            return output
        assert output.artifact is not None
        if self.partition_key not in (None, output.artifact.partition_key):
            return output  # a scoped client reads its own tenant's artifacts only
        return await answered(self.store.resolve_output, output)

    async def get_run(self, run_id: str) -> RunRecord:
        """The run's current record: live from the workflow, or built from its result; the
        store's for a run Temporal no longer keeps (namespace retention)."""
        try:
            description = await self.describe_run(run_id)
        except RunNotFoundError:
            stored = await forgotten_run(self.store, self.partition_key, run_id)
            if stored is None:
                raise
            return stored.model_copy(update={"output": await self.resolve_output(stored.output)})
        if description.status == WorkflowExecutionStatus.RUNNING:
            record = await self._live_record(run_id, description)
            return record.model_copy(update={"output": await self.resolve_output(record.output)})
        result = await self.result(run_id)
        # The execution the result is of: a later execution of the id was refused and is not
        # the run (`RunRecord.execution_id` says which one is shown).
        shown = await shown_execution(self.temporal, run_id, description)
        ended = record_from_result(result, shown)
        if result.agent_id:  # our structured result: the record needs no store (`show` opens
            return ended  # none unless its output is an artifact)
        # Ended without returning one (terminated from outside): the store's, Temporal's end.
        stored = await stored_record(self.store, ended.partition_key, run_id)
        return with_stored_record(ended, stored)

    async def _live_record(
        self, run_id: str, description: WorkflowExecutionDescription
    ) -> RunRecord:
        """A running run's record, by query; as the store has it when the run's workflow task
        keeps failing (a worker whose code cannot replay it: `stuck_record`)."""
        try:
            record: RunRecord = await self._workflow(run_id).query(
                QUERY_RECORD, result_type=RunRecord, rpc_timeout=QUERY_TIMEOUT
            )
            return record
        except WorkflowQueryFailedError as error:  # a worker that cannot replay it answered
            return await stuck_record(self.store, description, run_id, str(error))
        except RPCError as error:
            if is_stuck(error):
                return await stuck_record(self.store, description, run_id, error.message)
            if error.status not in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
                raise
        if task_failing(await self._describe(run_id)):
            reason = "no worker could answer a query"
            return await stuck_record(self.store, description, run_id, reason)
        queue = description.task_queue or self.task_queue  # the run's, maybe not this client's
        raise UnavailableError(
            f"run '{run_id}' is running but no worker answered within "
            f"{QUERY_TIMEOUT.total_seconds():g}s (is a worker polling '{queue}'?)"
        )

    async def describe_run(self, run_id: str) -> WorkflowExecutionDescription:
        """Temporal's description of a run (status, root, times) without asking a worker;
        `RunNotFoundError` for unknown runs and, on a scoped client, other partitions' runs."""
        description = await self._describe(run_id)
        self._check_partition(run_id, description)
        return description

    async def events(
        self,
        run_id: str,
        *,
        after: int = 0,
        poll_seconds: float = 0.05,
        busy_poll_seconds: float = 0.01,
    ) -> AsyncIterator[EventRecord]:
        """Events of the run's tree from ``after`` on, until the run has ended.

        The store is polled every ``busy_poll_seconds`` for `BUSY_SECONDS` after events came
        (a run at work: the next model call's first delta is seconds away at most), else every
        ``poll_seconds``."""
        if self.store is None:
            raise InvalidRequestError("AgentClient needs a store to read events", field="store")
        if self.partition_key is not None:
            await self.check_visible(run_id)  # a run Temporal forgot: while the store has it
        polling = poll_events(
            self.store,
            run_id,
            partition_key=self.partition_key,
            after=after,
            is_running=self._is_running_or_forgotten,
            poll_seconds=poll_seconds,
            busy_poll_seconds=busy_poll_seconds,
        )
        async with contextlib.aclosing(polling):
            async for event in polling:
                yield event

    async def list_run_tree(self, root_run_id: str) -> list[RunRecord]:
        """Every run of a root's tree (root first, then by depth and start), from any process.

        Lineage comes from Temporal's own `RootWorkflowId`; each record is then read like
        `get_run` (live query for running runs, the result for finished ones).
        """
        check_root_run_id(root_run_id)
        try:
            await self._check_tenant(root_run_id)
        except RunNotFoundError:
            return await self._stored_tree(root_run_id)
        # Runs only: a root's completion webhook is delivered by a workflow of its tree too.
        query = f'RootWorkflowId = "{root_run_id}" AND WorkflowType = "{WORKFLOW_NAME}"'
        if self.partition_key is not None:
            query += f' AND {attrs.PARTITION.name} = "{self.partition_key}"'
        ids = [execution.id async for execution in self.temporal.list_workflows(query)]
        if root_run_id not in ids:
            if self.partition_key is None:  # (a scoped client's `_check_tenant` described it)
                try:
                    await self._describe(root_run_id)
                except RunNotFoundError:
                    return await self._stored_tree(root_run_id)
            ids.insert(0, root_run_id)  # visibility may lag a fresh start; describe is exact
        records = await asyncio.gather(*(self.get_run(run_id) for run_id in dict.fromkeys(ids)))
        return sorted(
            records, key=lambda record: (record.depth, record.started_at or _EPOCH, record.run_id)
        )

    async def _stored_tree(self, root_run_id: str) -> list[RunRecord]:
        """The tree of a root Temporal no longer keeps, as the store keeps its records
        (`RunNotFoundError` when it keeps none)."""
        root = await forgotten_run(self.store, self.partition_key, root_run_id)
        if root is None or self.store is None:
            raise RunNotFoundError(root_run_id)
        stored = await answered(self.store.list_run_records, root.partition_key, root.run_id)
        found = [root, *(as_ended(record) for record in stored if record.run_id != root.run_id)]
        records = [
            record.model_copy(update={"output": await self.resolve_output(record.output)})
            for record in found
        ]
        return sorted(
            records, key=lambda record: (record.depth, record.started_at or _EPOCH, record.run_id)
        )

    async def call_agent(
        self, caller_run_id: str, call_id: str, request: AgentCallRequest
    ) -> AgentCallResult:
        """Ask a running run to call an agent (trusted); the same call id gives the same result."""
        from otherone.contracts import CallAgentInput

        check_contract(request.result_contract, field="request.result_contract")
        await self._check_tenant(caller_run_id)
        if any(not isinstance(p, TextPart) and not p.is_stored for p in request.parts):
            partition = await self._partition_of(caller_run_id)
            parts = await asyncio.to_thread(
                store_parts,
                self.store,
                partition,
                request.parts,
                "request.parts",
                max_bytes=self.max_part_bytes,
            )
            request = request.model_copy(update={"parts": parts})
        update = CallAgentInput(call_id=call_id, request=request)
        try:
            result: AgentCallResult = await self._workflow(caller_run_id).execute_update(
                UPDATE_CALL_AGENT, update, id=f"call-{call_id}", result_type=AgentCallResult
            )
        except WorkflowUpdateFailedError:
            raise RunNotActiveError(caller_run_id) from None
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            message = f"the call '{call_id}' did not answer in time; call again"
            raise unanswered_update(message) from None
        except RPCError as error:
            raise not_found_or(error, caller_run_id, finished=True) from None
        return result.model_copy(update={"output": await self.resolve_output(result.output)})

    # people in the loop -------------------------------------------------------------------

    async def approve(
        self, run_id: str, call_id: str, arguments: dict[str, Any] | None = None
    ) -> ApprovalRequest:
        """Let a tool call that waits for approval run (with ``arguments`` instead of the
        model's, when given: they are checked against the tool's schema first)."""
        return await self._decide(run_id, call_id, decision="approve", arguments=arguments)

    async def deny(self, run_id: str, call_id: str, reason: str) -> ApprovalRequest:
        """Refuse a tool call that waits for approval; the model reads the reason."""
        return await self._decide(run_id, call_id, decision="deny", reason=reason)

    async def answer(self, run_id: str, call_id: str, text: str) -> ApprovalRequest:
        """Answer a `human.ask` question; the answer is the tool result the model reads."""
        return await self._decide(run_id, call_id, decision="answer", text=text)

    async def _decide(self, run_id: str, call_id: str, **fields: Any) -> ApprovalRequest:
        """Send a decision by the run's `decide_approval` update, as this client's identity
        (``identity``, else the Temporal client's)."""
        decision = approval_decision(call_id, self.identity or self.temporal.identity, fields)
        try:
            await self._check_tenant(run_id)
            return await decide_in_tree(
                lambda run: send_decision(self._workflow(run), run, decision, self.task_queue),
                self.pending_approvals,
                run_id,
            )
        except RunNotFoundError as error:
            raise await self._ended_or(error, run_id) from None

    async def pending_approvals(self, root_run_id: str | None = None) -> list[ApprovalRequest]:
        """Every open approval request and question of a root's tree (of every tree when
        None), oldest first, from any process: Temporal visibility finds the runs that wait for
        a person, the store's events (or, without a store, the runs themselves) say what they
        wait for. Any run of a tree names it; an unknown run is `RunNotFoundError`. A scoped
        client sees its own partition only."""
        if root_run_id is not None:
            check_root_run_id(root_run_id)
            # An unknown run is "not found", not "nothing waits"; a child's id names its tree.
            description = await self._describe(root_run_id)
            self._check_partition(root_run_id, description)
            root_run_id = description.root_id or root_run_id
        waiting = await runs_waiting(self.temporal, root_run_id, self.partition_key)
        if not waiting:
            return []
        if self.store is not None:
            found = await answered(open_requests_in_store, self.store, self.partition_key, waiting)
        else:
            found = await open_requests_of_runs(self._workflow, list(waiting), QUERY_TIMEOUT)
        return sorted(found, key=lambda request: (request.requested_at, request.call_id))

    # steering ----------------------------------------------------------------------------

    async def send_message(self, run_id: str, messages: str | Sequence[MessageToSend]) -> None:
        """Queue user messages for a running run (taken at its next safe point). A message is
        text or a tuple of parts (`otherone.parts`), whose images and files are stored in the
        run's partition first (`store_parts`): the signal carries references only."""
        from otherone.contracts import UserMessages

        batch: tuple[QueuedMessage, ...] = (
            (messages,)
            if isinstance(messages, str)
            else tuple(m if isinstance(m, str) else _as_parts(m) for m in messages)
        )
        validate_messages(batch)
        try:
            await self._check_tenant(run_id)
            batch = await self._with_stored_parts(run_id, batch)
            signal = self._workflow(run_id).signal
            await signal(SIGNAL_USER_MESSAGES, UserMessages(messages=batch))
        except RPCError as error:
            found = not_found_or(error, run_id, finished=True)
            if isinstance(found, RunNotFoundError):
                raise await self._ended_or(found, run_id) from None
            raise found from None
        except RunNotFoundError as error:
            raise await self._ended_or(error, run_id) from None

    async def _with_stored_parts(
        self, run_id: str, batch: tuple[QueuedMessage, ...]
    ) -> tuple[QueuedMessage, ...]:
        """``batch`` with its parts' bytes stored in the partition of run ``run_id``."""
        if all(isinstance(message, str) for message in batch):
            return batch
        partition = await self._partition_of(run_id)
        stored: list[QueuedMessage] = []
        for index, message in enumerate(batch):
            if isinstance(message, str):
                stored.append(message)
                continue
            stored.append(
                await asyncio.to_thread(
                    store_parts,
                    self.store,
                    partition,
                    message,
                    f"messages.{index}",
                    max_bytes=self.max_part_bytes,
                )
            )
        return tuple(stored)

    async def _partition_of(self, run_id: str) -> str:
        """The partition of run ``run_id`` (its search attribute): where its parts are read."""
        described = await self._describe(run_id)
        return described.typed_search_attributes.get(attrs.PARTITION) or DEFAULT_PARTITION

    async def cancel(self, run_id: str) -> None:
        """Cancel the run (and, through Temporal, its descendants); it ends `cancelled`."""
        # The server accepts a cancel request for a closed workflow as a no-op: say so instead.
        try:
            await self._check_tenant(run_id)
            if not await self._is_running(run_id):
                raise RunNotActiveError(run_id)
            await self._workflow(run_id).cancel()
        except RPCError as error:
            found = not_found_or(error, run_id, finished=True)
            if isinstance(found, RunNotFoundError):
                raise await self._ended_or(found, run_id) from None
            raise found from None
        except RunNotFoundError as error:
            raise await self._ended_or(error, run_id) from None

    async def _ended_or(self, error: RunNotFoundError, run_id: str) -> Exception:
        """A run Temporal does not know: ended, as its record says, when the store keeps one
        (Temporal forgot the run: namespace retention), else ``error`` (not found)."""
        stored = await forgotten_run(self.store, self.partition_key, run_id)
        return error if stored is None else RunNotActiveError(run_id, stored.status.value)

    # internals ---------------------------------------------------------------------------

    def _workflow(self, run_id: str) -> WorkflowHandle[Any, AgentRunResult]:
        if not isinstance(run_id, str) or not run_id.strip():
            # Temporal would answer with a bare INVALID_ARGUMENT ("WorkflowId is not set").
            raise InvalidRequestError("must be a non-empty run id", field="run_id")
        return self.temporal.get_workflow_handle(run_id, result_type=AgentRunResult)

    async def check_visible(self, run_id: str) -> None:
        """`RunNotFoundError` unless ``run_id`` exists and, for a scoped client, belongs to its
        partition (without querying the workflow, so no worker is needed); a run Temporal no
        longer keeps exists while the store keeps its record."""
        try:
            self._check_partition(run_id, await self._describe(run_id))
        except RunNotFoundError:
            if await forgotten_run(self.store, self.partition_key, run_id) is None:
                raise

    async def _check_tenant(self, run_id: str) -> None:
        """A scoped client treats runs of other partitions as absent."""
        if self.partition_key is not None:
            self._check_partition(run_id, await self._describe(run_id))

    def _check_partition(self, run_id: str, description: WorkflowExecutionDescription) -> None:
        if self.partition_key is None:
            return
        # No Partition attribute: not one of our runs (any workflow of the namespace could be
        # asked for by id), so never one of this tenant's.
        if description.typed_search_attributes.get(attrs.PARTITION) != self.partition_key:
            raise RunNotFoundError(run_id)

    async def _describe(self, run_id: str) -> WorkflowExecutionDescription:
        try:
            return await self._workflow(run_id).describe()
        except RPCError as error:
            raise not_found_or(error, run_id) from None

    async def _holds_its_lease(self, run_id: str) -> bool:
        """Whether a session's lease holder still runs (an unknown one does not: retention)."""
        try:
            return await self._is_running(run_id)
        except RunNotFoundError:
            return False

    async def _is_running_or_forgotten(self, run_id: str) -> bool:
        """`_is_running`; False for a run Temporal forgot whose record the store keeps."""
        try:
            return await self._is_running(run_id)
        except RunNotFoundError:
            if await forgotten_run(self.store, self.partition_key, run_id) is None:
                raise
            return False

    async def _is_running(self, run_id: str) -> bool:
        description = await self._describe(run_id)
        return description.status == WorkflowExecutionStatus.RUNNING


def _as_parts(message: object) -> Any:
    """A message of parts as a tuple; anything else as it came, for `validate_messages` to
    refuse naming the message (an int is no message: a typed error, not a traceback)."""
    return tuple(message) if isinstance(message, list | tuple) else message
