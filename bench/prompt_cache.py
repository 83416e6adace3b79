"""Input tokens billed at full price in a 20-turn run, with and without prompt caching.

    python -m bench.prompt_cache [--turns 20]

One agent on an ``anthropic`` profile calls a tool on each of its first turns (a 2 kB result
each) and answers on the last; its system prompt is about 1,500 tokens. The same run is made
twice on one worker (in-memory dev server): with the profile's ``prompt_cache`` on (the
default: breakpoints on tools, system prompt and conversation) and off.

The model is a stand-in that bills as Anthropic's prompt cache does: it builds the request's
real JSON body (`messages_body`, breakpoints included), counts ~4 characters a token, and
answers in the Messages API's streaming format, parsed by the real `MessagesState`:

- each ``cache_control`` breakpoint writes the prefix up to it (``cache_creation_input_tokens``)
  unless it is already cached, when the prompt is at least 1,024 tokens long;
- the longest prefix already cached, at a block boundary within 20 blocks before a breakpoint
  (the API's lookback), is read (``cache_read_input_tokens``);
- the rest is ``input_tokens``, at full price.

Printed: full-price, cache-read and cache-write input tokens of each run, and its cost at
Claude Sonnet 4.5's prices ($3 input, $0.30 cache read, $3.75 cache write, $15 output per
million tokens), exactly as the run's usage records it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from temporalio.client import Client

from otherone.activities.providers.anthropic import MessagesState, messages_body
from otherone.activities.providers.base import ModelRequest, StreamEvent
from otherone.activities.providers.sse import SSEDecoder
from otherone.client.agent_client import AgentClient, build_request
from otherone.config import RuntimeConfig
from otherone.definitions import AgentDefinition, ModelProfile, RuntimeLimits
from otherone.runs import RunOutcome, RunUsage
from otherone.store import Store
from otherone.tools import tool
from otherone.wire_names import WireNames
from otherone.worker.app import build_worker, connect
from otherone.worker.devserver import DevServer

#: The API caches no prompt shorter than this (most Claude models).
MIN_CACHEABLE_TOKENS = 1024
#: How many block boundaries before a breakpoint the API looks back for a cached prefix.
LOOKBACK_BLOCKS = 20
SONNET_PRICES = {"input": "3", "output": "15", "cache_read": "0.30", "cache_write": "3.75"}
#: Claude's context window: the run's context is never compacted (no summary calls).
CONTEXT_WINDOW = 200_000
SYSTEM_PROMPT = "You research carefully and answer briefly. " * 140  # ~1,500 tokens


@tool
async def lookup(n: int) -> str:
    """Look a thing up (2 kB of findings)."""
    return f"finding {n}: " + "the data says so. " * 110


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


@dataclass
class CachingAnthropic:
    """A stand-in Anthropic model billing prompt caching as the API does (module docstring).
    Caches are kept per profile, so the two arms never share one."""

    turns: int
    caches: dict[str, set[str]] = field(default_factory=dict)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if request.purpose != "turn":
            raise RuntimeError(f"the stand-in answers turns only, not a {request.purpose}")
        names = WireNames(str(t.get("function", {}).get("name", "")) for t in request.tools)
        body = messages_body(request, names)
        usage = self.bill(self.caches.setdefault(request.profile.id, set()), body)
        decoder, state = SSEDecoder(), MessagesState("stand-in", names)
        for sse in [*decoder.feed(_answer(request.turn, self.turns, usage)), *decoder.close()]:
            for event in state.events(sse):
                yield event
        for event in state.finish():
            yield event

    @staticmethod
    def bill(cache: set[str], body: dict[str, Any]) -> dict[str, int]:
        blocks = _blocks(body)
        sizes = [_tokens(json.dumps(block, sort_keys=True)) for block, _ in blocks]
        digest, prefixes = hashlib.sha256(), []
        for block, _ in blocks:
            digest.update(json.dumps({**block, "cache_control": None}, sort_keys=True).encode())
            prefixes.append(digest.hexdigest())
        marks = [index for index, (_, marked) in enumerate(blocks) if marked]
        read_to = -1
        for mark in marks:
            for index in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
                if prefixes[index] in cache:
                    read_to = max(read_to, index)
                    break
        read = sum(sizes[: read_to + 1])
        written = 0
        if marks and sum(sizes[: marks[-1] + 1]) >= MIN_CACHEABLE_TOKENS:
            written = sum(sizes[read_to + 1 : marks[-1] + 1])
            cache.update(prefixes[mark] for mark in marks)
        return {
            "input_tokens": sum(sizes) - read - written,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
        }


def _blocks(body: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """The prompt's blocks in the API's cache order (tools, system, messages), each with
    whether it carries a breakpoint."""
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    blocks = [*body.get("tools", []), *system]
    for message in body["messages"]:
        blocks += [{**block, "role": message["role"]} for block in message["content"]]
    return [(block, "cache_control" in block) for block in blocks]


def _answer(turn: int, turns: int, usage: dict[str, int]) -> bytes:
    """The Messages API stream of one answer: a tool call before the last turn, else text."""
    message = {
        "id": f"msg_{turn}",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5",
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events = [("message_start", {"message": message})]
    if turn < turns:
        block = {"type": "tool_use", "id": f"toolu_{turn}", "name": "lookup", "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps({"n": turn})}
        reason = "tool_use"
    else:
        block, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": "Done."}
        reason = "end_turn"
    events += [
        ("content_block_start", {"index": 0, "content_block": block}),
        ("content_block_delta", {"index": 0, "delta": delta}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": reason}, "usage": {"output_tokens": 30}}),
        ("message_stop", {}),
    ]
    return b"".join(
        f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()
        for kind, data in events
    )


def config(turns: int) -> RuntimeConfig:
    profiles = [
        ModelProfile.model_validate(
            {
                "id": profile_id,
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "prices": SONNET_PRICES,
                "prompt_cache": cached,
            }
        )
        for profile_id, cached in (("cached", True), ("uncached", False))
    ]
    agents = [
        AgentDefinition(
            id=f"researcher-{profile}",
            description="Researches.",
            system_prompt=SYSTEM_PROMPT,
            model=profile,
            tools=["lookup"],
        )
        for profile in ("cached", "uncached")
    ]
    limits = RuntimeLimits(max_iterations_per_run=max(turns, 12), max_tool_calls=max(turns, 128))
    return RuntimeConfig(agents=agents, models=profiles, tools=[lookup], limits=limits)


async def measure(temporal: Client, store: Store, turns: int) -> dict[str, RunUsage]:
    """The usage of one run of each arm (``cached``, ``uncached``)."""
    queue = f"prompt-cache-{uuid.uuid4().hex[:6]}"
    provider = CachingAnthropic(turns)
    usages: dict[str, RunUsage] = {}
    worker = build_worker(
        temporal, config(turns), store, task_queue=queue, providers={"anthropic": provider}
    )
    async with worker:
        agents = AgentClient(temporal, task_queue=queue, store=store)
        for arm in ("cached", "uncached"):
            request = build_request(
                entry_agent=f"researcher-{arm}",
                input="Research it.",
                session={"context_window": CONTEXT_WINDOW},  # no compaction in 20 turns
            )
            result = await agents.run(request)
            if result.outcome is not RunOutcome.COMPLETED:
                raise RuntimeError(f"{arm} run ended {result.outcome.value}: {result.failure}")
            usages[arm] = result.usage
    return usages


def full_price_input(usage: RunUsage) -> int:
    """Input tokens billed at the full input price (neither read from nor written to a cache)."""
    cached = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
    return (usage.input_tokens or 0) - cached


def report(turns: int, usages: dict[str, RunUsage]) -> str:
    lines = [
        f"prompt caching, a {turns}-turn run (Sonnet 4.5 prices; stand-in billing as the API's):",
        f"{'':10} {'full-price in':>14} {'cache read':>11} {'cache write':>12} {'output':>7} "
        f"{'cost (USD)':>11}",
    ]
    for arm, usage in usages.items():
        lines.append(
            f"{arm:10} {full_price_input(usage):>14} {usage.cache_read_tokens or 0:>11} "
            f"{usage.cache_write_tokens or 0:>12} {usage.output_tokens or 0:>7} "
            f"{usage.cost or Decimal(0):>11}"
        )
    cached, uncached = usages["cached"], usages["uncached"]
    saved = 1 - (cached.cost or Decimal(0)) / (uncached.cost or Decimal(1))
    lines.append(
        f"full-price input tokens: {full_price_input(cached)} with caching, "
        f"{full_price_input(uncached)} without; cost {saved:.0%} lower with caching"
    )
    return "\n".join(lines)


async def main(turns: int) -> None:
    async with DevServer(headless=True) as server:
        temporal = await connect(server.address, server.namespace)
        with tempfile.TemporaryDirectory() as folder:
            store = Store.open(f"sqlite:///{Path(folder) / 'store.db'}")
            try:
                usages = await measure(temporal, store, turns)
            finally:
                store.close()
    print(report(turns, usages), flush=True)


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.prompt_cache", description=__doc__)
    parser.add_argument("--turns", type=int, default=20)
    asyncio.run(main(parser.parse_args().turns))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see bench.common.main (it used a Client and a worker: sdk-python#300)


if __name__ == "__main__":
    cli()
