"""Every script entry point of ours that runs an event loop leaves through ``os._exit``.

Why: a process that used a Temporal client and worker can abort at interpreter exit ("Fatal
Python error: PyGILState_Release", exit 134; temporalio/sdk-python#300), so its exit code lies.
Flushing and calling ``os._exit`` after ``asyncio.run`` skips the teardown where it happens
(/work/shared/TEMPORAL-NOTES.md, "Known crash"). The `otherone` command does it in `main`
(`otherone.client.cli.exits.exit_now`); scripts do it after ``asyncio.run``.
"""

from __future__ import annotations

import ast

from tests.processes import REPO_ROOT

#: Folders whose scripts people or `make` run (tests/histories records histories; the test
#: workers in tests/ are killed by their tests and never exit on their own).
FOLDERS = (
    "activities",
    "api",
    "bench",
    "client",
    "store",
    "worker",
    "workflows",
    "tests/histories",
)

#: Entry points left as they are, and why.
LEFT: dict[str, str] = {}


def _script_main(tree: ast.Module) -> bool:
    """Whether the module has an ``if __name__ == "__main__":`` block."""
    return any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        for node in tree.body
    )


def _calls(tree: ast.Module, dotted: str) -> bool:
    owner, _, name = dotted.partition(".")
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == owner
        for node in ast.walk(tree)
    )


def test_every_script_that_runs_an_event_loop_leaves_through_os_exit() -> None:
    scripts = [
        path
        for folder in FOLDERS
        for path in sorted((REPO_ROOT / folder).glob("*.py"))
        if str(path.relative_to(REPO_ROOT)) not in LEFT
    ]
    looping = []
    for path in scripts:
        tree = ast.parse(path.read_text())
        if _script_main(tree) and _calls(tree, "asyncio.run"):
            looping.append(path)
    assert len(looping) >= 5  # the scan finds the bench scripts and the replay check
    unsafe = [
        str(p.relative_to(REPO_ROOT))
        for p in looping
        if not _calls(ast.parse(p.read_text()), "os._exit")
    ]
    assert not unsafe, f"asyncio.run in a script that does not leave through os._exit: {unsafe}"
