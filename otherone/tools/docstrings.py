"""What a tool's docstring says: its summary and its Google-style ``Args:`` descriptions."""

from __future__ import annotations

import re
from collections.abc import Iterator

_ARGS_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Params)\s*:\s*$")
_ANY_SECTION_RE = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_ARG_ENTRY_RE = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")


def _first_paragraph(doc: str) -> str:
    """The docstring summary, unwrapped into one line; empty if it opens with a section."""
    paragraph = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    lines = [line.strip() for line in paragraph.splitlines()]
    if not lines or _ANY_SECTION_RE.match(lines[0]):
        return ""
    return " ".join(line for line in lines if line)


def _docstring_arguments(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section (continuation lines joined)."""
    descriptions: dict[str, str] = {}
    lines = iter(doc.splitlines())
    for line in lines:
        if _ARGS_SECTION_RE.match(line.strip()):
            _read_args_section(lines, descriptions)
    return descriptions


def _read_args_section(lines: Iterator[str], descriptions: dict[str, str]) -> None:
    """Consume the indented entries after an ``Args:`` header, up to the next dedent."""
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            return
        entry = _ARG_ENTRY_RE.match(line.strip())
        if entry and (entry_indent is None or indent <= entry_indent):
            entry_indent, current = indent, entry["name"]
            descriptions[current] = entry["text"].strip()
        elif current is not None:
            descriptions[current] = f"{descriptions[current]} {line.strip()}".strip()
