"""The examples of README.md and docs/*.md are run, so the documentation cannot drift.

Every fenced block in those files carries a marker on the line right above it, so that each new
block is a decision and nothing is skipped by accident:

- ``<!-- runnable -->`` (optionally ``<!-- runnable: output contains "TEXT" -->``): the block
  is executed here. ``python`` blocks run as a script, ``bash`` blocks with ``bash -e -o
  pipefail``, ``toml`` blocks are loaded as an ``otherone.toml`` (relative to the repository);
- ``<!-- not runnable: REASON -->``: it needs Docker, the internet, a real model key, minutes,
  or it is a synopsis or a fragment; the reason says which.

Runnable blocks run as a newcomer would from a checkout: in a fresh directory holding a link to
the repository's ``otherone/`` (so paths such as ``otherone/examples/otherone.toml`` resolve and
files an example writes stay in the temporary directory), with the venv's ``python`` and
``otherone`` on ``PATH`` and ``OTHERONE_*`` settings pointing at a real Temporal dev server (this
module's own, so no other test's runs are visible to e.g. the upgrade check) with a worker of the
example configuration and a SQLite store.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tomllib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from otherone.definitions import ScriptedFailure, ScriptedToolCall, ScriptedTurn
from otherone.examples import EXAMPLE_CONFIG
from otherone.store import Store
from otherone.toml_config import load_config, parse_config
from otherone.worker.app import build_worker
from tests.harness import start_test_server

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCUMENTS = (README, *sorted((REPO / "docs").glob("*.md")))
TASK_QUEUE = "docs-examples"
EXAMPLE_TIMEOUT_SECONDS = 60

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>[\w-]*)\s*$")
_MARKER = re.compile(
    r"^<!--\s*(?:runnable(?::\s*output contains \"(?P<expect>[^\"]+)\")?"
    r"|not runnable:\s*(?P<reason>\S.*?))\s*-->$"
)


@dataclass(frozen=True)
class Example:
    """One fenced block of a document, with its marker."""

    document: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    marker: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"

    @property
    def runnable(self) -> bool:
        match = _MARKER.match(self.marker)
        return match is not None and match["reason"] is None

    @property
    def expected_output(self) -> str | None:
        match = _MARKER.match(self.marker)
        return match["expect"] if match else None


def examples_of(document: Path) -> Iterator[Example]:
    lines = document.read_text().splitlines()
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        indent = fence["indent"]
        body = [line.removeprefix(indent) for line in lines[index + 1 : end]]
        marker = lines[index - 1].strip() if index > 0 else ""
        yield Example(document, index + 1, fence["language"], "\n".join(body) + "\n", marker)
        index = end + 1


ALL_EXAMPLES = [example for document in DOCUMENTS for example in examples_of(document)]
RUNNABLE = [example for example in ALL_EXAMPLES if example.runnable]


def _runnable(language: str) -> list[Example]:
    return [example for example in RUNNABLE if example.language == language]


def test_first_screen_gives_the_two_commands_and_how_to_install_and_reach_otherone() -> None:
    """The two make commands come first; then how to get `otherone` on the PATH (it is in
    .venv/bin: `command not found` until activated) and how to install without make."""
    first_screen = "\n".join(README.read_text().splitlines()[:25])
    first_block = next(examples_of(README))
    assert "make demo" in first_block.code and "make test" in first_block.code
    for needle in ("source .venv/bin/activate", "command not found", "pip install ."):
        assert needle in first_screen, needle


def test_the_scripted_providers_turn_fields_and_turn_rule_are_documented() -> None:
    """Every field of a scripted turn (and of its failure and tool calls) is in the README's
    section on the scripted provider, with the rule that counts turns per agent and run (it
    was only in a comment of the example configuration)."""
    text = README.read_text()
    start = text.index("### The scripted provider")
    section = " ".join(text[start : text.index("\n## ", start)].split())
    assert "Turn n of an agent is the n-th model call of a run of that agent" in section
    missing = [name for name in ScriptedTurn.model_fields if f"`{name}`" not in section]
    parts = [*ScriptedFailure.model_fields, *ScriptedToolCall.model_fields]
    missing += [name for name in parts if not re.search(rf"\b{name}\b", section)]
    assert not missing, f"scripted turn fields the README does not describe: {missing}"


def test_every_example_is_marked_runnable_or_says_why_not() -> None:
    unmarked = [example.name for example in ALL_EXAMPLES if not _MARKER.match(example.marker)]
    assert not unmarked, (
        "fenced blocks without <!-- runnable --> or <!-- not runnable: REASON --> right above "
        f"them: {unmarked}"
    )
    unknown = [e.name for e in RUNNABLE if e.language not in ("python", "bash", "toml")]
    assert not unknown, f"runnable blocks in a language this test cannot run: {unknown}"
    assert len(ALL_EXAMPLES) > 20 and len(RUNNABLE) >= 8  # the parser found the blocks


# --------------------------------------------------------------------------- the environment


@dataclass(frozen=True)
class DocsServer:
    """A dev server with a worker of the example configuration, and the settings to reach it."""

    settings: dict[str, str]


@pytest_asyncio.fixture(scope="module")
async def docs_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DocsServer]:
    folder = tmp_path_factory.mktemp("docs-server")
    server = await start_test_server()
    store = Store.open(f"sqlite:///{folder / 'store.db'}")
    try:
        async with build_worker(
            server.client, load_config(EXAMPLE_CONFIG), store, task_queue=TASK_QUEUE
        ):
            yield DocsServer(
                {
                    "OTHERONE_TEMPORAL_ADDRESS": server.client.service_client.config.target_host,
                    # The `temporal` CLI's own setting (docs/workflow-contract.md uses it).
                    "TEMPORAL_ADDRESS": server.client.service_client.config.target_host,
                    "OTHERONE_TASK_QUEUE": TASK_QUEUE,
                    "OTHERONE_DATABASE_URL": f"sqlite:///{folder / 'store.db'}",
                    "OTHERONE_DATA_DIR": str(folder / "data"),
                    "OTHERONE_CONFIG": str(EXAMPLE_CONFIG),
                }
            )
    finally:
        store.close()
        await server.shutdown()


def _environment(server: DocsServer) -> dict[str, str]:
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OTHERONE_", "OTEL_"))
    }
    return {
        **inherited,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        **server.settings,
    }


def _checkout_like(directory: Path) -> Path:
    """A working directory where the repository's relative paths resolve."""
    (directory / "otherone").symlink_to(REPO / "otherone", target_is_directory=True)
    return directory


async def _run(command: list[str], example: Example, cwd: Path, env: dict[str, str]) -> str:
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), EXAMPLE_TIMEOUT_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(
            f"{example.name} ran longer than {EXAMPLE_TIMEOUT_SECONDS} s"
        ) from None
    text = output.decode(errors="replace")
    assert process.returncode == 0, f"{example.name} failed:\n{example.code}\n---\n{text[-3000:]}"
    if example.expected_output is not None:
        assert example.expected_output in text, f"{example.name}: output:\n{text[-3000:]}"
    return text


# --------------------------------------------------------------------------- runners


@pytest.mark.parametrize("example", _runnable("python"), ids=lambda example: example.name)
async def test_python_example_runs(
    example: Example, docs_server: DocsServer, tmp_path: Path
) -> None:
    cwd = _checkout_like(tmp_path)
    script = cwd / "example.py"
    script.write_text(example.code)
    await _run([sys.executable, str(script)], example, cwd, _environment(docs_server))


@pytest.mark.parametrize("example", _runnable("bash"), ids=lambda example: example.name)
async def test_shell_example_runs(
    example: Example, docs_server: DocsServer, tmp_path: Path
) -> None:
    cwd = _checkout_like(tmp_path)
    script = cwd / "example.sh"
    script.write_text(example.code)
    await _run(
        ["bash", "-e", "-o", "pipefail", str(script)], example, cwd, _environment(docs_server)
    )


@pytest.mark.parametrize("example", _runnable("toml"), ids=lambda example: example.name)
def test_toml_example_loads(example: Example) -> None:
    config = parse_config(tomllib.loads(example.code), source=example.name, base_dir=REPO)
    assert config.snapshot().agents
    # A stdio MCP server's command is one the project's own set-up installs (`uvx` was not).
    for server in config.mcp_servers.values():
        if server.command is not None:
            installed = Path(sys.executable).parent / server.command
            assert installed.is_file(), f"{example.name}: {server.name}: {server.command}"
