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
    from otherone.workflows.outcomes import RunEnded

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

    async def alongside(self, model_call: Coroutine[Any, Any, ModelTurn]) -> ModelTurn:
        """The model call with the guardrails beside it; their trip (or failure) cancels it."""
        model = asyncio.ensure_future(model_call)
        guard = asyncio.ensure_future(self._verdict())
        try:
            await workflow.wait([model, guard], return_when=asyncio.FIRST_COMPLETED)
            # Whichever came first, the answer is only taken once the guardrails passed.
            await self._end_on_trip(guard, model)
            return await model
        except asyncio.CancelledError:
            # The run is cancelled: both stop, and are waited for (as a turn's tools are).
            model.cancel()
            guard.cancel()
            await workflow.wait([model, guard])
            raise

    async def _end_on_trip(self, guard: asyncio.Future[Any], model: asyncio.Future[Any]) -> None:
        """Raise the run's end if the guardrails tripped or failed, after stopping the model
        call (cancelled, and waited for: its `model_completed` is stored before the end)."""
        try:
            tripped = await guard
        except RunEnded:
            await _stopped(model)
            raise
        except asyncio.CancelledError:
            await _stopped(model)
            raise
        if tripped is not None:
            await _stopped(model)
            raise RunEnded(tripped_failure(tripped))


async def _stopped(model: asyncio.Future[Any]) -> None:
    """Cancel the model call (if it still runs) and wait until it has stopped."""
    if model.done():
        if not model.cancelled():
            model.exception()  # retrieved: the run's end is the guardrail's, not this one
        return
    model.cancel()
    with contextlib.suppress(asyncio.CancelledError, RunEnded):
        await model
