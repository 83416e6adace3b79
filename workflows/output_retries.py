"""Output retries: a final answer that breaks the run's result contract is told to the model,
which answers again, up to the plan's `output_retries` times.

Pure workflow-side bookkeeping (no Temporal calls, no I/O): the retry is an ordinary next turn of
the loop, so it counts against `max_iterations` and the tree's model-call and token budgets like
any other. The problem reaches the model as a user message (the answer it rejects is already in
the session as the assistant's entry); a `output_rejected` event announces it.
"""

from __future__ import annotations

from pydantic import JsonValue

from otherone.contracts import ModelTurn, PendingEntry
from otherone.errors import FailureCode
from otherone.runs import AgentFailure

#: The longest problem text given to the model and put in events (a JSON Schema error can quote
#: a large part of the answer).
MAX_PROBLEM_CHARS = 2000
#: How the key of a retry's feedback entry ends (the runtime wrote it, not the user: a handoff's
#: `last_turns` does not count it as a user turn).
RETRY_KEY_SUFFIX = ":output-retry"


class OutputRetries:
    """How many retries a run has left, and what each one adds to the transcript."""

    def __init__(self, allowed: int, used: int = 0) -> None:
        self.allowed = allowed
        self.used = used

    @property
    def left(self) -> int:
        return max(self.allowed - self.used, 0)

    def retry(self, run_id: str, iteration: int, problem: str) -> PendingEntry:
        """Take one retry: the user message that tells the model what to fix."""
        self.used += 1
        return PendingEntry(
            key=f"{run_id}:t{iteration}{RETRY_KEY_SUFFIX}",
            role="user",
            content=feedback(problem, self.used, self.allowed),
        )

    def guardrail_retry(self, run_id: str, iteration: int, problem: str) -> PendingEntry:
        """Take one retry for an answer an output guardrail refused."""
        self.used += 1
        return PendingEntry(
            key=f"{run_id}:t{iteration}{RETRY_KEY_SUFFIX}",
            role="user",
            content=(
                "Your final answer was not accepted by a guardrail.\n"
                f"Problem: {_bounded(problem)}\n"
                "Answer again with a final answer that does not have this problem "
                f"(retry {self.used} of {self.allowed})."
            ),
        )

    def event(self, iteration: int, problem: str) -> dict[str, JsonValue]:
        """`output_rejected`: which turn's answer, why, and which retry comes next."""
        return {
            "type": "output_rejected",
            "turn": iteration,
            "problem": _bounded(problem),
            "retry": self.used,
            "retries": self.allowed,
        }


def feedback(problem: str, retry: int, allowed: int) -> str:
    return (
        "Your final answer was not accepted: it does not meet the required result format.\n"
        f"Problem: {_bounded(problem)}\n"
        "Answer again with the corrected final answer only, exactly in the required format "
        f"(retry {retry} of {allowed})."
    )


def invalid_output(turn: ModelTurn, retries: OutputRetries) -> AgentFailure:
    """The run's failure once no retry is left: the last problem, and how many were tried."""
    assert turn.output_error is not None
    tried = f" (after {retries.used} output retries)" if retries.used else ""
    return AgentFailure(
        code=FailureCode.INVALID_AGENT_OUTPUT,
        message=f"{turn.output_error}{tried}",
        retryable=True,
    )


def _bounded(problem: str) -> str:
    if len(problem) <= MAX_PROBLEM_CHARS:
        return problem
    return problem[:MAX_PROBLEM_CHARS] + "…"


__all__ = ["OutputRetries", "feedback", "invalid_output"]
