"""End-to-end tests of the ``otherone`` CLI, run as real subprocesses.

Why: the CLI is what people touch first; its exit codes and one-line errors are a contract for
scripts, and its streaming/summary output must keep working against a real Temporal server and
a real worker. The test process hosts the worker (``tests.harness.agent_env``) on the session
dev server; each CLI call is a separate ``python -m otherone.client.cli`` process with
``OTHERONE_*``
settings pointing at that server, task queue and store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from otherone.api.app import Session
from otherone.api.workers import Workers
from otherone.client.agent_client import AgentClient, build_request, root_run_id
from otherone.client.cli.run import text_argument
from otherone.examples import EXAMPLE_CONFIG
from otherone.runs import AgentRunResult, RunOutcome, RunRecord, RunStatus
from otherone.store import Store
from otherone.toml_config import load_config
from otherone.worker.devserver import free_port
from tests.harness import agent_env, wait_until
from tests.processes import (
    REPO_ROOT,
    BackgroundProcess,
    Completed,
    address_of,
    cli_command,
    cli_env,
    otherone,
    start_worker,
)

pytestmark = pytest.mark.timeout(120)

QUESTION = "What's the weather in Paris?"
ANSWER = "sunny in Paris"
TEAM_QUESTION = "Plan a day in Paris: check the weather and draft a short note."
TEAM_ANSWER = "Here is your day in Paris."
RUN_ID = re.compile(r"run id\s+(\S+)")
UI_LINK = re.compile(r"http://127\.0\.0\.1:\d+/namespaces/default/workflows/coordinator-")


def assert_one_line_error(result: Completed, code: int, *needles: str) -> None:
    assert result.code == code, result.describe()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.describe()
    assert lines[0].startswith("error: "), result.describe()
    for needle in needles:
        assert needle in lines[0], result.describe()


@dataclass
class Cli:
    env: dict[str, str]
    agents: AgentClient

    async def __call__(self, *args: str, limit: float = 60.0) -> Completed:
        return await otherone(*args, env=self.env, limit=limit)


@pytest_asyncio.fixture
async def cli(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> AsyncIterator[Cli]:
    """CLI settings for the session server, with a worker for the example config in-process."""
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    store = Store.open(env["OTHERONE_DATABASE_URL"])
    try:
        config = load_config(EXAMPLE_CONFIG)
        async with agent_env(client, task_queue, config, tmp_path, store=store) as agents:
            yield Cli(env, agents.agents)
    finally:
        store.close()


async def test_run_streams_answer_and_prints_summary(cli: Cli) -> None:
    result = await cli("run", "assistant", QUESTION)

    assert result.code == 0, result.describe()
    assert ANSWER in result.stdout  # streamed text is content: stdout
    assert "→ get_weather" in result.stderr and "✓ get_weather" in result.stderr
    assert "completed" in result.stderr
    match = RUN_ID.search(result.stderr)
    assert match, result.describe()
    run_id = match.group(1)
    assert f"/namespaces/default/workflows/{run_id}" in result.stderr
    final = await cli.agents.result(run_id)
    assert final.outcome is RunOutcome.COMPLETED
    assert final.text is not None and ANSWER in final.text


async def test_run_json_prints_only_the_result(cli: Cli) -> None:
    result = await cli("run", "assistant", QUESTION, "--json")

    assert result.code == 0, result.describe()
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.describe()
    parsed = AgentRunResult.model_validate_json(lines[0])
    assert parsed.outcome is RunOutcome.COMPLETED
    assert parsed.text is not None and ANSWER in parsed.text
    assert parsed.usage.model_calls == 2 and parsed.usage.tool_calls == 1


async def test_idempotency_key_returns_same_run_and_conflicts_on_other_text(cli: Cli) -> None:
    first = await cli("run", "assistant", QUESTION, "--json", "--idempotency-key", "k-1")
    second = await cli("run", "assistant", QUESTION, "--json", "--idempotency-key", "k-1")
    assert first.code == 0 and second.code == 0, first.describe() + second.describe()
    run_id = AgentRunResult.model_validate_json(first.stdout).run_id
    assert AgentRunResult.model_validate_json(second.stdout).run_id == run_id

    conflict = await cli("run", "assistant", "Something else", "--idempotency-key", "k-1")
    assert_one_line_error(conflict, 8, "idempotency_conflict", "k-1")

    # The finished run: show (table and JSON); send and cancel are refused (not running).
    table, as_json, send, cancel = await asyncio.gather(
        cli("show", run_id),
        cli("show", run_id, "--json"),
        cli("send", run_id, "hello again"),
        cli("cancel", run_id),
    )
    assert table.code == 0, table.describe()
    assert run_id in table.stdout and "completed" in table.stdout
    assert "assistant" in table.stdout and ANSWER in table.stdout
    assert as_json.code == 0, as_json.describe()
    record = RunRecord.model_validate_json(as_json.stdout)
    assert record.run_id == run_id and record.status is RunStatus.COMPLETED
    assert_one_line_error(send, 3, run_id, "not running")
    assert_one_line_error(cancel, 3, run_id, "not running")


async def test_a_key_temporal_forgot_is_answered_from_the_store(cli: Cli, client: Client) -> None:
    """Beyond Temporal's retention (the run's execution deleted here): the same key gives the
    same run and result, `show` its record, another request exit 8; nothing starts (issue 46)."""
    from tests.test_idempotency_retention import assert_not_in_temporal, forget

    first = await cli("run", "assistant", QUESTION, "--json", "--idempotency-key", "k-kept")
    assert first.code == 0, first.describe()
    original = AgentRunResult.model_validate_json(first.stdout)
    await forget(client, original.run_id)

    again = await cli("run", "assistant", QUESTION, "--json", "--idempotency-key", "k-kept")
    assert again.code == 0, again.describe()
    answer = AgentRunResult.model_validate_json(again.stdout)
    assert (answer.run_id, answer.output) == (original.run_id, original.output)
    shown = await cli("show", original.run_id, "--json")
    assert shown.code == 0, shown.describe()
    assert RunRecord.model_validate_json(shown.stdout).status is RunStatus.COMPLETED
    conflict = await cli("run", "assistant", "Something else", "--idempotency-key", "k-kept")
    assert_one_line_error(conflict, 8, "idempotency_conflict", "k-kept")
    await assert_not_in_temporal(client, original.run_id)


async def test_show_unknown_run_exits_3(cli: Cli) -> None:
    result = await cli("show", "run-does-not-exist")
    assert_one_line_error(result, 3, "run-does-not-exist", "not found")


async def test_team_run_shows_children_live_and_as_a_tree(cli: Cli) -> None:
    result = await cli("run", "coordinator", TEAM_QUESTION)

    assert result.code == 0, result.describe()
    assert TEAM_ANSWER in result.stdout
    # Children's activity: dim lines on stderr, never their text on stdout.
    for needle in (
        "↳ researcher started (call_research)",
        "↳ writer started (call_write)",
        "↳ researcher completed (call_research",
        "↳ writer completed (call_write",
        "  researcher → get_weather",
        "  researcher ✓ get_weather",
    ):
        assert needle in result.stderr, result.describe()
    assert "Looking up the weather" not in result.stdout  # the researcher's own text
    assert "Source: get_weather" not in result.stdout
    match = RUN_ID.search(result.stderr)
    assert match, result.describe()
    run_id = match.group(1)
    assert f"otherone tree {run_id}" in result.stderr  # the summary points at the tree

    as_text, of_child, as_json = await asyncio.gather(
        cli("tree", run_id),
        cli("tree", f"{run_id}/writer.call_write"),
        cli("tree", run_id, "--json"),
    )
    assert as_text.code == 0, as_text.describe()
    lines = as_text.stdout.splitlines()
    root, children = lines[0], lines[1:3]
    assert root.startswith("coordinator  completed"), as_text.describe()
    assert sorted(line[4:].split("  ")[:3] for line in children) == [
        ["researcher", "call_research", "completed"],
        ["writer", "call_write", "completed"],
    ], as_text.describe()
    assert all(line[:4] in ("├── ", "└── ") for line in children), as_text.describe()
    assert "in all: 3 runs · 5 model calls" in as_text.stdout

    assert of_child.code == 0, of_child.describe()  # a child's id shows its root's whole tree
    assert of_child.stdout.startswith("coordinator  completed"), of_child.describe()
    assert "call_write" in of_child.stdout and "◀" in of_child.stdout

    assert as_json.code == 0, as_json.describe()
    records = [RunRecord.model_validate(item) for item in json.loads(as_json.stdout)]
    assert len(records) == 3 and records[0].agent_id == "coordinator"
    assert {record.agent_id for record in records[1:]} == {"researcher", "writer"}
    assert all(record.status is RunStatus.COMPLETED for record in records)
    assert all(record.root_run_id == run_id for record in records)
    assert {record.parent_run_id for record in records[1:]} == {run_id}
    assert {record.agent_call_id for record in records[1:]} == {"call_research", "call_write"}


async def test_tree_of_unknown_run_exits_3(cli: Cli) -> None:
    result = await cli("tree", "run-does-not-exist")
    assert_one_line_error(result, 3, "run-does-not-exist", "not found")


async def test_bad_input_exits_2_naming_the_field(cli: Cli) -> None:
    bad_agent, empty_text, bad_option = await asyncio.gather(
        cli("run", "Bad Agent", "hi"),
        cli("run", "assistant", "   "),
        cli("run", "assistant"),
    )
    assert_one_line_error(bad_agent, 2, "entry_agent")
    assert_one_line_error(empty_text, 2, "input")
    assert_one_line_error(bad_option, 2, "TEXT")


async def test_a_missing_config_an_unknown_runs_approvals_and_a_bad_partition_are_refused(
    cli: Cli, tmp_path: Path
) -> None:
    """A configuration file named but absent is exit 2 for `run` too (it used to start the run
    unchecked); asking what an unknown run waits for is exit 3 (it used to say "nothing"); a
    malformed partition is refused by every command, `sessions` too (it used to list none)."""
    missing = tmp_path / "nowhere.toml"
    no_config, approvals, sessions = await asyncio.gather(
        cli("--config", str(missing), "run", "assistant", QUESTION),
        cli("approvals", "run-does-not-exist"),
        cli("--partition", "bad partition!", "sessions"),
    )
    assert_one_line_error(no_config, 2, f"config file {missing} not found")
    assert_one_line_error(approvals, 3, "run-does-not-exist", "not found")
    assert_one_line_error(sessions, 2, "--partition / OTHERONE_PARTITION", "must be 1-128")
    assert "Value error" not in sessions.stderr


async def test_unreachable_temporal_exits_4_quickly(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = cli_env(address, "unused", tmp_path)
    result = await otherone("run", "assistant", QUESTION, env=env, limit=30)
    assert_one_line_error(result, 4, f"connection refused by Temporal at {address}")
    assert result.elapsed < 15, result.elapsed
    shown = await otherone("show", "run-x", env=env, limit=30)
    assert_one_line_error(shown, 4, address)


async def test_worker_command_runs_agents_and_stops_on_sigterm(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    worker = await start_worker(env)
    try:
        agents = AgentClient(client, task_queue=task_queue)
        handle = await agents.start(build_request(entry_agent="assistant", input=QUESTION))
        result = await asyncio.wait_for(handle.result(), 30)
        assert result.outcome is RunOutcome.COMPLETED
        assert result.text is not None and ANSWER in result.text

        worker.send_signal(signal.SIGTERM)
        assert await worker.exit_code(30) == 0, worker.output
    finally:
        await worker.kill()


async def test_dev_serves_runs_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    env = cli_env(f"127.0.0.1:{port}", "otherone", tmp_path)
    del env["OTHERONE_DATABASE_URL"]  # dev and run share the default store in the data dir
    env.update(OTHERONE_TEMPORAL_PORT=str(port), OTHERONE_UI_PORT=str(ui_port))
    dev = await BackgroundProcess.start(*cli_command("dev"), env=env, cwd=tmp_path, name="dev")
    try:
        await dev.wait_for("ready")
        assert f"http://127.0.0.1:{ui_port}" in dev.output

        result = await otherone("run", "assistant", QUESTION, env=env, cwd=tmp_path)
        assert result.code == 0, result.describe()
        assert ANSWER in result.stdout
        link = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/assistant-"
        assert link in result.stderr

        dev.send_signal(signal.SIGINT)
        assert await dev.exit_code(30) == 0, dev.output
        assert (tmp_path / "data" / "temporal.db").is_file()
    finally:
        await dev.stop(20)  # SIGTERM lets dev stop its server


async def test_commands_in_the_folder_of_dev_reach_it_and_link_to_its_ui(tmp_path: Path) -> None:
    """`otherone dev --port P --ui-port U` leaves P and U in .otherone/dev.env while it runs:
    `otherone run` in the same folder, with no address setting, reaches it and links to U;
    OTHERONE_UI_URL (as compose sets it) wins; the file goes when dev stops. Its pid is in
    .otherone/dev.pid meanwhile (never in the working folder, where it got committed once)."""
    port, ui_port = free_port(), free_port()
    env = cli_env("unused:1", "otherone", tmp_path)
    for name in ("OTHERONE_TEMPORAL_ADDRESS", "OTHERONE_DATABASE_URL", "OTHERONE_DATA_DIR"):
        del env[name]
    env.pop("OTHERONE_CONFIG", None)  # no otherone.toml here: dev runs the example's agents
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "otherone.client.cli", "dev",
        "--port", str(port), "--ui-port", str(ui_port),
        cwd=tmp_path, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    dev_env = tmp_path / ".otherone" / "dev.env"
    try:
        assert process.stdout is not None
        banner = b""
        while b"ready" not in banner:
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            assert line, f"dev exited early: {banner.decode()}"
            banner += line
        assert f"OTHERONE_UI_URL=http://127.0.0.1:{ui_port}".encode() in banner
        assert f"OTHERONE_TEMPORAL_ADDRESS=127.0.0.1:{port}" in dev_env.read_text()
        dev_pid = tmp_path / ".otherone" / "dev.pid"
        assert dev_pid.read_text() == f"{process.pid}\n"
        assert not (tmp_path / "dev.pid").exists()

        result = await otherone("run", "assistant", QUESTION, env=env, cwd=tmp_path)
        assert result.code == 0, result.describe()
        link = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/assistant-"
        assert link in result.stderr
        composed = {**env, "OTHERONE_UI_URL": "http://ui.example:8080/"}
        result = await otherone("run", "assistant", QUESTION, env=composed, cwd=tmp_path)
        assert result.code == 0, result.describe()
        assert "http://ui.example:8080/namespaces/default/workflows/assistant-" in result.stderr
        # Checked against the agents dev runs (its dev.env names its configuration).
        typo = await otherone("run", "asistant", QUESTION, env=env, cwd=tmp_path)
        assert_one_line_error(typo, 2, "asistant")
        # A second dev in the folder (other ports) shared the database and, on stopping,
        # removed the first one's dev.env: it is refused, and the first one unharmed.
        second = await otherone(
            "dev", "--port", str(free_port()), "--ui-port", str(free_port()),
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert_one_line_error(second, 2, f"another `otherone dev` (pid {process.pid}) uses")
        assert dev_env.is_file() and dev_pid.is_file()

        process.send_signal(signal.SIGINT)
        _, rest = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, rest.decode()
        assert not dev_env.exists() and not dev_pid.exists()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()


async def test_a_second_dev_names_every_conflict_and_the_first_gives_every_setting(
    tmp_path: Path,
) -> None:
    """A second `otherone dev` on the first one's ports and folder is told all three at once
    (it was told one, then the next after the user fixed it). The first one's "other commands
    need" is enough for `otherone run` elsewhere to reach it and stream from its store (it left
    out OTHERONE_DATA_DIR: "no event store", and no streaming)."""
    port, ui_port = free_port(), free_port()
    env = cli_env("unused:1", "otherone", tmp_path / "dev", database="unused.db")
    for name in ("OTHERONE_TEMPORAL_ADDRESS", "OTHERONE_DATABASE_URL", "OTHERONE_TASK_QUEUE"):
        del env[name]
    (tmp_path / "dev").mkdir()
    env.update(OTHERONE_TEMPORAL_PORT=str(port), OTHERONE_UI_PORT=str(ui_port))
    dev = await BackgroundProcess.start(
        *cli_command("dev", "--task-queue", "own-queue"), env=env, cwd=tmp_path / "dev"
    )
    try:
        await dev.wait_for("ready")
        second = await otherone("dev", env=env, cwd=tmp_path / "dev")
        assert_one_line_error(
            second, 2, f"port {port} is in use", f"port {ui_port} is in use", "--port",
            "--ui-port", f"another `otherone dev` (pid {dev.pid}) uses", "--data-dir",
        )  # fmt: skip

        [hint] = [line for line in dev.lines if line.startswith("other commands need: ")]
        needed = dict(word.split("=", 1) for word in hint.split(": ", 1)[1].split())
        assert needed["OTHERONE_DATA_DIR"] == str((tmp_path / "dev" / "data").resolve())
        assert needed["OTHERONE_TASK_QUEUE"] == "own-queue"
        elsewhere = {k: v for k, v in env.items() if not k.startswith("OTHERONE_")} | needed
        (tmp_path / "elsewhere").mkdir()
        result = await otherone(
            "run", "assistant", QUESTION, env=elsewhere, cwd=tmp_path / "elsewhere"
        )
        assert result.code == 0, result.describe()
        assert "no event store" not in result.stderr, result.describe()
        assert ANSWER in result.stdout
    finally:
        await dev.stop(20)  # SIGTERM lets dev stop its server


async def test_a_dev_server_that_cannot_start_shows_its_log(tmp_path: Path) -> None:
    """The Temporal server's own complaint reaches the terminal, not only "exited with code 1"."""
    env = cli_env("unused:1", "otherone", tmp_path)
    (tmp_path / "data" / "temporal.db").mkdir(parents=True)  # a folder: no database there
    result = await otherone(
        "dev", "--port", str(free_port()), "--ui-port", str(free_port()), env=env, cwd=tmp_path
    )
    assert result.code == 4, result.describe()
    assert "last lines of the server's log" in result.stderr, result.describe()
    assert len(result.stderr.strip().splitlines()) > 2, result.describe()


async def test_run_names_the_run_at_once_and_reads_long_input_from_a_file_or_stdin(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Input over the OS's ~128 KiB argument limit comes from @FILE or stdin (-); the run id
    and link are printed as soon as the run starts, before its output."""
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    question = QUESTION + " " + "x" * 200_000
    (tmp_path / "question.txt").write_text(question)
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path):
        from_file = await otherone("run", "assistant", "@question.txt", env=env, cwd=tmp_path)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "otherone.client.cli", "run", "assistant", "-", "--json",
            env=env, cwd=tmp_path, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(process.communicate(question.encode()), 60)
        missing = await otherone("run", "assistant", "@absent.txt", env=env, cwd=tmp_path)
    assert from_file.code == 0, from_file.describe()
    started = re.search(
        r"run (assistant-[\w-]+) started · http://\S+/workflows/\1", from_file.stderr
    )
    assert started, from_file.describe()
    assert from_file.stderr.index("started") < from_file.stderr.index("✓ completed")
    assert process.returncode == 0, stderr.decode()
    result = json.loads(stdout)
    assert result["outcome"] == "completed"
    agents = AgentClient(client, task_queue=task_queue)
    for run_id in (started.group(1), result["run_id"]):
        record = await agents.get_run(run_id)
        assert record is not None
    assert_one_line_error(missing, 2, "TEXT: cannot read absent.txt")


async def test_every_command_honours_the_partition(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """--partition / OTHERONE_PARTITION scope the CLI as they scope AgentClient: a run of
    another partition does not exist for it; --all-partitions is the operator's way around."""
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)
    acme, globex = {**env, "OTHERONE_PARTITION": "acme"}, {**env, "OTHERONE_PARTITION": "globex"}
    async with agent_env(client, task_queue, load_config(EXAMPLE_CONFIG), tmp_path):
        started = await otherone(
            "run", "assistant", QUESTION, "--partition", "acme", "--json", env=env
        )
        assert started.code == 0, started.describe()
        run_id = json.loads(started.stdout)["run_id"]
        own = await otherone("show", run_id, env=acme)
        other = {
            name: await otherone(name, run_id, env=globex)
            for name in ("show", "tree", "watch", "cancel")
        }
        other["send"] = await otherone("send", run_id, "more", env=globex)
        operator = await otherone("show", run_id, "--all-partitions", env=globex)
        sessions = await otherone("sessions", "--json", env=acme)
        none = await otherone("sessions", "--json", env=globex)
    assert own.code == 0, own.describe()
    for name, result in other.items():
        assert_one_line_error(result, 3, run_id), name
    assert operator.code == 0, operator.describe()
    assert [info["partition_key"] for info in json.loads(sessions.stdout)] == ["acme"]
    # The same fields as the HTTP API's `GET /v1/sessions`.
    assert set(json.loads(sessions.stdout)[0]) == set(Session.model_fields)
    assert json.loads(none.stdout) == []


async def test_workers_lists_the_queues_pollers_as_the_http_api_does(cli: Cli) -> None:
    """`otherone workers` answers what `GET /v1/workers` answers (the same function): the
    worker the fixture runs polls the queue; nobody polls another one, and the text says so."""
    answered = await cli("workers", "--json")
    assert answered.code == 0, answered.describe()
    found = Workers.model_validate_json(answered.stdout)
    assert found.task_queue == cli.env["OTHERONE_TASK_QUEUE"]
    assert found.live_workflow_pollers >= 1 and found.live_activity_pollers >= 1
    assert {poller.kind for poller in found.pollers} == {"workflow", "activity"}
    assert any(poller.identity.startswith(f"{os.getpid()}@") for poller in found.pollers)

    shown = await cli("workers")
    assert shown.code == 0, shown.describe()
    assert re.search(r"^workflows +\d+ live workers?$", shown.stdout, re.M), shown.describe()
    assert f"{os.getpid()}@" in shown.stdout and "no worker polls" not in shown.stderr

    idle = await otherone("workers", "--task-queue", "nobody-polls", env=cli.env)
    assert idle.code == 0, idle.describe()
    assert "workflows   0 live workers" in idle.stdout, idle.describe()
    assert "note: no worker polls task queue nobody-polls" in idle.stderr, idle.describe()


async def test_demo_runs_offline_and_prints_ui_link(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTHERONE_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    port, ui_port = free_port(), free_port()  # the settings' flags are honoured
    result = await otherone(
        "demo", "--port", str(port), "--ui-port", str(ui_port), env=env, limit=90, cwd=tmp_path
    )

    assert result.code == 0, result.describe()
    assert f"Temporal 127.0.0.1:{port} · Web UI http://127.0.0.1:{ui_port}" in result.stderr
    assert TEAM_ANSWER in result.stdout and "sunny" in result.stdout
    assert "↳ researcher started (call_research)" in result.stderr
    assert "↳ writer started (call_write)" in result.stderr
    # The run tree (stdout): the coordinator and both children it called, all completed.
    tree = result.stdout[result.stdout.index("coordinator  completed") :]
    assert re.search(r"[├└]── researcher  call_research  completed", tree), result.describe()
    assert re.search(r"[├└]── writer  call_write  completed", tree), result.describe()
    assert "✓ completed  coordinator" in result.stderr
    assert UI_LINK.search(result.stderr), result.describe()
    assert "that link goes dead: `otherone demo --keep`" in result.stderr
    # One duration per run everywhere: the live line and the tree give the child's own.
    for agent, call in (("researcher", "call_research"), ("writer", "call_write")):
        live = re.search(rf"↳ {agent} completed \({call}, ([0-9.]+) s\)", result.stderr)
        node = re.search(rf"── {agent}  {call}  completed  .* ([0-9.]+) s$", tree, re.M)
        assert live and node and live.group(1) == node.group(1), result.describe()
    # The researcher was spawned (in the background) and collected with agent.await.
    assert "→ agent.spawn" in result.stderr and "✓ agent.await" in result.stderr
    assert re.search(r"in all: 3 runs · 6 model calls · 4 tool calls · 2 agent calls", tree)
    assert not (tmp_path / ".otherone").exists()  # the demo leaves nothing behind


def test_live_view_of_children_is_stderr_only_indented_and_shown_once() -> None:
    """Children: started/ended lines and tool lines on stderr, by depth; their text never."""
    import io
    from datetime import UTC, datetime, timedelta

    from otherone.client.console import EventPrinter, make_console
    from otherone.contracts import EventRecord

    root = "run-r"
    start = datetime(2025, 1, 1, tzinfo=UTC)
    events: list[EventRecord] = []

    def event(run_id: str, agent_id: str, depth: int, **body: object) -> None:
        parent = None if depth == 0 else run_id.rpartition("/")[0]
        events.append(
            EventRecord.model_validate(
                {
                    "event_id": str(len(events)),
                    "sequence": len(events) + 1,
                    "timestamp": start + timedelta(milliseconds=100 * len(events)),
                    "root_run_id": root,
                    "run_id": run_id,
                    "parent_run_id": parent,
                    "agent_id": agent_id,
                    "depth": depth,
                    "event": body,
                }
            )
        )

    research, deep = f"{root}/call_a", f"{root}/call_a/call_b"
    event(root, "boss", 0, type="model_delta", content="Asking.", turn=1, attempt=1)
    event(root, "boss", 0, type="agent_call_started", call_id="call_a", target="researcher")
    event(root, "boss", 0, type="agent_call_started", call_id="call_a", target="researcher")
    event(root, "boss", 0, type="agent_call_started", call_id="call_w", target="writer")
    event(
        root,
        "boss",
        0,
        type="agent_call_completed",
        call_id="call_w",
        target="writer",
        outcome="failed",
        code="agent_call_denied",
    )
    event(research, "researcher", 1, type="model_delta", content="SECRET", turn=1, attempt=1)
    event(research, "researcher", 1, type="agent_call_started", call_id="call_b", target="fact")
    event(deep, "fact", 2, type="tool_started", tool_name="lookup", arguments='{"q": 1}')
    event(deep, "fact", 2, type="tool_completed", tool_name="lookup", error="boom")
    failure = {"code": "budget_exceeded", "message": "max_iterations (1)"}
    event(deep, "fact", 2, type="run_failed", status="budget_exceeded", failure=failure)
    event(research, "researcher", 1, type="run_completed")
    for call_id, target in (("call_a", "researcher"), ("call_w", "writer")):
        event(
            root,
            "boss",
            0,
            type="agent_call_completed",
            call_id=call_id,
            target=target,
            outcome="completed" if call_id == "call_a" else "failed",
            child_run_id=f"{root}/{call_id}" if call_id == "call_a" else None,
        )
    event(root, "boss", 0, type="model_delta", content="Done.", turn=2, attempt=1)

    out, err = io.StringIO(), io.StringIO()
    printer = EventPrinter(root, out, make_console(err))
    for record in events:
        printer.handle(record)
    printer.finish()

    assert out.getvalue() == "Asking.\nDone.\n"
    assert err.getvalue().splitlines() == [
        "↳ researcher started (call_a)",
        "↳ writer started (call_w)",
        "↳ writer failed (call_w, 0.10 s): agent_call_denied",
        "  ↳ fact started (call_b)",
        '    fact → lookup {"q": 1}',
        "    fact ✗ lookup: boom",
        "  ↳ fact budget exceeded (call_b, 0.30 s): budget_exceeded: max_iterations (1)",
        "↳ researcher completed (call_a, 0.90 s)",
    ]
    assert printer.last_turn_text == "Done."


def test_help_documents_exit_codes_and_settings() -> None:
    import subprocess

    result = subprocess.run(
        cli_command("worker", "--help"),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for needle in (
        "--address",
        "--namespace",
        "--task-queue",
        "--database-url",
        "--data-dir",
        "--config",
        "--max-concurrent-activities",
        "OTHERONE_TEMPORAL_ADDRESS",
        "130",
        "idempotency conflict",
    ):
        assert needle in result.stdout, needle


async def test_interrupted_run_keeps_going_and_can_be_steered(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Ctrl-C detaches from a run (exit 130); send and cancel reach it while it is running."""
    env = cli_env(address_of(temporal_env), task_queue, tmp_path)  # no worker on this queue
    key = f"interrupt-{task_queue}"
    run_id = root_run_id(
        build_request(entry_agent="assistant", input=QUESTION, idempotency_key=key)
    )
    run = await BackgroundProcess.start(
        *cli_command("run", "assistant", QUESTION, "--idempotency-key", key), env=env, name="run"
    )
    try:

        async def started() -> bool:
            try:
                await client.get_workflow_handle(run_id).describe()
            except RPCError:
                return False
            return True

        await wait_until(started, within=30, message="the run to start")
        run.send_signal(signal.SIGINT)
        assert await run.exit_code(30) == 130, run.output
        assert f"run {run_id} keeps going" in run.output

        send = await otherone("send", run_id, "one more thing", "and another", env=env)
        assert send.code == 0, send.describe()
        assert "queued 2 messages" in send.stderr
        cancel = await otherone("cancel", run_id, env=env)
        assert cancel.code == 0, cancel.describe()
        assert f"cancellation requested for run {run_id}" in cancel.stderr
    finally:
        await run.kill()
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(run_id).terminate("test cleanup")


def test_a_message_may_start_with_an_at_sign(tmp_path: Path) -> None:
    """``@FILE`` reads a file; ``@@`` is a literal ``@`` (a mention used to read a file named
    after it, or fail)."""
    (tmp_path / "note.txt").write_text("from a file", encoding="utf-8")
    assert text_argument(f"@{tmp_path / 'note.txt'}", "TEXT") == "from a file"
    assert text_argument("@@alice hi", "TEXT") == "@alice hi"
    assert text_argument("@", "TEXT") == "@"


def test_run_sets_the_sessions_context_window() -> None:
    """`otherone run --context-window N`: the window compaction keeps a session under (the
    request's `session.context_window`; there was no way to set it from the CLI)."""
    from otherone.client.cli.parser import build_parser
    from otherone.client.cli.run import _request_from

    args = build_parser().parse_args(["run", "assistant", "hi", "--context-window", "64000"])
    request = _request_from(args, None)
    assert (request.session.context_window, request.session.session_id) == (64000, None)
    plain = _request_from(build_parser().parse_args(["run", "assistant", "hi"]), None)
    assert plain.session.context_window == 8192
