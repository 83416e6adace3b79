"""`agent.call` inside a run: checked by an activity, executed as a child `AgentRunWorkflow`.

The child's workflow id is derived from (root, caller, call id), and each call id's result is
kept in workflow state (rebuilt by replay), so a repeated call id never runs a second child —
after a worker restart too. The caller waits on the child without holding any activity slot.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import (
        ACTIVITY_PREPARE_CALL,
        STORE_ACTIVITY_TIMEOUT,
        STORE_HEARTBEAT_TIMEOUT,
        STORE_TOTAL_TIMEOUT,
        CallPlan,
        PrepareCallInput,
        RunInput,
        RunPlan,
        RunRef,
        child_run_id,
    )
    from otherone.definitions import TreeBudget
    from otherone.errors import FailureCode
    from otherone.parts import Part, TextPart
    from otherone.runs import (
        AgentCallRequest,
        AgentCallResult,
        AgentFailure,
        AgentRunRequest,
        AgentRunResult,
        InputMessage,
        RunOutcome,
        SessionTarget,
    )
    from otherone.workflows.budgets import BudgetDenied, BudgetLedger, Claimants
    from otherone.workflows.outcomes import (
        DecidedEvents,
        call_refused_event,
        call_result,
        failure_from_activity_error,
    )

from otherone.workflows.child_starts import abnormal_child, start_child, started_child


class AgentCallArgumentsError(ValueError):
    """The model's `agent.call` arguments are malformed (goes back as invalid_arguments)."""


def tool_arguments(arguments: str, allowed: set[str], error: type[ValueError]) -> dict[str, object]:
    """A built-in tool's arguments: a JSON object with only ``allowed`` keys; anything else
    raises ``error`` with a message for the model (never an exception that fails the workflow
    task)."""
    try:
        raw = json.loads(arguments or "{}")
    except json.JSONDecodeError as problem:
        raise error(f"arguments are not valid JSON: {problem}") from None
    except RecursionError:  # e.g. "[[[[…": it must not fail the workflow task
        raise error("arguments are nested too deeply") from None
    if not isinstance(raw, dict):
        raise error("arguments must be a JSON object")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise error(f"unknown argument(s): {', '.join(unknown)}")
    return raw


def parse_agent_call(arguments: str) -> AgentCallRequest:
    """The model-facing tool takes only ``agent``, ``task``, ``context`` and ``model`` (offered
    when the target may run on another model; `prepare_call` checks it is allowed)."""
    raw = tool_arguments(arguments, {"agent", "task", "context", "model"}, AgentCallArgumentsError)
    if not isinstance(raw.get("agent"), str) or not isinstance(raw.get("task"), str):
        raise AgentCallArgumentsError("'agent' and 'task' are required strings")
    if raw.get("model") is not None and not isinstance(raw["model"], str):
        raise AgentCallArgumentsError("'model' must be a string (a model profile id)")
    try:
        return AgentCallRequest(
            target=raw["agent"],
            task=raw["task"],
            context=raw.get("context"),
            model=raw.get("model"),
        )
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]).replace("target", "agent")
        raise AgentCallArgumentsError(f"{field}: {first['msg']}") from None


def failed_call(call_id: str, target: str, failure: AgentFailure) -> AgentCallResult:
    """A call refused before a child ran: outcome `failed` with the refusal's code (the seed's
    rule; e.g. a spent budget is `failed` with code `budget_exceeded`)."""
    return AgentCallResult(
        call_id=call_id, target=target, outcome=RunOutcome.FAILED, failure=failure
    )


class AgentCaller:
    """The agent calls of one run: idempotent by call id, funded from the run's ledger."""

    def __init__(
        self,
        run: RunInput,
        ledger: BudgetLedger,
        on_active_children: Callable[[int], None],
        events: DecidedEvents | None = None,
    ) -> None:
        self._run = run
        self._ledger = ledger
        self._events = events or DecidedEvents()
        self._on_active_children = on_active_children
        self._results: dict[str, asyncio.Future[AgentCallResult]] = {}
        self._children: dict[str, ChildWorkflowHandle[object, AgentRunResult]] = {}
        self._started = 0
        #: Call ids whose child ended normally, so it stored the result for this run to read.
        self._stored: set[str] = set()
        #: `agent.spawn` calls whose child start is under way: (child run id, its allowance with
        #: the child's own run). An entry left behind names a start cut short by a cancellation,
        #: which may have started the child all the same (`Spawner` takes it).
        self.spawning: dict[str, tuple[str, TreeBudget | None]] = {}

    @property
    def active(self) -> int:
        return len(self._children)

    def stored_by_child(self, call_id: str) -> bool:
        return call_id in self._stored

    @property
    def started(self) -> int:
        return self._started

    def finished_results(self) -> dict[str, AgentCallResult]:
        """Results of completed calls: carried over when the run continues as new."""
        return {
            call_id: future.result()
            for call_id, future in self._results.items()
            if future.done() and not future.cancelled()
        }

    def restore(self, results: dict[str, AgentCallResult], started: int) -> None:
        """Resume after continue-as-new: known call ids keep their results."""
        loop = asyncio.get_running_loop()
        for call_id, result in results.items():
            future: asyncio.Future[AgentCallResult] = loop.create_future()
            future.set_result(result)
            self._results[call_id] = future
        self._started = started

    async def call(
        self,
        plan: RunPlan,
        ref: RunRef,
        deadline: datetime,
        call_id: str,
        request: AgentCallRequest,
        claimants: Claimants,
    ) -> AgentCallResult:
        """The result of ``call_id``: a child run the first time, the same result after."""
        known = self._results.get(call_id)
        if known is not None:
            return await asyncio.shield(known)
        future: asyncio.Future[AgentCallResult] = asyncio.get_running_loop().create_future()
        self._results[call_id] = future
        try:
            result = await self._execute(plan, ref, deadline, call_id, request, claimants)
        except asyncio.CancelledError:
            # Cancelled before a result (only GeneratorExit, on eviction, is let through as is):
            # a later call with this id may start over.
            del self._results[call_id]
            future.cancel()
            raise
        future.set_result(result)
        return result

    def _child_done(self, call_id: str) -> None:
        del self._children[call_id]
        self._on_active_children(self.active)

    def cancel_children(self) -> None:
        """Ask every running child to stop (used when this run ends early)."""
        for handle in self._children.values():
            handle.cancel()

    async def _execute(
        self,
        plan: RunPlan,
        ref: RunRef,
        deadline: datetime,
        call_id: str,
        request: AgentCallRequest,
        claimants: Claimants,
    ) -> AgentCallResult:
        try:
            funded = await self._fund(plan, ref, deadline, call_id, request, claimants)
        finally:
            claimants.settle()  # plain bookkeeping: safe even when the coroutine is closed
        if isinstance(funded, AgentCallResult):
            return funded  # refused before a child started
        child, call_plan = funded
        return await self._run_child(child, call_id, request, call_plan)

    async def _fund(
        self,
        plan: RunPlan,
        ref: RunRef,
        deadline: datetime,
        call_id: str,
        request: AgentCallRequest,
        claimants: Claimants,
        *,
        spawned: bool = False,
    ) -> AgentCallResult | tuple[RunInput, CallPlan]:
        """Check the call and carve the child's allowance, or refuse with a structured result.

        The seed's order: the call's own checks (`prepare_call`) first, then the budgets
        (children of this run, agent calls and runs of the tree), so every well-formed call is
        announced by `prepare_call` and its refusal too. The child's workflow id names its
        agent (``<caller>/<target>.<call id>``).
        """
        child_id = child_run_id(ref.root_run_id, ref.run_id, call_id, request.target)
        try:
            call_plan = await self._prepare(plan, ref, call_id, request, child_id, spawned=spawned)
        except ActivityError as error:
            if is_cancelled_exception(error):
                raise asyncio.CancelledError() from error
            return failed_call(call_id, request.target, failure_from_activity_error(error))
        if self._started >= plan.limits.max_children_per_run:
            return self._refused(_too_many_children(call_id, request, plan))
        # A spawning caller goes on working while its child runs: it keeps a claimant's share.
        sharers = claimants.left + (1 if spawned else 0)
        try:
            allowance = self._ledger.allot(sharers, caller_goes_on=claimants.caller_goes_on)
        except BudgetDenied as denied:
            failure = AgentFailure(code=FailureCode.BUDGET_EXCEEDED, message=str(denied))
            return self._refused(failed_call(call_id, request.target, failure))
        self._started += 1
        return self._child_input(
            plan, ref, deadline, call_id, request, call_plan, allowance, child_id
        ), call_plan

    def _refused(self, result: AgentCallResult) -> AgentCallResult:
        """A call refused after `prepare_call` announced it: its end is announced too."""
        self._events.add(call_refused_event(result))
        return result

    async def _prepare(
        self,
        plan: RunPlan,
        ref: RunRef,
        call_id: str,
        request: AgentCallRequest,
        child_id: str,
        *,
        spawned: bool = False,
    ) -> CallPlan:
        result: CallPlan = await workflow.execute_activity(
            ACTIVITY_PREPARE_CALL,
            PrepareCallInput(
                caller=ref,
                ancestry=(*self._run.ancestry, ref.agent_id),
                call_id=call_id,
                request=request,
                limits=plan.limits,
                events=self._events.take(),
                spawned=spawned,
                child_run_id=child_id,
                caller_model_profile_id=plan.model_profile_id,
            ),
            result_type=CallPlan,
            start_to_close_timeout=STORE_ACTIVITY_TIMEOUT,
            schedule_to_close_timeout=STORE_TOTAL_TIMEOUT,
            heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
            summary=f"check call {ref.agent_id} → {request.target}",
        )
        return result

    def _child_input(
        self,
        plan: RunPlan,
        ref: RunRef,
        deadline: datetime,
        call_id: str,
        request: AgentCallRequest,
        call_plan: CallPlan,
        allowance: TreeBudget,
        child_id: str,
    ) -> RunInput:
        parent = self._run.request
        child_deadline = deadline
        if request.timeout is not None:
            child_deadline = min(deadline, workflow.now() + request.timeout)
        return RunInput(
            run_id=child_id,
            root_run_id=ref.root_run_id,
            parent_run_id=ref.run_id,
            agent_call_id=call_id,
            depth=ref.depth + 1,
            ancestry=(*self._run.ancestry, ref.agent_id),
            snapshot_version=plan.snapshot_version,
            deadline=child_deadline,
            result_contract=request.result_contract,
            max_iterations=request.max_iterations,
            internal_session=True,
            budget=allowance,
            caller_agent_id=ref.agent_id,
            caller_model_profile_id=plan.model_profile_id,
            request=AgentRunRequest(
                entry_agent=call_plan.target_id,
                input=child_message(call_plan.child_input, request.parts),
                session=SessionTarget(
                    context_window=parent.session.context_window,
                    threshold_percentage=parent.session.threshold_percentage,
                ),
                runtime_context=parent.runtime_context,
                limits=parent.limits,
                metadata=request.metadata,
                output_retries=request.output_retries,
                model=request.model,
                event_visibility=parent.event_visibility,
                include_thinking_events=parent.include_thinking_events,
            ),
        )

    async def spawn(
        self,
        plan: RunPlan,
        ref: RunRef,
        deadline: datetime,
        call_id: str,
        request: AgentCallRequest,
        claimants: Claimants,
    ) -> AgentCallResult | ChildWorkflowHandle[object, AgentRunResult]:
        """`agent.spawn`: the checks and funding of `call`, then the child starts and this
        returns at once (see `otherone.workflows.spawns`).

        The child is ABANDONed by Temporal when this history closes, so continue-as-new does
        not stop it; the spawner cancels it explicitly when the run ends. It reports its
        result by signal (`RunInput.spawned`).
        """
        try:
            funded = await self._fund(
                plan, ref, deadline, call_id, request, claimants, spawned=True
            )
        finally:
            claimants.settle()
        if isinstance(funded, AgentCallResult):
            return funded
        child, call_plan = funded
        child = child.model_copy(update={"spawned": True})
        self.spawning[call_id] = (child.run_id, _with_self(child))
        try:
            started = await start_child(
                child, call_id, request, call_plan, ParentClosePolicy.ABANDON
            )
            del self.spawning[call_id]
            return started
        except WorkflowAlreadyStartedError:
            del self.spawning[call_id]
            failure = AgentFailure(
                code=FailureCode.INTERNAL_ERROR, message=f"child '{child.run_id}' already runs"
            )
            self._ledger.refund(_with_self(child))
            return self._refused(failed_call(call_id, call_plan.target_id, failure))

    async def _run_child(
        self, child: RunInput, call_id: str, request: AgentCallRequest, call_plan: CallPlan
    ) -> AgentCallResult:
        try:
            handle = await started_child(child, call_id, request, call_plan)
        except WorkflowAlreadyStartedError:
            failure = AgentFailure(
                code=FailureCode.INTERNAL_ERROR, message=f"child '{child.run_id}' already runs"
            )
            self._ledger.refund(_with_self(child))
            return self._refused(failed_call(call_id, call_plan.target_id, failure))
        self._children[call_id] = handle
        self._on_active_children(self.active)
        # No `finally`: on cache eviction the coroutine is closed (GeneratorExit) outside the
        # workflow's event loop, where no workflow call may be made.
        try:
            result = await handle
        except ChildWorkflowError as error:
            self._child_done(call_id)
            return abnormal_child(call_id, call_plan.target_id, child.run_id, error)
        except asyncio.CancelledError:
            self._child_done(call_id)
            raise
        self._child_done(call_id)
        self._stored.add(call_id)
        self._ledger.refund(result.budget_remaining)
        return call_result(call_id, call_plan.target_id, result)


def _too_many_children(call_id: str, request: AgentCallRequest, plan: RunPlan) -> AgentCallResult:
    failure = AgentFailure(
        code=FailureCode.BUDGET_EXCEEDED,
        message=f"max_children_per_run ({plan.limits.max_children_per_run}) reached",
    )
    return failed_call(call_id, request.target, failure)


def _with_self(child: RunInput) -> TreeBudget | None:
    if child.budget is None:
        return None
    return child.budget.model_copy(update={"runs": child.budget.runs + 1})


def child_message(text: str, parts: tuple[Part, ...]) -> str | tuple[InputMessage, ...]:
    """A child's input: the built text, and the call's images and files after it (the child's
    `prepare_run` refuses any that carry bytes, or that its model profile does not take)."""
    if not parts:
        return text
    return (InputMessage(role="user", content=(TextPart(text=text), *parts)),)
