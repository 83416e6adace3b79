"""Built-in hooks.

`redact_pii`: replaces secrets (API keys and tokens of well-known shapes, bearer tokens,
private keys), e-mail addresses and card-like numbers with ``[REDACTED:<kind>]`` in what goes
to the provider (``before_model_call``) or in a tool call's arguments and result
(``before_tool_call`` / ``after_tool_call``). The stored transcript keeps what was said; only
the copy that leaves is redacted. How many were replaced is in the view's metadata
(``redacted``) for a model call: its `model_started` event shows it.
"""

from __future__ import annotations

import re
from typing import Any

from otherone.hooks.spec import ModelCallView, ToolCallView, hook

#: What is replaced, by kind (order matters: secrets before the looser shapes).
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "secret",
        re.compile(
            r"\bsk-[A-Za-z0-9_-]{8,}"
            r"|\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{8,}"
            r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
            r"|\bglpat-[A-Za-z0-9_-]{16,}"
            r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
            r"|\bAKIA[0-9A-Z]{16}\b"
            r"|\bAIza[0-9A-Za-z_-]{30,}"
            r"|\bhf_[A-Za-z0-9]{20,}"
            r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"
            r"|\b[Bb]earer\s+[A-Za-z0-9._~+/=-]{8,}"
            r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
        ),
    ),
    ("email", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")),
    ("card", re.compile(r"\b\d(?:[ -]?\d){12,18}\b")),
)


def redact_text(text: str) -> tuple[str, int]:
    """``text`` with every match replaced, and how many were."""
    count = 0
    for kind, pattern in PATTERNS:
        text, replaced = pattern.subn(f"[REDACTED:{kind}]", text)
        count += replaced
    return text, count


def _redact_value(value: Any) -> tuple[Any, int]:
    """Strings anywhere in a message (content, content parts, tool call arguments)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        pairs = [_redact_value(item) for item in value]
        return [item for item, _ in pairs], sum(count for _, count in pairs)
    if isinstance(value, dict):
        redacted, total = {}, 0
        for key, item in value.items():
            # Roles, ids and names are structure, not content.
            if key in ("role", "id", "tool_call_id", "type", "name"):
                redacted[key] = item
                continue
            redacted[key], count = _redact_value(item)
            total += count
        return redacted, total
    return value, 0


@hook(name="redact_pii")
def redact_pii(view: Any) -> Any:
    """Redact secrets, e-mail addresses and card numbers (model requests and tool calls)."""
    if isinstance(view, ModelCallView):
        messages, count = _redact_value(view.messages)
        view.messages = messages
        metadata = dict(view.metadata)
        metadata["redacted"] = int(metadata.get("redacted") or 0) + count  # type: ignore[arg-type]
        view.metadata = metadata
        return view
    if isinstance(view, ToolCallView):
        view.arguments, _ = redact_text(view.arguments)
        if view.result is not None:
            view.result, _ = redact_text(view.result)
        return view
    return view
