"""User messages sent to a running run (the `user_messages` signal), queued in workflow state.

They wait until the next safe point of the loop (before a model call, or the run's end), where
they become the session's next user entries. The queue is bounded: the excess, and malformed
payloads, are refused visibly (a warning and a `user_messages_refused` event), never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import PendingEntry, UserMessages
    from otherone.parts import QueuedMessage, TextPart, parts_text
    from otherone.runs import storable_text
    from otherone.workflows.outcomes import DecidedEvents

# Not passed through: the strict sandbox re-imports these with this module and checks them
# for non-deterministic calls (a module imported in the block above escapes that guard).
from otherone.workflows.run_input import validation_problems

MAX_QUEUED_MESSAGES = 256
#: Queued messages travel inline in the next model call's input: together they stay well under
#: Temporal's 2 MB payload limit (the rest of that input is small).
MAX_QUEUED_BYTES = 1024 * 1024


class MessageQueue:
    """The messages of one run waiting for the next safe point (carried over continue-as-new)."""

    def __init__(self, run_id: str, decided: DecidedEvents) -> None:
        self._run_id = run_id
        #: Where refusals are announced (stored with the next activity).
        self._decided = decided
        self.queued: list[QueuedMessage] = []

    def receive(self, raw: RawValue) -> None:
        """Queue the signal's messages; refuse what is malformed or past the limits.

        At most `MAX_QUEUED_MESSAGES` wait at a time (they live in workflow state); the excess
        is refused visibly: a warning now, a `user_messages_refused` event with the next
        model call or the run's end. The payload is decoded here, not by the SDK, which would
        drop a malformed one with nothing on the run to show for it.
        """
        payload = self._decode(raw)
        if payload is None:
            return
        refused = 0
        for message in payload.messages:
            if isinstance(message, tuple):
                if not message:
                    continue
                if not all(isinstance(p, TextPart) or p.is_stored for p in message):
                    refused += 1  # bytes in history: AgentClient stores them first
                    continue
            elif not message.strip():
                continue
            if (
                len(self.queued) < MAX_QUEUED_MESSAGES
                and self._queued_bytes() + _size(message) <= MAX_QUEUED_BYTES
            ):
                self.queued.append(_storable(message))
            else:
                refused += 1
        if refused:
            self._refuse(refused)

    def _refuse(self, refused: int) -> None:
        self._decided.add(
            {
                "type": "user_messages_refused",
                "count": refused,
                "limit": MAX_QUEUED_MESSAGES,
                "limit_bytes": MAX_QUEUED_BYTES,
            }
        )
        workflow.logger.warning(
            "run %s: %d user message(s) refused: at most %d messages or %d bytes wait",
            self._run_id,
            refused,
            MAX_QUEUED_MESSAGES,
            MAX_QUEUED_BYTES,
        )

    def restore(self, carried: Iterable[QueuedMessage]) -> None:
        """After continue-as-new: the carried messages first, then any that came meanwhile."""
        self.queued = [*carried, *self.queued]

    def take(self, iteration: int) -> list[PendingEntry]:
        """A safe point: no tool call is waiting for its results, so user messages may enter."""
        entries = [
            PendingEntry(
                key=f"{self._run_id}:t{iteration}:user:{index}",
                role="user",
                content=message if isinstance(message, str) else parts_text(message),
                queued=True,
                parts=() if isinstance(message, str) else message,
            )
            for index, message in enumerate(self.queued)
        ]
        self.queued.clear()
        return entries

    def _queued_bytes(self) -> int:
        return sum(_size(message) for message in self.queued)

    def _decode(self, raw: RawValue) -> UserMessages | None:
        try:
            decoded = workflow.payload_converter().from_payload(raw.payload, UserMessages)
        except Exception as error:  # malformed JSON, or not a UserMessages
            problem = (
                validation_problems(error)
                if isinstance(error, ValidationError)
                else f"{type(error).__name__}: {error}"
            )
            self._decided.add({"type": "user_messages_refused", "count": 1, "reason": problem})
            workflow.logger.warning(
                "run %s: a user_messages signal was refused: %s", self._run_id, problem
            )
            return None
        return decoded if isinstance(decoded, UserMessages) else None


def _size(message: QueuedMessage) -> int:
    """Bytes a queued message takes in workflow state (parts: their references' JSON)."""
    if isinstance(message, str):
        return len(message.encode("utf-8", "surrogatepass"))
    return sum(len(part.model_dump_json(exclude_none=True)) for part in message)


def _storable(message: QueuedMessage) -> QueuedMessage:
    """AgentClient refuses text no store can hold; a signal from elsewhere gets it replaced."""
    if isinstance(message, str):
        return storable_text(message.strip())
    return tuple(
        part.model_copy(update={"text": storable_text(part.text)})
        if isinstance(part, TextPart)
        else part
        for part in message
    )
