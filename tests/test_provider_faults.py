"""Provider faults during whole runs: each is retried within bounds, and the run completes with
the answer of the attempt that succeeded (never text of a failed attempt), or — when the fault
persists — ends `failed` with `model_error`.

The model is a real HTTP server on 127.0.0.1 speaking the OpenAI streaming wire format
(tests/fixtures/providers/wire_server.py); provider-level classification of each fault is tested
in tests/test_providers_http.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.errors import FailureCode
from otherone.runs import RunOutcome
from tests.fixtures.providers.wire_server import Reply, Seen, WireServer, openai_stream
from tests.harness import agent_env

ANSWER = ["the ", "good ", "answer"]
GOOD = Reply(body=openai_stream(ANSWER), piece_size=17)
HALF = openai_stream(["text of a ", "failed attempt ", "that must vanish"])
FAULTS = {
    "429 with retry-after": Reply.error(
        429, {"error": {"message": "Rate limit reached"}}, **{"retry-after": "1"}
    ),
    "500": Reply.error(500, {"error": {"message": "server error"}}, **{"retry-after-ms": "1"}),
    "502": Reply(status=502, body=b"<html>Bad Gateway</html>", content_type="text/html"),
    "503": Reply.error(503, {"error": {"message": "overloaded"}}, **{"retry-after-ms": "1"}),
    "connection reset": Reply(body=HALF, cut_after=0),
    "stream cut mid-way": Reply(body=HALF, cut_after=len(HALF) // 2, piece_size=20),
    "malformed chunk": Reply(body=b'data: {"choices": [{"delta": {"content": "x"}\n\n'),
    "stall": Reply(body=HALF[: len(HALF) // 2], stall=True),
}


def config(base_url: str) -> RuntimeConfig:
    profile = ModelProfile.model_validate(
        {
            "id": "wire",
            "provider": "local",
            "model": "test-model",
            "base_url": f"{base_url}/v1",
            "other": {"timeout": 1.0},  # the stall is cut after 1 s of silence
        }
    )
    agent = AgentDefinition(id="solo", description="answers")
    return RuntimeConfig(agents=[agent], models=[profile])


class FirstFails:
    """The first request gets the fault, later ones the good stream."""

    def __init__(self, fault: Reply) -> None:
        self.fault = fault
        self.count = 0

    def __call__(self, seen: Seen) -> Reply:
        self.count += 1
        return self.fault if self.count == 1 else GOOD


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_transient_fault_is_retried_and_the_run_completes_with_the_good_answer(
    client: Client, task_queue: str, tmp_path: Path, fault: str
) -> None:
    async with (
        WireServer(FirstFails(FAULTS[fault])) as server,
        agent_env(client, task_queue, config(server.url), tmp_path) as env,
    ):
        result = await env.agents.run(build_request(entry_agent="solo", input="hi"))
        events = [e.event async for e in env.agents.events(result.run_id)]
    assert result.outcome is RunOutcome.COMPLETED, result.failure
    assert result.text == "".join(ANSWER)
    assert len(server.requests) == 2  # one failure, one retry: no more
    starts = [e for e in events if e["type"] == "model_started"]
    assert [e["attempt"] for e in starts] == [1, 2] and starts[1]["supersedes_attempt"] == 1


@pytest.mark.parametrize("fault", ["503", "stream cut mid-way"])
async def test_a_persistent_fault_ends_the_run_failed_with_model_error(
    client: Client, task_queue: str, tmp_path: Path, fault: str
) -> None:
    async with (
        WireServer(lambda seen: FAULTS[fault]) as server,
        agent_env(client, task_queue, config(server.url), tmp_path) as env,
    ):
        result = await env.agents.run(build_request(entry_agent="solo", input="hi"))
    assert result.outcome is RunOutcome.FAILED and result.failure is not None
    assert result.failure.code is FailureCode.MODEL_ERROR
    assert "attempt 5" in result.failure.message
    assert len(server.requests) == 5
