"""Input guardrails of a turn: over the user messages it takes (a root's input, messages queued
by signal), before its model call or alongside it.

``before`` (the default): the guardrails run first; a trip ends the run before the model call
is reserved, so none is billed. ``parallel`` (as OpenAI Agents does): the model call starts at
once beside them; a trip cancels it (its activity is cancelled and waited for, so its
`model_completed` says so) and the run ends; an answer that came first waits for their
verdict. Both are durable: each guardrail is an activity, its verdict in the history.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import GuardrailSettings, GuardrailVerdict, ModelTurn, RunPlan
    from otherone.guardrails import GuardrailCheck
    from otherone.workflows.outcomes import Ending, RunEnded

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.guardrail_steps import (
    GuardrailBroken,
    first_trip,
    input_check,
    is_user_input,
    tripped_failure,
)
from otherone.workflows.run_state import RunState


class InputGuard:
    """The input guardrails of one turn that takes user messages."""

    def __init__(
        self,
        state: RunState,
        plan: RunPlan,
        guards: tuple[GuardrailSettings, ...],
        check: GuardrailCheck,
    ) -> None:
        self._state = state
        self._plan = plan
        self._guards = guards
        self._check = check
        assert plan.guardrails is not None
        self.parallel = plan.guardrails.input_mode == "parallel"

    @classmethod
    def of(cls, state: RunState, plan: RunPlan, iteration: int) -> InputGuard | None:
        """The turn's guard, or None when it takes no user message or none is declared."""
        guards = plan.guardrails.input if plan.guardrails is not None else ()
        root = state.input.depth == 0
        texts = [entry.content or "" for entry in state.pending if is_user_input(entry, root=root)]
        if not guards or not texts:
            return None
        return cls(state, plan, guards, input_check(state.ref(plan), plan, iteration, texts))

    async def _verdict(self) -> GuardrailVerdict | None:
        try:
            return await first_trip(self._plan, self._guards, self._check, self._state.decided)
        except GuardrailBroken as broken:
            raise RunEnded(broken.ending) from None

    async def before(self) -> None:
        """Run the guardrails now; a trip ends the run `guardrail_tripped`."""
        tripped = await self._verdict()
        if tripped is not None:
            raise RunEnded(tripped_failure(tripped))

    async def alongside(
        self, model_call: Coroutine[Any, Any, ModelTurn]
    ) -> tuple[ModelTurn, Ending | None]:
        """The model call with the guardrails beside it. A trip (or failure) while the call
        runs cancels it and raises the run's end; when the call answered all the same (first,
        or before its cancellation took), the answer comes back with the end (the call
        happened: the caller charges it and answers its tool calls)."""
        model = asyncio.ensure_future(model_call)
        guard = asyncio.ensure_future(self._verdict())
        try:
            await workflow.wait([model, guard], return_when=asyncio.FIRST_COMPLETED)
            if _failed(model):
                await _stopped(guard)
                return await model, None  # raises the model call's own end
            try:
                tripped = await guard
                ending = tripped_failure(tripped) if tripped is not None else None
            except RunEnded as ended:
                ending = ended.ending
            if ending is None:
                return await model, None
            await _stopped(model)
            if model.cancelled() or model.exception() is not None:
                raise RunEnded(ending)
            return model.result(), ending
        except asyncio.CancelledError:
            # The run is cancelled: both stop, and are waited for (as a turn's tools are).
            model.cancel()
            guard.cancel()
            await workflow.wait([model, guard])
            raise


def _failed(task: asyncio.Future[Any]) -> bool:
    """Whether ``task`` ended with an error (not a result, not a cancellation)."""
    return task.done() and not task.cancelled() and task.exception() is not None


async def _stopped(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` (if it still runs) and wait until it has stopped."""
    if task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, RunEnded):
        await task
