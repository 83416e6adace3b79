"""The spawned calls of one run and how their ends reach it (`otherone.workflows.spawns`: the
tools and the run's end built on this).

A child's end arrives by its signal (`ended`), by its handle's result in the history that
started it (`_watch`), or, for a child carried over continue-as-new, by asking Temporal
(`_describe`, the `describe_runs` activity): whichever comes first settles the call
(`_settle`) and refunds what the child left of its allowance.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ChildWorkflowError, is_cancelled_exception
from temporalio.workflow import ChildWorkflowHandle

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import (
        ACTIVITY_DESCRIBE_RUNS,
        DescribeRunsInput,
        EndedRuns,
        SpawnedCall,
        SpawnEnded,
    )
    from otherone.definitions import TreeBudget
    from otherone.runs import AgentCallResult, AgentRunResult
    from otherone.workflows import spawn_limits
    from otherone.workflows.budgets import BudgetLedger
    from otherone.workflows.outcomes import (
        DecidedEvents,
        call_result,
        unannounced_end_event,
    )

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.child_starts import abnormal_child
from otherone.workflows.spawn_results import ended_unseen, stub


class SpawnBook:
    """The spawned calls of one run, by handle (= call id), across continue-as-new."""

    def __init__(self, carried: tuple[SpawnedCall, ...] = ()) -> None:
        # Built in the workflow's __init__ from the carry: a child's signal may be handled
        # before the run's code starts.
        self._calls: dict[str, SpawnedCall] = {call.call_id: call for call in carried}
        #: Watchers of the children started in this history (handles do not survive
        #: continue-as-new).
        self._watchers: dict[str, asyncio.Future[None]] = {}
        self._ledger: BudgetLedger | None = None
        self._unrefunded: list[TreeBudget] = []
        #: Allowances of children whose start a cancellation cut short (they may not exist):
        #: refunded when such a child turns out never to have started.
        self._unconfirmed: dict[str, TreeBudget | None] = {}
        self._on_change: Callable[[], None] = lambda: None
        self._events = DecidedEvents()
        self._awaiting = 0

    def bind(
        self, ledger: BudgetLedger, events: DecidedEvents, on_change: Callable[[], None]
    ) -> None:
        """Attach the run's ledger (children ended before it existed refund now) and hooks."""
        self._ledger, self._events, self._on_change = ledger, events, on_change
        for unused in self._unrefunded:
            ledger.refund(unused)
        self._unrefunded.clear()

    @property
    def awaiting(self) -> bool:
        """An `agent.await` or `agent.cancel` is waiting for a child (status waiting_for_child)."""
        return self._awaiting > 0

    def open(self) -> list[SpawnedCall]:
        return [call for call in self._calls.values() if call.run_id and call.result is None]

    def carry(self) -> tuple[SpawnedCall, ...]:
        """Every spawned call; one whose result the model already read carries only a stub of
        it (call id, run id, outcome, failure): the output is in the session, and the carry-over
        must stay under Temporal's 2 MB payload limit however many children the run had."""
        return tuple(
            call.model_copy(update={"result": stub(call.result)})
            if call.reported and call.result is not None
            else call
            for call in self._calls.values()
        )

    def ended(self, signal: SpawnEnded) -> None:
        """A spawned child's signal: its result (ignored unless it is the child of that call
        and the call is still open)."""
        known = self._calls.get(signal.call_id)
        if known is None or known.run_id != signal.result.run_id:
            workflow.logger.warning("a spawned_run_ended signal for an unknown call was ignored")
            return
        result = call_result(known.call_id, known.target, signal.result)
        self._settle(known.call_id, result, signal.result.budget_remaining)

    def _settle(
        self,
        call_id: str,
        result: AgentCallResult,
        unused: TreeBudget | None,
        *,
        unannounced: bool = False,
    ) -> None:
        """``unannounced``: the child ended without running its finish (terminated from
        outside, or its workflow failed), so nothing stored its `agent_call_completed`: the
        run's next activity does, unless the child did after all (`IF_MISSING`)."""
        known = self._calls.get(call_id)
        if known is None or known.result is not None:
            # The signal and the child's own end both report it: the first one counts (or the
            # call was the handing agent's, settled at a handoff and dropped).
            return
        if unannounced:
            self._events.add(unannounced_end_event(result))
        self._calls[call_id] = known.model_copy(update={"result": result})
        self._unconfirmed.pop(call_id, None)  # it did start: its own remainder comes back
        if unused is not None:
            if self._ledger is None:
                self._unrefunded.append(unused)
            else:
                self._ledger.refund(unused)
        self._on_change()

    async def _watch(
        self, call_id: str, target: str, handle: ChildWorkflowHandle[object, AgentRunResult]
    ) -> None:
        """The child's end as its caller's history sees it: an abnormal end has no signal."""
        try:
            result = await handle
        except ChildWorkflowError as error:
            ended = abnormal_child(call_id, target, handle.id, error)
            self._settle(call_id, ended, None, unannounced=True)
            return
        self._settle(call_id, call_result(call_id, target, result), result.budget_remaining)

    def _done(self, handles: tuple[str, ...]) -> bool:
        return all(self._calls[handle].result is not None for handle in handles)

    def _carried_open(self, handles: tuple[str, ...]) -> list[SpawnedCall]:
        """The open calls among ``handles`` whose child this history did not start: nothing
        here would notice it ending without a signal."""
        return [
            call
            for handle in handles
            if (call := self._calls[handle]).result is None
            and call.run_id is not None
            and handle not in self._watchers
        ]

    def _watching(self, handles: tuple[str, ...]) -> bool:
        """Whether a wait on ``handles`` asks Temporal about carried children
        (`describe_runs`): only when there are some."""
        return bool(self._carried_open(handles))

    async def _wait_until_done(
        self, handles: tuple[str, ...], seconds: float | None, watch: bool
    ) -> bool:
        """Until every handle has a result (True) or ``seconds`` passed (False; None: no
        limit). With ``watch``, carried children are asked about at once and every
        `CARRIED_POLL` while they are open."""
        if not watch:
            try:
                await workflow.wait_condition(lambda: self._done(handles), timeout=seconds)
            except TimeoutError:
                return False
            return True
        until = None if seconds is None else workflow.now() + timedelta(seconds=seconds)
        while True:
            carried = self._carried_open(handles)
            if carried:
                await self._describe(carried)
            if self._done(handles):
                return True
            wait = (
                spawn_limits.CARRIED_POLL.total_seconds() if self._carried_open(handles) else None
            )
            if until is not None:
                left = (until - workflow.now()).total_seconds()
                if left <= 0:
                    return False
                wait = left if wait is None else min(wait, left)
            try:
                await workflow.wait_condition(lambda: self._done(handles), timeout=wait)
            except TimeoutError:
                continue
            return True

    async def _describe(self, carried: list[SpawnedCall]) -> None:
        """Settle the carried calls whose child Temporal reports as ended (a child that
        completed signals too: whichever comes first counts). A failed look is logged; the
        wait goes on."""
        try:
            found: EndedRuns = await workflow.execute_activity(
                ACTIVITY_DESCRIBE_RUNS,
                DescribeRunsInput(run_ids=tuple(call.run_id or "" for call in carried)),
                result_type=EndedRuns,
                start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=timedelta(minutes=1),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"look at {len(carried)} spawned run(s)",
            )
        except ActivityError as error:
            if is_cancelled_exception(error):
                raise asyncio.CancelledError() from error
            workflow.logger.warning("spawned runs not looked at: %s", error.cause or error)
            return
        by_run = {call.run_id: call for call in carried}
        for ended in found.ended:
            call = by_run.get(ended.run_id)
            if call is None:
                continue
            if ended.result is not None:
                result = call_result(call.call_id, call.target, ended.result)
                self._settle(call.call_id, result, ended.result.budget_remaining)
            else:
                self._settle(call.call_id, ended_unseen(call, ended), None, unannounced=True)

    def _report(self, handle: str) -> dict[str, object]:
        known = self._calls[handle]
        assert known.result is not None
        self._calls[handle] = known.model_copy(update={"reported": True})
        return known.result.model_dump(mode="json", exclude_none=True)

    def _open_handles(self) -> tuple[str, ...]:
        return tuple(call.call_id for call in self.open())
