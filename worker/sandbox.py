"""How a worker runs workflow code: `OTHERONE_WORKFLOW_SANDBOX` (docs/operations.md).

Temporal's sandbox re-imports every workflow module for every run, in a fresh module namespace,
and proxies the standard library so that a non-deterministic call (``datetime.now()``,
``random``, ``os.environ``, I/O) fails the workflow task. That guard is what we want while
*developing* workflow code, but its price is paid by every run in production: our workflow
modules' dataclasses and classes are rebuilt (``exec``/``compile``) per run, and every
activation goes through the sandbox's proxies (measured in docs/benchmarks.md).

- ``strict``: the full sandbox, our workflow modules re-imported per run. The test suite runs
  with it (tests/conftest.py), so every test guards the workflow code against
  non-deterministic calls; the replay check of ``otherone upgrade`` uses it too.
- ``passthrough``: the sandbox, with our workflow modules imported once per worker. Note that
  a passed-through module is not proxied, so this checks *our* code no more than ``off`` does.
- ``off`` (default): Temporal's unsandboxed runner. Workflows still run on Temporal's
  deterministic event loop and replay exactly as under the sandbox; what is gone is the
  run-time guard against non-deterministic calls, which the tests (``strict``) and the replay
  suite provide before code ships.

Light on purpose (no Temporal import): `otherone.worker.settings` uses it for the CLI's help.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, get_args

from otherone.errors import ConfigurationError

WorkflowSandbox = Literal["off", "passthrough", "strict"]
WORKFLOW_SANDBOXES: Final[tuple[WorkflowSandbox, ...]] = get_args(WorkflowSandbox)
#: What a production worker runs with unless told otherwise (see the module's doc).
DEFAULT_WORKFLOW_SANDBOX: Final[WorkflowSandbox] = "off"
#: Read by `workflow_sandbox_from_env` (and, with the same name, by `Settings`).
WORKFLOW_SANDBOX_ENV: Final = "OTHERONE_WORKFLOW_SANDBOX"


def parse_workflow_sandbox(value: str) -> WorkflowSandbox:
    """``value`` as a mode (case and surrounding blanks ignored); `ConfigurationError` if none."""
    mode = value.strip().lower()
    for known in WORKFLOW_SANDBOXES:
        if mode == known:
            return known
    raise ConfigurationError(
        f"{WORKFLOW_SANDBOX_ENV}: unknown workflow sandbox {value!r}; "
        f"expected one of {', '.join(WORKFLOW_SANDBOXES)}"
    )


def workflow_sandbox_from_env(environ: Mapping[str, str] | None = None) -> WorkflowSandbox:
    """The mode `OTHERONE_WORKFLOW_SANDBOX` names, else the default (empty counts as unset).

    Without ``environ``, read as `Settings` reads it (the environment, then the ``.env`` files
    of `otherone.worker.settings.ENV_FILES`), so a worker built without a mode runs the one
    the CLI's settings would give it. `build_worker` uses it when not given a mode, so the test
    suite's setting reaches every worker it builds, including those of worker subprocesses."""
    if environ is None:
        # Imported here: `otherone.worker.settings` imports this module for its defaults.
        from otherone.worker.settings import environment_values

        value = environment_values(("workflow_sandbox",)).get("workflow_sandbox", "")
    else:
        value = environ.get(WORKFLOW_SANDBOX_ENV, "")
    return parse_workflow_sandbox(value) if value.strip() else DEFAULT_WORKFLOW_SANDBOX
