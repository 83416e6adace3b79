"""Background agent calls inside a run: `agent.spawn`, `agent.await`, `agent.status`,
`agent.cancel`.

`agent.spawn` makes the same checks, funding and child start as `agent.call` (`AgentCaller`), and
returns at once with a handle (the call id) while the child runs; the caller goes on calling
its model meanwhile, holding no slot. The turns of the caller and the ends of its children
interleave through Temporal's history, so replay decides them the same way every time.

How a result comes back, durably:
- the child is started with parent close policy ABANDON, so the caller's continue-as-new does
  not stop it, and with ``RunInput.spawned``: when it ends it signals its result to the caller's
  workflow id (`SIGNAL_SPAWNED_RUN_ENDED`), which is stable across continue-as-new and reaches
  the caller's current history;
- in the history that started the child, the child's handle is awaited too, so a child that
  ends without a result (terminated, a bug) is noticed there. Whichever comes first settles the
  call; the other is ignored.
- continue-as-new carries every spawned call (`CarryOver.spawns`): the open ones are awaited
  again by their signals. A carried child that ends without one (terminated from outside: it
  runs no more code) has no handle here to report it, so while a wait depends on carried
  children, the `describe_runs` activity asks Temporal about them, at once and every
  `CARRIED_POLL` (a cancel request cannot tell: Temporal reports a cancel request to a closed
  workflow as delivered).
- a handoff settles the handing agent's children first, by its end policy (`hand_over`): the
  next agent starts with none.

Never an orphan: when the caller ends, open children are cancelled (explicitly, by workflow id:
Temporal abandons them) and waited for, a bounded while. An agent with ``spawned_on_exit =
"wait"`` first waits for them when its run completes (bounded by its deadline, which is also
theirs); any other ending cancels them, like `agent.call` children.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace
from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from otherone.config import (
        AGENT_AWAIT_TOOL,
        AGENT_CANCEL_TOOL,
        AGENT_SPAWN_TOOL,
        AGENT_STATUS_TOOL,
        SPAWN_TOOLS,
    )
    from otherone.contracts import (
        PendingEntry,
        RunPlan,
        RunRef,
        SpawnedCall,
        ToolCallSpec,
    )
    from otherone.runs import (
        AgentCallRequest,
        AgentCallResult,
        RunOutcome,
    )
    from otherone.workflows import spawn_limits
    from otherone.workflows.budgets import Claimants
    from otherone.workflows.outcomes import (
        invalid_arguments_entry,
        tool_completed_event,
        tool_started_event,
    )

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.agent_calls import (
    AgentCallArgumentsError,
    AgentCaller,
    parse_agent_call,
)
from otherone.workflows.spawn_arguments import (
    AwaitRequest,
    SpawnArgumentsError,
    parse_await,
    parse_handle,
    unknown_handle,
)
from otherone.workflows.spawn_book import SpawnBook
from otherone.workflows.spawn_results import children_reported


class Spawner(SpawnBook):
    """The spawn tools of one run and its spawned children's end (`SpawnBook`: the calls)."""

    @staticmethod
    def handles(plan: RunPlan, call: ToolCallSpec) -> bool:
        """Whether ``call`` is one of the spawn tools and this run was offered them."""
        return plan.spawn and call.name in SPAWN_TOOLS

    @staticmethod
    def is_spawn(plan: RunPlan, call: ToolCallSpec) -> bool:
        return plan.spawn and call.name == AGENT_SPAWN_TOOL

    async def run_tool(
        self,
        caller: AgentCaller,
        plan: RunPlan,
        ref: RunRef,
        deadline: datetime,
        call: ToolCallSpec,
        claimants: Claimants,
    ) -> PendingEntry:
        """One spawn tool call; its result entry (the model reads it inline)."""
        key = f"{ref.run_id}:{call.name}:{call.id}"
        try:
            if call.name == AGENT_SPAWN_TOOL:
                request = parse_agent_call(call.arguments)
                self._events.add(tool_started_event(call))  # stored by the call's check, first
                content = await self._spawn(
                    caller, plan, ref, deadline, call.id, request, claimants
                )
            else:
                checked = self._checked(call, deadline)
                self._events.add(tool_started_event(call))
                content = await self._control(call.name, checked)
        except (AgentCallArgumentsError, SpawnArgumentsError) as error:
            return invalid_arguments_entry(key, call, str(error))
        failure = content.get("failure")
        message = failure.get("message") if isinstance(failure, dict) else None
        self._events.add(tool_completed_event(call, message if isinstance(message, str) else None))
        return PendingEntry(
            key=key,
            role="tool",
            content=json.dumps(content, ensure_ascii=False),
            tool_call_id=call.id,
            tool_name=call.name,
            stored_results_of=children_reported(content),
        )

    def _checked(self, call: ToolCallSpec, deadline: datetime) -> AwaitRequest | str:
        """The arguments of `agent.await` (a request, its timeout capped at the run's time
        left) or `agent.status`/`agent.cancel` (a handle); malformed ones or unknown handles
        raise `SpawnArgumentsError`."""
        if call.name == AGENT_AWAIT_TOOL:
            request = parse_await(call.arguments)
            for handle in request.handles or ():
                self._known(handle)
            left = max((deadline - workflow.now()).total_seconds(), 0.0)
            if request.timeout_seconds is not None and request.timeout_seconds > left:
                # The run ends at its deadline anyway: no timer outlives it.
                request = replace(request, timeout_seconds=left)
            return request
        assert call.name in (AGENT_STATUS_TOOL, AGENT_CANCEL_TOOL)
        return self._known(parse_handle(call.arguments)).call_id

    async def _control(self, name: str, checked: AwaitRequest | str) -> dict[str, object]:
        if isinstance(checked, AwaitRequest):
            return await self._await(checked)
        if name == AGENT_CANCEL_TOOL:
            await self._cancel(checked)
        else:
            await self._look_at_carried(checked)
        return self._status(checked)

    async def _look_at_carried(self, handle: str) -> None:
        """A child started in an earlier history reports its end only by signal, which a
        child terminated from outside never sends: ask Temporal before saying "running"
        (`describe_runs`)."""
        carried = self._carried_open((handle,))
        if carried:
            await self._describe(carried)

    def _known(self, handle: str) -> SpawnedCall:
        known = self._calls.get(handle)
        if known is None:
            raise unknown_handle(handle)
        return known

    async def _spawn(
        self,
        caller: AgentCaller,
        plan: RunPlan,
        ref: RunRef,
        deadline: datetime,
        call_id: str,
        request: AgentCallRequest,
        claimants: Claimants,
    ) -> dict[str, object]:
        known = self._calls.get(call_id)
        if known is not None:
            return self._spawned(known)  # the same call id again: the same handle
        self._calls[call_id] = SpawnedCall(call_id=call_id, target=request.target)
        try:
            started = await caller.spawn(plan, ref, deadline, call_id, request, claimants)
        except asyncio.CancelledError:
            funded = caller.spawning.pop(call_id, None)
            if funded is None:
                del self._calls[call_id]  # nothing started: a later call with this id starts over
                raise
            # Cut short while its child started: it may run. It stays open under its workflow
            # id, so the run's end cancels it (its result refunds it; see `_stop_open`).
            run_id, allowance = funded
            self._calls[call_id] = self._calls[call_id].model_copy(update={"run_id": run_id})
            self._unconfirmed[call_id] = allowance
            raise
        if isinstance(started, AgentCallResult):  # refused: the model reads why, as for agent.call
            self._calls[call_id] = self._calls[call_id].model_copy(
                update={"result": started, "reported": True}
            )
            return started.model_dump(mode="json", exclude_none=True)
        self._calls[call_id] = self._calls[call_id].model_copy(update={"run_id": started.id})
        self._watchers[call_id] = asyncio.ensure_future(
            self._watch(call_id, request.target, started)
        )
        self._on_change()
        return self._spawned(self._calls[call_id])

    @staticmethod
    def _spawned(call: SpawnedCall) -> dict[str, object]:
        if call.result is not None and call.run_id is None:  # a refused spawn, asked again
            return call.result.model_dump(mode="json", exclude_none=True)
        return {"handle": call.call_id, "agent": call.target, "run_id": call.run_id}

    async def _await(self, request: AwaitRequest) -> dict[str, object]:
        handles = request.handles
        if handles is None:
            handles = tuple(id for id, call in self._calls.items() if not call.reported)
        await self._wait_for(handles, request.timeout_seconds)
        results, held = self._results_within(
            [handle for handle in handles if self._calls[handle].result]
        )
        running = [
            {
                "handle": handle,
                "agent": self._calls[handle].target,
                "run_id": self._calls[handle].run_id,
            }
            for handle in handles
            if self._calls[handle].result is None
        ]
        if held:  # finished, not reported: a later agent.await returns them
            return {"results": results, "running": running, "held_back": held}
        return {"results": results, "running": running}

    def _results_within(self, finished: list[str]) -> tuple[list[dict[str, object]], list[str]]:
        """The results to report now: together at most `AWAIT_RESULT_BYTES` (the entry travels
        inline to the model activity, under Temporal's 2 MB payload limit); the first always."""
        results: list[dict[str, object]] = []
        held: list[str] = []
        size = 0
        for handle in finished:
            result = self._calls[handle].result
            assert result is not None
            length = len(result.model_dump_json(exclude_none=True))
            if results and size + length > spawn_limits.AWAIT_RESULT_BYTES:
                held.append(handle)
                continue
            size += length
            results.append(self._report(handle))
        return results, held

    async def _wait_for(self, handles: tuple[str, ...], seconds: float | None) -> None:
        """Until every handle has a result, or ``seconds`` (0: do not wait; carried children
        are still asked about once)."""
        if self._done(handles):
            return
        watch = self._watching(handles)
        if seconds == 0 and not watch:
            return
        self._awaiting += 1
        self._on_change()
        try:
            await self._wait_until_done(handles, seconds, watch)
        except asyncio.CancelledError:
            self._awaiting -= 1  # no `finally`: on eviction no workflow call may be made
            raise
        self._awaiting -= 1
        self._on_change()

    def _status(self, handle: str) -> dict[str, object]:
        known = self._calls[handle]
        if known.result is None:
            return {
                "handle": handle,
                "agent": known.target,
                "run_id": known.run_id,
                "status": "running",
            }
        return {
            "handle": handle,
            "status": known.result.outcome.value,
            "result": self._report(handle),
        }

    async def _cancel(self, handle: str) -> None:
        known = self._calls[handle]
        if known.result is not None or known.run_id is None:
            return
        await _request_cancel(known.run_id)
        await self._wait_for((handle,), spawn_limits.CANCEL_WAIT.total_seconds())

    async def finish(self, outcome: RunOutcome, policy: str, deadline: datetime | None) -> None:
        """No spawned child outlives the run: wait for them (policy ``wait``, completed runs
        only, within the deadline), then cancel the rest and wait for them to stop, a bounded
        while. A cancellation of the run meanwhile stops the waiting, not the cancelling."""
        if not self.open():
            return
        if outcome is RunOutcome.COMPLETED and policy == "wait":
            left = (deadline - workflow.now()).total_seconds() if deadline else 0.0
            self._awaiting += 1  # the run shows waiting_for_child meanwhile
            self._on_change()
            handles = self._open_handles()
            # A cancellation of the run stops this wait; the children are cancelled below.
            with contextlib.suppress(asyncio.CancelledError):
                await self._wait_until_done(
                    handles,
                    max(left, 0.0) + spawn_limits.SPAWN_CANCEL_GRACE.total_seconds(),
                    self._watching(handles),
                )
            self._awaiting -= 1
        if not self.open():
            return
        stopping = asyncio.ensure_future(self._stop_open())
        while not stopping.done():
            try:
                await asyncio.shield(stopping)
            except asyncio.CancelledError:
                continue  # the run is ending anyway: its children still must stop

    async def hand_over(self, policy: str, deadline: datetime | None) -> None:
        """At a handoff, before the run goes on under the next agent: the handing agent's
        spawned children end as its completed run's would (waited for with ``wait``, else
        cancelled; see `finish`), and the next agent starts with no handles: they are the
        handing agent's, and the next agent may not even be allowed to await them."""
        await self.finish(RunOutcome.COMPLETED, policy, deadline)
        self._calls.clear()  # late reports of these children are ignored (`ended`, `_settle`)

    async def _stop_open(self) -> None:
        open_calls = self.open()
        delivered = await asyncio.gather(
            *(_request_cancel(call.run_id or "") for call in open_calls)
        )
        for call, reached in zip(open_calls, delivered, strict=True):
            if not reached and call.call_id in self._unconfirmed:
                # A start cut short that never made a child: nothing to wait for; its whole
                # allowance comes back.
                result = AgentCallResult(
                    call_id=call.call_id,
                    target=call.target,
                    run_id=call.run_id,
                    outcome=RunOutcome.CANCELLED,
                )
                self._settle(call.call_id, result, self._unconfirmed.pop(call.call_id))
        handles = self._open_handles()
        # A carried child terminated from outside sends nothing: asked about, not waited for.
        stopped = await self._wait_until_done(
            handles, spawn_limits.SPAWN_CANCEL_GRACE.total_seconds(), self._watching(handles)
        )
        if not stopped:
            workflow.logger.warning(
                "spawned children still stopping after %ss: %s",
                spawn_limits.SPAWN_CANCEL_GRACE.total_seconds(),
                ", ".join(call.run_id or "" for call in self.open()),
            )


async def _request_cancel(run_id: str) -> bool:
    """Cancel a spawned child by workflow id (its handle may belong to an earlier history);
    whether the request was delivered."""
    try:
        await workflow.get_external_workflow_handle(run_id).cancel()
    # Only a workflow id that does not exist fails: a cancel request to a closed workflow is
    # "delivered" (temporal 1.32), so it cannot tell a terminated child from a running one.
    except FailureError as error:
        workflow.logger.info("cancel of spawned run %s not delivered: %s", run_id, error)
        return False
    return True


__all__ = ["Spawner"]
