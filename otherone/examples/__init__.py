"""A ready-to-run example runtime: ``otherone.toml`` plus its tools (offline, deterministic)."""

from __future__ import annotations

from pathlib import Path

#: Path of the example configuration file shipped with the package.
EXAMPLE_CONFIG = Path(__file__).with_name("otherone.toml")

__all__ = ["EXAMPLE_CONFIG"]
