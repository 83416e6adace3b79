"""What the CLI's start-up imports (issue 16: `otherone --help` and `otherone show` < 0.5 s).

The time itself is measured by `python -m bench.cli_startup` (a timed test would be flaky on a
loaded machine); these tests keep the heavy imports out of the paths that need none of them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import otherone
import otherone.store

HEAVY = ("sqlalchemy", "temporalio", "otherone.config", "otherone.definitions", "rich")


def loaded_after(code: str) -> list[str]:
    """Which of `HEAVY` (and OpenTelemetry) a fresh interpreter has loaded after ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted({m.split('.')[0] if m.startswith(('sqlalchemy', 'temporalio',"
        " 'rich')) else m for m in sys.modules if m.startswith(%r) or "
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
    assert not {"sqlalchemy", "otherone.config", "opentelemetry"} & set(loaded), loaded


def test_every_public_name_is_still_served() -> None:
    """The packages import their names on first use; each is there, and `import *` works."""
    for package in (otherone, otherone.store):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
    namespace: dict[str, object] = {}
    exec("from otherone import *", namespace)
    assert set(otherone.__all__) <= set(namespace)
