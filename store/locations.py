"""Where the store lives by default (no SQLAlchemy here: the CLI's settings name the file)."""

from __future__ import annotations

from pathlib import Path


def default_database_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / 'otherone.db').resolve()}"
