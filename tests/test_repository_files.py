"""Run-time files cannot be committed: `otherone dev`'s and the README examples' files are
ignored by git, and none is tracked.

Why: a ``dev.pid`` left by a local `otherone dev` was committed at the repository's root; the
examples leave SQLite stores (``quickstart.db``, ...) and files such as ``run.json`` in the
folder they run from, which the README says is the repository's root.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

#: What `otherone dev` writes in its data folder (default .otherone/), and where a pid or env
#: file of a hand-started dev would land.
DEV_FILES = (
    ".otherone/dev.pid",
    ".otherone/dev.env",
    ".otherone/dev.lock",
    ".otherone/temporal.db",
    ".otherone/temporal.log",
    ".otherone/otherone.db",
    ".otherone/otherone.db-wal",
    "dev.pid",
    "dev.env",
    ".env",
)

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout"
)


def files_the_readme_writes() -> set[str]:
    """Stores its Python examples open (``sqlite:///NAME``) and files its shell examples write
    (``> NAME``, ``cp ... .``) in the working folder."""
    text = README.read_text()
    stores = set(re.findall(r"sqlite:///([\w.-]+)", text))
    written = set(re.findall(r">>? ?([\w-]+\.\w+)\b", text))
    copied = {Path(name).name for name in re.findall(r"^cp (\S+) \.$", text, re.M)}
    return stores | written | copied


def git(*args: str) -> list[str]:
    done = subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30, check=False
    )
    return done.stdout.split()


def test_run_time_files_are_ignored_and_none_is_tracked() -> None:
    names = sorted(files_the_readme_writes() | set(DEV_FILES))
    assert {"quickstart.db", "run.json", "otherone.toml"} <= set(names)  # the scan found them
    ignored = set(git("check-ignore", "--no-index", *names))
    assert not set(names) - ignored, "not in .gitignore"
    assert not git("ls-files", "--cached", "--ignored", "--exclude-standard")
