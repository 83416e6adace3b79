"""The run's counters: its usage, and its share of the run tree's budget (reserve, allot, refund).

Pure (no Temporal calls, no I/O), imported passed through by the workflow modules like
`outcomes`.
"""

from __future__ import annotations

from decimal import ROUND_DOWN, Decimal

from otherone.contracts import HandOffResult, ModelTurn
from otherone.definitions import RuntimeLimits, TreeBudget
from otherone.errors import FailureCode
from otherone.runs import AgentFailure, AgentOutput, RunUsage
from otherone.workflows.outcomes import Ending, RunEnded


class UsageCounter:
    """Usage of one run (its own calls; children report theirs in their results)."""

    def __init__(self, carried: RunUsage | None = None) -> None:
        start = carried or RunUsage()
        self.input_tokens: int | None = start.input_tokens
        self.output_tokens: int | None = start.output_tokens
        self.total_tokens: int | None = start.total_tokens
        self.cache_read_tokens: int | None = start.cache_read_tokens
        self.cache_write_tokens: int | None = start.cache_write_tokens
        self.cost: Decimal | None = start.cost
        self.model_calls = start.model_calls
        self.tool_calls = start.tool_calls
        self.agent_calls = start.agent_calls
        self.models = dict(start.models)

    def answered_by(self, profile_id: str) -> None:
        """A turn was answered by ``profile_id`` (the run's model or a fallback)."""
        self.models[profile_id] = self.models.get(profile_id, 0) + 1

    def add_tokens(self, turn: ModelTurn | HandOffResult) -> None:
        self.input_tokens = _add(self.input_tokens, turn.input_tokens)
        self.output_tokens = _add(self.output_tokens, turn.output_tokens)
        self.total_tokens = _add(self.total_tokens, turn.total_tokens)
        if isinstance(turn, ModelTurn):
            self.cache_read_tokens = _add(self.cache_read_tokens, turn.cache_read_tokens)
            self.cache_write_tokens = _add(self.cache_write_tokens, turn.cache_write_tokens)
        if turn.cost is not None:
            self.cost = turn.cost if self.cost is None else self.cost + turn.cost

    def snapshot(self, duration_millis: int) -> RunUsage:
        return RunUsage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.total_tokens,
            cache_read_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
            cost=self.cost,
            model_calls=self.model_calls,
            tool_calls=self.tool_calls,
            agent_calls=self.agent_calls,
            duration_millis=duration_millis,
            models=dict(self.models),
        )


def _add(left: int | None, right: int | None) -> int | None:
    if left is None:
        return right
    return left if right is None else left + right


#: The smallest share of a cost budget a child is given (a millionth of a micro-dollar):
#: shares are rounded down to it, so they never add up to more than was left.
COST_QUANTUM = Decimal("1e-12")


#: Model and tool calls a caller keeps for itself when it funds children (to answer after them).
PARENT_RESERVE = 2


class Claimants:
    """The agent calls of one turn still waiting to be funded (shared by parallel calls)."""

    def __init__(self, count: int, *, caller_goes_on: bool = False) -> None:
        self.total = max(count, 1)
        self.left = self.total
        #: The caller's loop goes on while the child runs (a trusted call arrives by update
        #: at any point): it may answer meanwhile, so it keeps a share of the output bytes.
        self.caller_goes_on = caller_goes_on

    def settle(self) -> None:
        """One call was funded or refused: later ones split what is left among fewer."""
        self.left = max(1, self.left - 1)


class BudgetDenied(Exception):
    """An agent call cannot get an allowance; the caller's model gets a structured failure."""


class BudgetLedger:
    """This run's share of the tree budget (see `TreeBudget`): reserve, allot, refund.

    Reservations of the run's own model and tool calls end the run `budget_exceeded` when the
    share is spent; an agent call that cannot be funded is refused as a tool result instead.
    """

    def __init__(self, budget: TreeBudget, limits: RuntimeLimits) -> None:
        self.remaining = budget.model_dump()
        self.limits = limits

    def reserve_model_call(self) -> None:
        self._spend("model_calls", 1, f"max_model_calls ({self.limits.max_model_calls})")

    def charge_model_calls(self, count: int) -> None:
        """Count model calls made without a reservation (a compaction's summary, known only
        once the turn returns): a budget they overran ends the run at the next reservation."""
        self.remaining["model_calls"] -= count

    def release_model_call(self) -> None:
        """Give back a reserved model call that was not made."""
        self.remaining["model_calls"] += 1

    def reserve_tool_calls(self, count: int) -> None:
        self._spend("tool_calls", count, f"max_tool_calls ({self.limits.max_tool_calls})")

    def spend_tokens(self, tokens: int | None) -> None:
        if tokens is not None and self.remaining["tokens"] is not None:
            self._spend("tokens", tokens, f"token_budget ({self.limits.token_budget})")

    def spend_cost(self, cost: Decimal | None) -> None:
        """A model call's cost: past the share, the run ends `budget_exceeded` (the call that
        passes it was made: its cost is known only once it returns, as for tokens)."""
        if cost is not None and self.remaining["cost"] is not None:
            self._spend("cost", cost, f"cost_budget ({self.limits.cost_budget} USD)")

    def spend_output_bytes(self, output: AgentOutput) -> None:
        """The run's final answer, counted as the seed counts it (`add_output_bytes`, once the
        run answers and before it returns): past the share, the run ends `budget_exceeded`."""
        if self.remaining["output_bytes"] is not None:
            label = f"max_output_bytes ({self.limits.max_output_bytes})"
            self._spend("output_bytes", output_size(output), label)

    def _spend(self, name: str, amount: int | Decimal, label: str) -> None:
        left = self.remaining[name]
        self.remaining[name] = left - amount
        if left - amount < 0:
            failure = AgentFailure(
                code=FailureCode.BUDGET_EXCEEDED, message=f"{label} exceeded for the run tree"
            )
            raise RunEnded(Ending.failed(failure))

    def allot(self, claimants: int, *, caller_goes_on: bool = False) -> TreeBudget:
        """A child's allowance when ``claimants`` children are still to be funded in this turn.

        Runs are split between the children, and so are agent, model and tool calls, after this
        run keeps a small reserve to answer once its children are done (their unused
        allowances come back to it); tokens keep a share for this run. Output bytes are split
        between the children alone, as this run answers only once they are done, with what
        they give back (so a chain of calls answers as the seed's shared count would); a
        caller that ``goes on`` while the child runs keeps a share (a spawn counts itself
        among ``claimants``).
        """
        if self.remaining["agent_calls"] < 1:
            raise BudgetDenied(
                f"max_agent_calls ({self.limits.max_agent_calls}) exceeded for the run tree"
            )
        if self.remaining["runs"] < 1:
            raise BudgetDenied(
                f"max_total_runs ({self.limits.max_total_runs}) exceeded for the run tree"
            )
        self.remaining["agent_calls"] -= 1
        share = self._share(claimants, caller_goes_on)
        for name, amount in share.items():
            if amount is not None:
                self.remaining[name] -= amount
        share["runs"] = (share["runs"] or 1) - 1  # the child itself is one of its runs
        return TreeBudget.model_validate(share)

    def _share(self, claimants: int, caller_goes_on: bool) -> dict[str, int | Decimal | None]:
        left = self.remaining
        tokens, output_bytes, cost = left["tokens"], left["output_bytes"], left.get("cost")
        output_sharers = max(claimants, 1) + (1 if caller_goes_on else 0)
        return {
            "runs": max(1, left["runs"] // max(claimants, 1)),
            "agent_calls": left["agent_calls"] // max(claimants, 1),
            "model_calls": max(0, left["model_calls"] - PARENT_RESERVE) // max(claimants, 1),
            "tool_calls": max(0, left["tool_calls"] - PARENT_RESERVE) // max(claimants, 1),
            "tokens": None if tokens is None else tokens // (claimants + 1),
            "output_bytes": None if output_bytes is None else output_bytes // output_sharers,
            "cost": None if cost is None else _cost_share(cost, claimants + 1),
        }

    def refund(self, unused: TreeBudget | None) -> None:
        if unused is None:
            return
        for name, amount in unused.model_dump().items():
            if amount is not None and self.remaining[name] is not None:
                self.remaining[name] += amount

    def left(self) -> TreeBudget:
        return TreeBudget.model_validate(
            {k: max(v, 0) if v is not None else None for k, v in self.remaining.items()}
        )


def _cost_share(left: Decimal, sharers: int) -> Decimal:
    """``left`` split ``sharers`` ways, rounded down (never below zero)."""
    share = (max(left, Decimal(0)) / sharers).quantize(COST_QUANTUM, rounding=ROUND_DOWN)
    return max(share, Decimal(0))


def output_size(output: AgentOutput) -> int:
    """UTF-8 bytes of a final answer: its text, or the JSON text of a typed result (what an
    artifact holding it would store, so a referenced output counts the same)."""
    if output.is_reference:
        assert output.artifact is not None
        return output.artifact.size_bytes
    return len(output.encoded())
