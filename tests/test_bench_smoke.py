"""The benchmark's own side at tiny sizes: every workload runs and reports what the table needs.

The full benchmark (`make bench`: floor, peers, chart) is not part of `make test`; this keeps
its code for our runtime from rotting.
"""

from __future__ import annotations

from temporalio.client import Client

from bench.common import SMOKE, WORKLOAD_NAMES
from bench.ours import WORKLOADS
from bench.report import Cell, workload_rows


def _positive(summary: dict[str, float]) -> bool:
    return summary["n"] >= 1 and 0 < summary["p50"] <= summary["p99"]


async def test_each_workload_of_ours_runs_at_smoke_size(client: Client, task_queue: str) -> None:
    assert tuple(WORKLOADS) == WORKLOAD_NAMES
    results = {
        name: await workload(client, f"{task_queue}-{name}", SMOKE)
        for name, workload in WORKLOADS.items()
    }

    w1 = results["w1_turns"]
    assert w1["per_turn_ms"] > 0 and w1["runs"] == SMOKE.w1_runs - 1
    assert w1["activities_per_run"] == 2 * SMOKE.turns + 3

    w2 = results["w2_concurrent"]
    assert w2["runs"] == SMOKE.w2_runs and w2["runs_per_second"] > 0
    assert _positive(w2["latency_ms"])

    w3 = results["w3_fanout"]
    assert w3["runs_per_tree"] == 1 + SMOKE.children * (1 + SMOKE.grandchildren)
    assert _positive(w3["tree_ms"])

    w4 = results["w4_long"]
    assert w4["model_calls_seen"] == SMOKE.long_turns + 1
    assert w4["history_bytes"] > 0 and w4["bytes_per_turn_late"] > 0
    assert w4["rss_mb_peak"] > 0

    w5 = results["w5_first_token"]
    assert _positive(w5["first_token_ms"]) and w5["first_token_ms"]["n"] == SMOKE.w5_runs

    # The report turns them into table cells without a floor or peers.
    rows = workload_rows({"ours": results})
    assert [row.workload for row in rows] == list(WORKLOAD_NAMES)
    assert all(isinstance(row.ours, Cell) and row.ours.text for row in rows)
