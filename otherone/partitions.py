"""Partition (tenant) names: their pattern and the default.

A module of its own, without pydantic, because the CLI's parser names the default in its help
and `otherone --help` must start fast; `otherone.runs` re-exports both.
"""

PARTITION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
DEFAULT_PARTITION = "local"
