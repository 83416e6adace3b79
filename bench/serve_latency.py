"""Delivery latency of `otherone serve`'s event streams: stored delta → SSE client.

    python -m bench.serve_latency [--database sqlite|postgresql|both] [--runs 5]
                                  [--chunks 20] [--clients 10]

Starts an in-memory Temporal dev server, a worker (offline `scripted` model streaming
``--chunks`` chunks 100 ms apart, so the worker's 50 ms delta batching flushes each chunk at
once) and the API server, all in this process, on a SQLite file and/or a fresh PostgreSQL
database on 127.0.0.1:5432 (dropped after). ``--clients`` SSE clients follow each of ``--runs``
runs (started one after the other); for every ``model_delta`` a client receives, the latency
is its arrival time minus the envelope's ``timestamp`` (taken by the worker as it writes the
event, i.e. just after the model produced the chunk). Prints p50 / p95 / max per database.
On PostgreSQL the streams are woken by LISTEN/NOTIFY, on SQLite by a 20 ms poll.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg

from bench.databases import postgresql_database
from otherone import RuntimeConfig, Store, build_worker, connect
from otherone.api import ApiContext, ApiServer
from otherone.definitions import AgentDefinition, ModelProfile
from otherone.worker.devserver import DevServer

TASK_QUEUE = "serve-latency"


def config(chunks: int) -> RuntimeConfig:
    turn = {"chunks": [f"chunk {index} " for index in range(chunks)], "chunk_delay_seconds": 0.1}
    model = ModelProfile.model_validate(
        {"id": "m", "provider": "scripted", "model": "m", "script": {"talker": [turn]}}
    )
    return RuntimeConfig(
        agents=[AgentDefinition(id="talker", description="streams")], models=[model]
    )


async def follow(http: httpx.AsyncClient, run_id: str) -> list[float]:
    """Milliseconds from each delta's envelope timestamp to its arrival here."""
    latencies: list[float] = []
    async with http.stream("GET", f"/v1/runs/{run_id}/events") as response:
        buffer = ""
        async for text in response.aiter_text():
            arrived = datetime.now(UTC)
            buffer += text
            while "\n\n" in buffer:
                frame, buffer = buffer.split("\n\n", 1)
                data = next(
                    (line[6:] for line in frame.split("\n") if line.startswith("data: ")), ""
                )
                if not data:
                    continue
                envelope = json.loads(data)
                if envelope["event"]["type"] == "model_delta":
                    stamped = datetime.fromisoformat(envelope["timestamp"])
                    latencies.append((arrived - stamped).total_seconds() * 1000)
    return latencies


async def measure(url: str, args: argparse.Namespace, server: DevServer) -> list[float]:
    temporal = await connect(server.address, server.namespace)
    store = Store.open(url)
    latencies: list[float] = []
    try:
        async with build_worker(temporal, config(args.chunks), store, task_queue=TASK_QUEUE):
            context = ApiContext(temporal=temporal, store=store, task_queue=TASK_QUEUE)
            async with (
                ApiServer(context, log_level="warning") as api,
                httpx.AsyncClient(base_url=api.url, timeout=60) as http,
            ):
                for _ in range(args.runs):
                    started = await http.post(
                        "/v1/runs", json={"entry_agent": "talker", "input": "go"}
                    )
                    run_id = started.json()["run_id"]
                    followers = [follow(http, run_id) for _ in range(args.clients)]
                    for found in await asyncio.gather(*followers):
                        latencies += found
    finally:
        store.close()
    return latencies


def summary(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    return (
        f"{name:<11} {len(values):>6} deltas   p50 {statistics.median(ordered):6.1f} ms   "
        f"p95 {p95:6.1f} ms   max {ordered[-1]:6.1f} ms"
    )


async def main(args: argparse.Namespace) -> None:
    databases = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    started = time.monotonic()
    async with DevServer(headless=True) as server:
        lines = []
        for database in databases:
            with contextlib.ExitStack() as stack:
                if database == "postgresql":
                    try:
                        url = stack.enter_context(postgresql_database("otherone_latency"))
                    except psycopg.OperationalError as error:  # no server on 127.0.0.1:5432
                        lines.append(f"{database:<11} skipped: {error}".splitlines()[0])
                        continue
                else:
                    folder = stack.enter_context(tempfile.TemporaryDirectory())
                    url = f"sqlite:///{Path(folder) / 'store.db'}"
                lines.append(summary(database, await measure(url, args, server)))
    print(
        f"delta delivery, stored event -> SSE client ({args.runs} runs x {args.clients} clients, "
        f"{args.chunks} chunks each; {time.monotonic() - started:.0f}s)"
    )
    print("\n".join(lines))


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.serve_latency", description=__doc__)
    parser.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--clients", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see bench.common.main (it used a Client and a worker: sdk-python#300)


if __name__ == "__main__":
    cli()
