"""The benchmark's own side at tiny sizes: every workload runs and reports what the table needs.

The full benchmark (`make bench`: floor, peers, chart) is not part of `make test`; this keeps
its code for our runtime from rotting.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client

from bench import capacity_cost, prompt_cache, server_work, spy, store_calls
from bench.common import SMOKE, WORKLOAD_NAMES
from bench.ours import WORKLOADS
from bench.paired import Meter, concurrent, history, scale, sequential
from bench.profile import StoreCalls, StoreStatements, ThreadHops, hop_line, statement_label
from bench.report import Cell, paired_table, workload_rows
from otherone.activities import store_calls as activity_store_calls
from otherone.store import Store
from tests.processes import REPO_ROOT


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


async def test_the_paired_measurement_runs_at_smoke_size(client: Client) -> None:
    """bench/paired.py: floor and ours alternating in one process, their ratios, the scale
    workload's memory figures, and the Markdown table docs/benchmarks.md shows."""
    meter = Meter(server_pid=None)
    sequential_result = await sequential(client, meter, turns=2, rounds=2)
    for name in ("floor", "ours"):
        assert sequential_result[name]["per_turn_ms"] > 0
        assert sequential_result[name]["cpu_ms_per_run"] > 0
    assert len(sequential_result["ratio_per_round"]) == 2 and sequential_result["ratio"] > 0
    concurrent_result = await concurrent(client, meter, count=2, rounds=2, turns=1)
    assert concurrent_result["ours"]["runs_per_second"] > 0 and concurrent_result["ratio"] > 0
    history_result = await history(client, 2)
    assert history_result["ours"]["bytes"] > 0 and history_result["floor"]["events"] > 0
    scale_result = await scale(client, 3)
    assert scale_result["completed"] == 3 and scale_result["rss_mb_peak"] > 0
    one_turn = await sequential(client, meter, turns=1, rounds=4)
    assert len(one_turn["ratio_per_round"]) == 4
    table = paired_table(
        {
            "turns_1": one_turn,
            "turns_10": sequential_result,
            "concurrent": concurrent_result,
            "history": history_result,
            "scale": scale_result,
        }
    )
    assert "per turn, 2 turns" in table and "RSS" in table and "protobuf bytes" in table
    assert "per run, 1 turn (4 rounds" in table and "(middle half " in table


def test_the_store_calls_benchmark_plays_a_run(store: Store) -> None:
    """bench/store_calls.py: a run's turns against the store, each call timed, on each backend."""
    times = store_calls.play(store, 3)
    assert set(times) == set(store_calls.CALLS)
    assert all(len(samples) == 3 and min(samples) >= (0, 0) for samples in times.values())
    assert len(store.contexts) == 1  # its session, cached by the turns


def test_the_profile_counts_the_store_calls_of_every_part_of_the_store(store: Store) -> None:
    """`make profile` times every public store method, those of the parts `Store` is made of
    (`otherone.store.transcript`, `otherone.store.run_store`) too, and puts them back after."""
    calls = StoreCalls()
    calls.install()
    try:
        store_calls.play(store, 2)
        store.session_holder("bench", "nobody")
    finally:
        calls.uninstall()
    assert calls.count["turn_context"] == 2 and calls.count["append_entries_and_events"] == 2
    assert calls.count["put_tool_result_and_events"] == 2 and calls.count["session_holder"] == 1
    assert "turn_context" not in vars(Store) and "put_tool_result" in vars(Store)
    assert not hasattr(Store.put_tool_result, "__wrapped__")


def test_the_profile_times_the_store_statements_commits_and_transactions(store: Store) -> None:
    """`make profile`'s statement lines: every prepared statement of a turn's store calls, by
    what it does and to which table, the commits and the transactions, counted per call and
    timed; the originals are put back after."""
    from sqlalchemy.engine.base import Connection

    from otherone.store import prepared
    from otherone.store.store_base import StoreBase

    original = prepared.run, StoreBase._transaction, Connection._commit_impl
    statements = StoreStatements()
    statements.install()
    try:
        store_calls.play(store, 2)
    finally:
        statements.uninstall()
    assert (prepared.run, StoreBase._transaction, Connection._commit_impl) == original
    counted = statements.count
    # Each turn: its start, its answer and its tool result, each one transaction.
    assert counted[StoreStatements.TRANSACTION] == 6
    assert counted[StoreStatements.COMMIT] >= 6
    assert counted["INSERT otherone_entries"] >= 4  # the user's, each turn's pending and answer
    assert counted["SELECT max(otherone_events.sequence) FROM otherone_events"] >= 2  # answers
    assert all(seconds >= 0 for seconds in statements.cpu_seconds.values())
    lines = statements.lines(runs=2)
    assert lines[0].startswith("store statements per run") and len(lines) == len(counted) + 1
    notify = "SELECT pg_notify(:channel, :root)"
    assert statement_label(notify) == notify  # no table: the statement itself


async def test_the_profile_times_the_hops_of_store_calls_to_their_thread_and_back() -> None:
    """`make profile`'s hop line: each store call an activity makes through
    `otherone.activities.store_calls.in_thread` is timed to its thread and back, and the
    original is put back after."""
    original = activity_store_calls.in_thread
    hops = ThreadHops()
    hops.install()
    try:
        assert await activity_store_calls.in_thread(lambda value: value + 1, 41) == 42
        assert await activity_store_calls.in_thread(lambda: "twice") == "twice"
    finally:
        hops.uninstall()
    assert activity_store_calls.in_thread is original
    assert hops.count == 2 and hops.to_thread > 0 and hops.back > 0
    assert hop_line(hops, runs=1).startswith("thread hops of store calls per run: 2.0, each ")
    assert hop_line(ThreadHops(), runs=1) == "thread hops of store calls per run: 0"


def test_sampled_stacks_are_told_apart_by_where_the_event_loop_was(tmp_path: Path) -> None:
    """`bench.spy compare`: py-spy's raw lines (stack, count) by category, per run."""
    loop = "<module> (x.py:1);BaseEventLoop._run_once (asyncio/base_events.py:1922)"
    raw = tmp_path / "ours.txt"
    raw.write_text(
        f"{loop};AgentActivities.call_model (a.py:9) 10\n"
        f"{loop};decode_activation (temporalio/bridge/worker.py:318) 4\n"
        f"{loop};EpollSelector.select (selectors.py:468) 6\n"
        "_worker (concurrent/futures/thread.py:81);run (x.py:2) 8\n"
    )
    found = spy.categories(raw, runs=2)  # 500 Hz: 2 ms a sample, over 2 runs
    assert found["our activity bodies"] == 10.0
    assert found["workflow: decoding activations"] == 4.0
    assert found["(idle: waiting in epoll)"] == 6.0
    assert found["(other threads, busy or not)"] == 8.0
    table = spy.compare(raw, raw, runs=2)
    assert "our activity bodies" in table and "+0.0" in table


async def test_the_server_work_of_a_run_is_counted_per_contender() -> None:
    """`python -m bench.server_work`: the server's request counters per run, in phases of their
    own (its own dev server, with ``--metrics-port``): a one-turn run of ours and of the floor
    each complete three activities (model, tool, model), through the same requests."""
    # The server publishes its counters about a second late: a phase waits for them.
    found = await server_work.measure(turns=1, runs=1, settle=2.5)
    completed = "service_requests frontend RespondActivityTaskCompleted"
    for phase in ("floor", "ours", "floor2"):
        assert found["phases"][phase]["per_run"][completed] == 3
        assert found["server_cpu_ms_per_run"][phase] >= 0
    assert all(completed != row["counter"] for row in found["differing_counters_per_run"])


def test_the_capacity_benchmark_loops_admissions_and_releases(store: Store) -> None:
    """`bench.capacity_cost`'s store part: a two-scope claim admitted and released, each
    transaction timed and its statements counted, on each backend."""
    from otherone.store import prepared

    original = prepared.run
    loop = capacity_cost.store_loop(store, 3)
    assert prepared.run is original
    assert len(loop.admit_ms) == len(loop.release_ms) == 3 and min(loop.admit_cpu_ms) >= 0
    assert sum(loop.statements["admit"].values()) > 0
    assert sum(loop.statements["release"].values()) > 0
    assert store.capacity.in_flight("model@bench", datetime.now(UTC)) == (0, 0)


async def test_the_capacity_benchmark_pairs_runs_with_the_permits_on_and_off(
    client: Client, tmp_path: Path
) -> None:
    """`bench.capacity_cost`'s runs: every arm completes its runs, the per-call differences
    and the report come out, and the capacity code is put back after (the seam is the bench
    process's only)."""
    from otherone.activities import capacity

    original = capacity.admit, capacity.holding
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        with capacity_cost.switched() as switch:
            assert capacity.admit is not original[0]
            samples = await capacity_cost.paired_runs(client, store, 2, switch)
        loop = capacity_cost.store_loop(store, 2)
    finally:
        store.close()
    assert (capacity.admit, capacity.holding) == original
    assert all(len(arm) == 2 for runs in samples.values() for arm in runs.values())
    assert set(capacity_cost.added(samples, "wall_ms")) >= {"per_model_call", "per_tool_call"}
    assert "per tool call" in capacity_cost.report("sqlite", loop, samples)


async def test_the_prompt_cache_bench_bills_less_full_price_input_with_caching(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`bench.prompt_cache` at 4 turns: caching moves the prompt to cache reads and writes."""
    store = Store.open(f"sqlite:///{tmp_path / 'cache.db'}")
    try:
        usages = await prompt_cache.measure(client, store, 4)
    finally:
        store.close()
    cached, uncached = usages["cached"], usages["uncached"]
    assert uncached.cache_read_tokens in (None, 0) and uncached.cache_write_tokens in (None, 0)
    assert cached.cache_read_tokens and cached.cache_write_tokens
    assert prompt_cache.full_price_input(cached) < prompt_cache.full_price_input(uncached)
    # Every prompt token of the cached run was read from or written to the cache.
    assert prompt_cache.full_price_input(cached) == 0
    assert cached.cost is not None and uncached.cost is not None and cached.cost < uncached.cost
    assert "full-price input tokens" in prompt_cache.report(4, usages)


def test_the_waiting_runs_bench_measures_a_worker_through_waits_and_wakes() -> None:
    """`bench.waiting_runs` at 3 runs, in its own process (a real `otherone worker`)."""
    finished = subprocess.run(
        [sys.executable, "-m", "bench.waiting_runs", "--runs", "3"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    for row in ("worker RSS idle", "all of them waiting", "time to wake all"):
        assert row in finished.stdout, finished.stdout
