"""What a snapshot's version was before the fields added since 0.1.0 existed, computed by hand
from the list below (deliberately not from `RuntimeSnapshot.with_version`'s own table): a
runtime that uses none of them must keep that version, so runs started before an upgrade find
their stored snapshot. A field added later at its "unused" value goes in this list too."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from otherone.config import RuntimeSnapshot

#: Top-level snapshot fields added since 0.1.0 (left out while empty).
LATER_FIELDS = {
    "guardrails",  # issue 45
    "mcp_servers",
    "mcp_tools",
    "mcp_resources",  # issue 50
    "mcp_instructions",
}
#: Fields added since 0.1.0 inside the policy, the agents, the tools and the limits.
LATER_POLICY = ("guardrails", "hooks", "allow_sleep", "webhook_attempts", "webhook_first_retry")
LATER_AGENT = ("guardrails", "hooks", "sleep", "webhook", "instructions_from")
LATER_TOOL = ("guardrails",)
LATER_LIMITS = ("partitions", "max_sleep")


def version_without_later_fields(snapshot: RuntimeSnapshot) -> str:
    """The version ``snapshot`` hashes to with every later field left out."""
    body: dict[str, Any] = snapshot.model_dump(mode="json", exclude={"version", *LATER_FIELDS})
    for name in LATER_POLICY:
        body["policy"].pop(name)
    for agent in body["agents"].values():
        for name in LATER_AGENT:
            agent.pop(name)
    for tool in body["tools"].values():
        for name in LATER_TOOL:
            tool.pop(name)
    for name in LATER_LIMITS:
        body["limits"].pop(name)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
