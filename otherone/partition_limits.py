"""Caps of one partition (tenant) on the fleet's capacity: `RuntimeLimits.partitions`.

Fairness between partitions shares a short scope (README "Fleet capacity"); a cap goes further
and bounds what one partition may hold at all, even when capacity is plentiful: a tenant on a
small plan, or one whose burst must never take the whole fleet. Declared per partition key, or
for every partition without its own with the key ``"*"`` (TOML: ``[partitions.<key>]``).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from otherone.partitions import PARTITION_PATTERN
from otherone.run_types import FrozenModel, PositiveCount

#: The key whose caps apply to every partition without caps of its own.
EVERY_PARTITION = "*"


class PartitionLimits(FrozenModel):
    """What one partition's calls may hold of the fleet at once (None: no cap of its own;
    the fleet's limits hold all the same)."""

    max_concurrent_model_calls: PositiveCount | None = None
    max_concurrent_tool_calls: PositiveCount | None = None


def _partition_keys(
    caps: dict[str, PartitionLimits],
) -> dict[str, PartitionLimits]:
    for key in caps:
        if key != EVERY_PARTITION and not re.fullmatch(PARTITION_PATTERN, key):
            raise ValueError(
                f"partitions.{key}: not a partition key (letters, digits and _.:@-, up to 128, "
                f'or "{EVERY_PARTITION}" for every partition)'
            )
    return caps


PartitionCaps = Annotated[dict[str, PartitionLimits], AfterValidator(_partition_keys)]


def caps_of(caps: dict[str, PartitionLimits], partition_key: str) -> PartitionLimits | None:
    """The caps that hold for ``partition_key``: its own, else those of every partition."""
    return caps.get(partition_key) or caps.get(EVERY_PARTITION)
