"""Guardrails the guardrail tests (and the replay scenario) register, with a ledger of what
they and the guarded tool did: a tool that ran leaves a line in `SIDE_EFFECTS`."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from otherone.guardrails import GuardrailCheck, GuardrailResult, guardrail
from otherone.tools import tool

#: What the guarded tool did (appended only when it really ran).
SIDE_EFFECTS: list[str] = []
#: Attempts of the flaky guardrail (by run id).
ATTEMPTS: dict[str, int] = {}
_LOCK = threading.Lock()


@tool
def send_money(to: str, amount: int) -> str:
    """Send money to someone (a side effect: recorded in the ledger)."""
    SIDE_EFFECTS.append(f"sent {amount} to {to}")
    return f"sent {amount} to {to}"


#: Events a test creates (in its own loop) for `slow_no_secrets` to wait on.
GATES: dict[str, asyncio.Event] = {}


@guardrail
async def slow_no_secrets(check: GuardrailCheck) -> GuardrailResult:
    """`no_secrets`, deciding only once the test opens ``GATES["slow"]``."""
    await GATES["slow"].wait()
    return no_secrets.function(check)  # type: ignore[no-any-return]


#: Contacts looked up (the tool ran).
LOOKUPS: list[str] = []


@tool
def lookup_contact(name: str) -> dict[str, str]:
    """Look up a contact's e-mail address."""
    LOOKUPS.append(name)
    return {"name": name, "email": f"{name}@example.com"}


@guardrail
def no_contact_details(check: GuardrailCheck) -> GuardrailResult:
    """Tool result: trips on an e-mail address (the model must not see it)."""
    assert check.kind == "tool_result"
    if "@" in check.text:
        return GuardrailResult.trip("the result holds an e-mail address")
    return GuardrailResult.passed()


@guardrail
def no_secrets(check: GuardrailCheck) -> GuardrailResult:
    """Input: trips on a message that carries a password."""
    if "password" in check.text.lower():
        return GuardrailResult.trip("the message carries a password", {"word": "password"})
    return GuardrailResult.passed()


@guardrail
async def polite_answer(check: GuardrailCheck) -> GuardrailResult:
    """Output: trips on a rude answer (async, to cover both kinds of functions)."""
    if "stupid" in check.text.lower():
        return GuardrailResult.trip("the answer is rude")
    return GuardrailResult.passed()


@guardrail
def small_amounts(check: GuardrailCheck) -> GuardrailResult:
    """Tool: trips on a transfer over 100."""
    arguments: dict[str, Any] = dict(check.arguments or {})
    if int(arguments.get("amount", 0)) > 100:
        return GuardrailResult.trip(f"amount {arguments['amount']} is over 100")
    return GuardrailResult.passed()


@guardrail(max_attempts=2, timeout_seconds=10)
def always_raises(check: GuardrailCheck) -> GuardrailResult:
    """Keeps failing: the run must fail after its two attempts, never hang."""
    with _LOCK:
        ATTEMPTS[check.run_id] = ATTEMPTS.get(check.run_id, 0) + 1
    raise RuntimeError("classifier unreachable")


@guardrail
def wrong_type(check: GuardrailCheck) -> Any:
    """Returns a bool instead of a GuardrailResult."""
    return True


ALL_GUARDRAILS = [
    no_secrets,
    polite_answer,
    small_amounts,
    always_raises,
    wrong_type,
    no_contact_details,
    slow_no_secrets,
]
