"""What the CLI's start-up imports (issue 16: `otherone --help` and `otherone show` < 0.5 s).

The time itself is measured by `python -m bench.cli_startup` (a timed test would be flaky on a
loaded machine); these tests keep the heavy imports out of the paths that need none of them.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

import otherone
import otherone.store
from otherone.client.agent_client import build_request
from otherone.runs import RunRecord
from otherone.store import Store
from tests.harness import agent_env, scripted_config
from tests.processes import address_of, cli_env
from tests.test_artifacts import BIG_LIMITS, agent

HEAVY = (
    "sqlalchemy",
    "temporalio",
    "otherone.config",
    "otherone.definitions",
    "rich",
    "pydantic_settings",
    "cryptography",
    "otherone.contracts",
    "otherone.tools",
)

#: Modules a `show` (of an unencrypted run) never loads: the codec's cryptography, the live view
#: of `watch`, the dev server, pydantic-settings (Settings read the environment themselves), the
#: declaration and contract models (a record needs `otherone.run_types` only).
UNUSED_BY_SHOW = (
    "cryptography",
    "otherone.client.watch",
    "otherone.client.watch_render",
    "otherone.client.watch_state",
    "otherone.contracts",
    "otherone.definitions",
    "otherone.tools",
    "otherone.worker.devserver",
    "pydantic_settings",
)


def loaded_after(code: str) -> list[str]:
    """Which of `HEAVY` (and OpenTelemetry) a fresh interpreter has loaded after ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted({m.split('.')[0] if m.startswith(('sqlalchemy', 'temporalio',"
        " 'rich', 'cryptography')) else m for m in sys.modules if m.startswith(%r) or "
        "m.startswith('opentelemetry')})))" % (HEAVY,)
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_help_loads_neither_temporal_nor_the_store_nor_the_domain_models() -> None:
    code = (
        "import contextlib, io\n"
        "from otherone.client.cli import run_cli\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    assert run_cli(['--help']) == 0\n"
        "assert 'otherone' in out.getvalue()"
    )
    assert loaded_after(code) == []


def test_show_loads_temporal_but_neither_sqlalchemy_nor_opentelemetry() -> None:
    loaded = loaded_after("import otherone.client.cli.show")
    assert "temporalio" in loaded  # it needs the client; the rest only when used
    unwanted = {"sqlalchemy", "otherone.config", "opentelemetry", *UNUSED_BY_SHOW}
    assert not unwanted & set(loaded), loaded


def test_every_public_name_is_still_served() -> None:
    """The packages import their names on first use; each is there, and `import *` works."""
    for package in (otherone, otherone.store):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
    namespace: dict[str, object] = {}
    exec("from otherone import *", namespace)
    assert set(otherone.__all__) <= set(namespace)


async def test_show_opens_the_default_store_only_for_an_output_stored_as_an_artifact(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """With the default SQLite file (what `otherone dev` leaves), `show` of a run with an
    inline output skips SQLAlchemy, and an output stored as an artifact is still shown whole."""
    big = "x" * 300_000  # over the inline limit: stored as an artifact
    data = tmp_path / "data"
    data.mkdir()
    store = Store.open(f"sqlite:///{data / 'otherone.db'}")
    config = scripted_config(
        {"writer": [big], "short": ["small answer"]},
        agents=[agent("writer"), agent("short")],
        limits=BIG_LIMITS,
    )
    async with agent_env(client, task_queue, config, tmp_path, store=store) as env:
        large = await env.agents.run(build_request(entry_agent="writer", input="write"))
        small = await env.agents.run(build_request(entry_agent="short", input="write"))
    store.close()
    env_vars = cli_env(address_of(temporal_env), task_queue, tmp_path)
    del env_vars["OTHERONE_DATABASE_URL"]  # the default file in the data dir
    env_vars["OTHERONE_DATA_DIR"] = str(data)
    shown: dict[str, tuple[RunRecord, bool]] = {}
    # A missing run (exit 3) too: reporting it loads none of UNUSED_BY_SHOW either.
    for run_id, exit_code in ((large.run_id, 0), (small.run_id, 0), ("run-absent", 3)):
        code = (
            "import contextlib, io, sys\n"
            "from otherone.client.cli import exit_now, run_cli\n"
            f"UNUSED_BY_SHOW = {UNUSED_BY_SHOW!r}\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    assert run_cli(['show', {run_id!r}, '--json']) == {exit_code}\n"
            "print(out.getvalue().strip() or '{}')\n"
            "print('sqlalchemy' in sys.modules)\n"
            "print(sorted(m for m in UNUSED_BY_SHOW if m in sys.modules))\n"
            # As `otherone` itself does (`main`): a short-lived process that used Temporal's
            # client may abort in interpreter teardown (temporalio/sdk-python#300).
            "exit_now(0)"
        )
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", code],
            env=env_vars,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (done.returncode, done.stderr[-4000:])
        record_line, loaded, unused = done.stdout.strip().splitlines()[-3:]
        if loaded == "False":  # the store (for an artifact) needs the contract models
            assert unused == "[]", (run_id, unused)
        if exit_code == 0:
            shown[run_id] = (RunRecord.model_validate_json(record_line), loaded == "True")
    large_record, large_loaded = shown[large.run_id]
    small_record, small_loaded = shown[small.run_id]
    assert large_record.output is not None and large_record.output.value == big
    assert large_loaded  # the artifact was read from the store
    assert small_record.output is not None and small_record.output.value == "small answer"
    assert not small_loaded
