"""Worker log lines (`otherone.worker.logs`): expected failures on one line, bugs with their
traceback, as an operator reading `otherone worker`'s output needs them."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.runs import RunOutcome
from otherone.worker.logs import LOG_FORMAT, ExpectedFailuresOnOneLine
from tests.harness import agent_env, scripted_config


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
