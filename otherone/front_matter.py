"""Markdown files with YAML front matter (``SKILL.md``, ``AGENT.md``), read strictly.

python-frontmatter's handler steps are used one by one rather than ``frontmatter.parse``, which
silently treats an unclosed block or a non-mapping as "no metadata": here both are errors that
name the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from frontmatter.default_handlers import YAMLHandler

from otherone.errors import ConfigurationError


def read_text(file: Path, kind: str) -> str:
    """The file's UTF-8 text; a `ConfigurationError` naming it (as a ``kind`` file) otherwise."""
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(f"{kind} file not found", file=str(file)) from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"{kind} file is not valid UTF-8", file=str(file)) from None
    except OSError as error:
        message = f"cannot read {kind} file: {error.strerror or error}"
        raise ConfigurationError(message, file=str(file)) from None


def split_front_matter(file: Path, text: str, expected: str) -> tuple[dict[str, Any], str]:
    """The YAML front matter (a mapping) and the body after it; ``expected`` names the keys
    the error for a file without front matter asks for."""
    handler = YAMLHandler()
    text = text.lstrip("\ufeff")
    if not handler.detect(text):
        raise ConfigurationError(
            f"missing front matter: the file must start with a '---' line, then YAML with "
            f"{expected}, then a closing '---' line",
            file=str(file),
        )
    try:
        block, body = handler.split(text)
    except ValueError:
        message = "front matter is not closed by a '---' line"
        raise ConfigurationError(message, file=str(file)) from None
    try:
        metadata = handler.load(block)
    except yaml.YAMLError as error:
        message = f"front matter is not valid YAML: {one_line(str(error))}"
        raise ConfigurationError(message, file=str(file)) from None
    if not isinstance(metadata, dict):
        raise ConfigurationError("front matter must be a YAML mapping", file=str(file))
    return metadata, body


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
