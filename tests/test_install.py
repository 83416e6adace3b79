"""What a newcomer installs: `make demo` only what running needs, `make test` the development
toolchain on top; the demo runs without any of the development packages.

Why: `make demo` installed the whole toolchain (~110 packages: mypy, ruff, playwright,
hypothesis, ...) just to try the product.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from otherone.worker.devserver import free_port
from tests.processes import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def planned(target: str, tmp_path: Path) -> str:
    """The commands `make TARGET` would run for a fresh clone (a venv that does not exist)."""
    done = subprocess.run(
        ["make", "-n", f"VENV={tmp_path / 'venv'}", target],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_installs_what_running_needs_and_make_test_the_dev_tools(
    tmp_path: Path,
) -> None:
    demo, test = planned("demo", tmp_path), planned("test", tmp_path)
    assert "pip install -e ." in demo and "[dev]" not in demo, demo
    assert "otherone demo" in demo
    assert "pip install -e '.[dev]'" in test and "pytest" in test, test


def _distributions(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(line).name) for line in requirements}


@cache
def _closure(name: str) -> frozenset[str]:
    """``name`` and every distribution it needs (without extras), as installed here."""
    found = {name}
    for line in metadata.requires(name) or ():
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found |= _closure(canonicalize_name(requirement.name))
    return frozenset(found)


def dev_only_modules() -> set[str]:
    """Top-level modules of the `dev` extras that nothing running needs (pytest, mypy, ...)."""
    running: set[str] = set()
    for name in _distributions(PYPROJECT["dependencies"]):
        running |= _closure(name)
    dev_only = _distributions(PYPROJECT["optional-dependencies"]["dev"]) - running
    return {
        module
        for module, owners in metadata.packages_distributions().items()
        if dev_only & {canonicalize_name(owner) for owner in owners}
    }


#: Runs `otherone demo ARGS` in a process where importing a dev-only module fails.
WITHOUT_DEV_TOOLS = """
import importlib.abc, sys
blocked = set(sys.argv[1].split(","))

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ImportError(f"{name} is a development package (pyproject's dev extras)")
        return None

sys.meta_path.insert(0, Blocked())
from otherone.client.cli import main
main(sys.argv[2:])
"""


def test_the_demo_needs_no_development_package(tmp_path: Path) -> None:
    blocked = dev_only_modules()
    assert {"pytest", "mypy", "hypothesis", "playwright"} <= blocked  # the scan works
    command = [sys.executable, "-c", WITHOUT_DEV_TOOLS, ",".join(sorted(blocked)), "demo"]
    ports = ["--port", str(free_port()), "--ui-port", str(free_port())]
    done = subprocess.run(
        [*command, *ports], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(REPO_ROOT)},
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "coordinator  completed" in done.stdout
