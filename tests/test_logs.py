"""Worker log lines (`otherone.worker.logs`): expected failures on one line, bugs with their
traceback, as an operator reading `otherone worker`'s output needs them."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.runs import RunOutcome
from otherone.worker.logs import LOG_FORMAT, ExpectedFailuresOnOneLine
from tests.harness import agent_env, scripted_config
from tests.processes import REPO_ROOT


@contextmanager
def worker_log() -> Iterator[io.StringIO]:
    """What our handler would print, captured from the root logger."""
    output = io.StringIO()
    handler = logging.StreamHandler(output)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(ExpectedFailuresOnOneLine())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield output
    finally:
        root.removeHandler(handler)


async def test_a_retried_model_failure_is_logged_on_one_line(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    config = scripted_config(
        {"agent": [{"text": "done", "fail": {"attempts": 1, "message": "429 slow down"}}]}
    )
    with worker_log() as output:
        async with agent_env(client, task_queue, config, tmp_path) as env:
            result = await env.agents.run(build_request(entry_agent="agent", input="go"))
    assert result.outcome is RunOutcome.COMPLETED
    lines = [line for line in output.getvalue().splitlines() if "429 slow down" in line]
    assert lines, output.getvalue()
    assert all("model_error: " in line for line in lines), lines
    assert "Traceback" not in output.getvalue()


def test_an_unexpected_error_keeps_its_traceback() -> None:
    with worker_log() as output:
        try:
            {}["missing"]
        except KeyError:
            logging.getLogger("temporalio.activity").warning("activity failed", exc_info=True)
    assert "Traceback" in output.getvalue() and "KeyError" in output.getvalue()


#: A script with an embedded worker and no logging of its own (as README's examples, or
#: `otherone demo`), whose model has no API key: an expected, non-retryable failure.
NO_KEY_SCRIPT = """
import asyncio, sys
from otherone import (AgentClient, AgentDefinition, AgentRunRequest, ModelProfile,
    RuntimeConfig, Store, build_worker, connect)

async def main(address: str, queue: str, url: str) -> None:
    config = RuntimeConfig(
        models=[ModelProfile(id="gpt", provider="openai", model="gpt-4.1-mini",
                             api_key_env="OTHERONE_TEST_NO_SUCH_KEY")],
        agents=[AgentDefinition(id="assistant", description="Answers", model="gpt")],
    )
    temporal = await connect(address)
    store = Store.open(url)
    async with build_worker(temporal, config, store, task_queue=queue):
        agents = AgentClient(temporal, task_queue=queue, store=store)
        result = await agents.run(AgentRunRequest(entry_agent="assistant", input="hi"))
    print(result.outcome.value, result.failure.code.value)

if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
"""


async def test_an_embedded_worker_without_logging_prints_an_expected_failure_on_one_line(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A missing API key was a 41-line chained traceback in a process that configured no
    logging (Python's last-resort handler prints the SDK's WARNING with it)."""
    script = tmp_path / "no_key.py"
    script.write_text(NO_KEY_SCRIPT)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTHERONE_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), client.service_client.config.target_host, task_queue,
        f"sqlite:///{tmp_path / 'store.db'}",
        cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO_ROOT)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    assert stdout.decode().split() == ["failed", "model_error"]
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, stderr.decode()
    assert "Completing activity as failed" in lines[0]
    assert lines[0].endswith(
        "model_error: model 'gpt' (openai): no API key: "
        "environment variable OTHERONE_TEST_NO_SUCH_KEY is not set"
    ), lines[0]
