"""Tools imported by reference (``toolbox:<attribute>``) in ``tests/test_tools.py``.

A real module rather than functions defined in the test file, because ``load_tool`` must import
tools by module path exactly as a worker does when reading configuration.
"""

from __future__ import annotations

from otherone.tools import tool

NOT_CALLABLE = 42


def greet(name: str, excited: bool = False) -> str:
    """Greet someone by name.

    Args:
        name: Who to greet.
        excited: Whether to end with an exclamation mark.
    """
    return f"Hello, {name}{'!' if excited else '.'}"


@tool(name="text.shout", timeout_seconds=5)
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def undocumented(value: int) -> int:
    return value


class Namespace:
    """Holds a tool one attribute deeper, to exercise dotted attribute references."""

    @staticmethod
    def double(value: int) -> int:
        """Double a number."""
        return value * 2
