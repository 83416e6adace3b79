"""Prompt-cache breakpoints of a Messages API request (``cache_control``), for profiles with
`ModelProfile.prompt_cache` on (the default for ``anthropic``).

An agent's turns resend the same prefix (tools, system prompt, the conversation so far) with a
little more at its end. Three breakpoints (of the API's four) mark it: the last tool (caching
the tools), the system prompt (tools and system), and the last block of the last message (the
whole conversation: the next turn reads it back from the cache and writes only what was
added). Cache reads cost a tenth of the input price, writes a quarter more; a prefix shorter
than the model's minimum (1,024 tokens for most) is simply not cached, at no cost.
"""

from __future__ import annotations

from typing import Any

EPHEMERAL = {"type": "ephemeral"}
#: Blocks that cannot carry a breakpoint (the API refuses ``cache_control`` on them).
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def with_cache_breakpoints(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with breakpoints on its tools, system prompt and conversation (a new dict;
    the messages' blocks are copied where marked, never changed in place)."""
    marked = dict(body)
    tools = marked.get("tools")
    if isinstance(tools, list) and tools:
        marked["tools"] = [*tools[:-1], {**tools[-1], "cache_control": EPHEMERAL}]
    system = marked.get("system")
    if isinstance(system, str) and system:
        marked["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    messages = marked.get("messages")
    if isinstance(messages, list) and messages:
        marked["messages"] = [*messages[:-1], _marked_message(messages[-1])]
    return marked


def _marked_message(message: dict[str, Any]) -> dict[str, Any]:
    blocks = message.get("content")
    if not isinstance(blocks, list):
        return message
    for index in range(len(blocks) - 1, -1, -1):
        block = blocks[index]
        if isinstance(block, dict) and block.get("type") not in _UNMARKABLE:
            marked = {**block, "cache_control": EPHEMERAL}
            return {**message, "content": [*blocks[:index], marked, *blocks[index + 1 :]]}
    return message
