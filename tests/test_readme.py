"""The README's examples are runnable: each Python block runs as a script, TOML blocks load."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

from otherone.toml_config import parse_config

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def test_first_screen_gives_the_two_commands() -> None:
    first_screen = "\n".join(README.splitlines()[:25])
    assert "make demo" in first_screen and "make test" in first_screen


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
async def test_python_example_runs(index: int, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_blocks("python")[index])
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, output.decode()[-2000:]
    assert "completed" in output.decode()


@pytest.mark.parametrize("index", range(len(_blocks("toml"))))
def test_toml_example_loads(index: int) -> None:
    config = parse_config(tomllib.loads(_blocks("toml")[index]), source="README.md", base_dir=REPO)
    assert config.snapshot().agents
