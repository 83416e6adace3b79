"""Handles on runs an `AgentClient` started or looked up: shorthand for the client's calls on
one run id, and (started with ``output_type=``) its output as the validated value.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Generic

from pydantic import TypeAdapter

from otherone.client.typed_results import OutputT, output_as
from otherone.parts import MessageToSend
from otherone.runs import AgentRunResult, RunRecord

if TYPE_CHECKING:
    from otherone.client.agent_client import AgentClient
    from otherone.contracts import EventRecord


class RunHandle:
    """A run started or looked up by an `AgentClient`."""

    def __init__(self, client: AgentClient, run_id: str) -> None:
        self._client = client
        self.run_id = run_id

    async def result(self) -> AgentRunResult:
        return await self._client.result(self.run_id)

    async def cancel(self) -> None:
        await self._client.cancel(self.run_id)

    async def send_message(self, messages: str | Sequence[MessageToSend]) -> None:
        await self._client.send_message(self.run_id, messages)

    async def record(self) -> RunRecord:
        return await self._client.get_run(self.run_id)

    def events(self, *, after: int = 0) -> AsyncIterator[EventRecord]:
        return self._client.events(self.run_id, after=after)


class TypedRunHandle(RunHandle, Generic[OutputT]):
    """A run started with ``output_type=``: `output()` waits for it and returns the validated
    value (`result()` still gives the whole `AgentRunResult`)."""

    def __init__(self, client: AgentClient, run_id: str, adapter: TypeAdapter[OutputT]) -> None:
        super().__init__(client, run_id)
        self._adapter = adapter

    async def output(self) -> OutputT:
        """The output as the output type; `RunFailedError` when the run did not complete,
        `OutputValidationError` when pydantic refuses the value."""
        return output_as(await self.result(), self._adapter)
