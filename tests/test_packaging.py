"""The built wheel installs one namespace, `otherone`, holding every subpackage as real files.

The repository keeps its top-level folders (workflows/, activities/, store/, worker/, client/,
api/) and maps them into `otherone` through relative symlinks; this builds the wheel the way
`pip install` does and checks what a user would get.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("workflows", "activities", "store", "worker", "client", "api")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (built,) = out.glob("otherone_temporal-*.whl")
    return built


def test_wheel_installs_only_the_otherone_namespace(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    dist_info = wheel.name.split("-py")[0] + ".dist-info"
    assert {name.split("/")[0] for name in names} == {"otherone", dist_info}
    for package in SUBPACKAGES:
        # Real files, not links: a wheel cannot carry symlinks.
        assert f"otherone/{package}/__init__.py" in names
    assert "otherone/workflows/agent_run.py" in names
    assert "otherone/store/migrations/alembic.ini" in names
    assert "otherone/store/migrations/versions/0001_baseline.py" in names
    assert "otherone/py.typed" in names
    assert "otherone/api/static/app.js" in names  # the page's assets are package data
    entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert "otherone = otherone.client.cli:main" in entry_points


def test_unpacked_wheel_imports_by_the_short_paths(wheel: Path, tmp_path: Path) -> None:
    """From a folder outside the repository, the wheel's `otherone` serves the public names, and
    none of the old top-level names (`client`, `worker`, ...) exists."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    script = (
        "import importlib.util, otherone\n"
        "from otherone import AgentClient, DevServer, Store, build_worker, connect, tool\n"
        "import otherone.worker.upgrade, otherone.workflows.agent_run\n"
        f"assert otherone.__file__.startswith({str(site)!r}), otherone.__file__\n"
        f"missing = [n for n in {SUBPACKAGES!r} if importlib.util.find_spec(n) is not None]\n"
        "assert not missing, missing\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
