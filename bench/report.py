"""From raw results (contender -> workload -> result) to table rows, text and Markdown.

A cell is a number with its text; a ratio is always ours ÷ theirs of the number shown, so for
times below 1 is better and for throughput above 1 is better (the table says which).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.common import WORKLOAD_NAMES, Result, Sizes

PEERS = ("pydantic_ai", "openai_agents")
PEER_TITLES = {"pydantic_ai": "Pydantic AI", "openai_agents": "OpenAI Agents"}


def titles(sizes: Sizes) -> dict[str, str]:
    """Row titles with the sizes actually run."""
    grandchildren = sizes.children * sizes.grandchildren
    return {
        "w1_turns": f"1. {sizes.turns} turns x 1 tool",
        "w2_concurrent": f"2. {sizes.w2_runs} concurrent runs",
        "w3_fanout": f"3. fan-out 1→{sizes.children}→{grandchildren}",
        "w4_long": f"4. {sizes.long_turns}-turn conversation",
        "w5_first_token": "5. first token",
    }


METRICS = {
    "w1_turns": "ms per turn (median)",
    "w2_concurrent": "runs/s (latency p50/p99)",
    "w3_fanout": "ms per tree (p50)",
    "w4_long": "history bytes/turn late (growth late÷early)",
    "w5_first_token": "ms first token (p50/p99)",
}


@dataclass(frozen=True)
class Cell:
    text: str
    value: float | None = None


@dataclass
class Row:
    workload: str
    title: str
    metric: str
    ours: Cell
    floor: Cell
    peers: dict[str, Cell] = field(default_factory=dict)
    target: str = ""
    met: str = ""

    def ratio(self, other: Cell) -> str:
        if self.ours.value is None or other.value is None or other.value == 0:
            return "—"
        return f"{self.ours.value / other.value:.2f}x"


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _kb(value: float) -> str:
    return f"{value / 1024:.1f} KB"


def _cpu(r: Result) -> str:
    """The contender's process CPU per run (worker + client), when measured."""
    cpu = r.get("cpu_ms_per_run")
    return "" if cpu is None else f"; CPU {_ms(cpu)} ms/run"


def _cell_w1(r: Result) -> Cell:
    return Cell(f"{_ms(r['per_turn_ms'])} ms{_cpu(r)}", r["per_turn_ms"])


def _cell_w2(r: Result) -> Cell:
    lat = r["latency_ms"]
    text = f"{r['runs_per_second']:.2f}/s ({_ms(lat['p50'])}/{_ms(lat['p99'])} ms{_cpu(r)})"
    return Cell(text, r["runs_per_second"])


def _cell_w3(r: Result) -> Cell:
    text = f"{_ms(r['tree_ms']['p50'])} ms"
    if not r.get("child_workflows", True):
        # Not the same workload: no ratio, but the number it does get is worth showing.
        return Cell(f"n/a as child workflows (agents as tools in 1 workflow: {text})")
    return Cell(text, r["tree_ms"]["p50"])


def _cell_w4(r: Result) -> Cell:
    text = f"{_kb(r['bytes_per_turn_late'])} (x{r['growth']:.2f})"
    if "ended_early" in r:
        text = (
            f"{text} when Temporal ended it after {r['model_calls_seen']} of {r['turns'] + 1} "
            f"model calls ({r['ended_early'].rstrip('.')}, {r['history_bytes'] / 2**20:.0f} MB)"
        )
    return Cell(text, float(r["bytes_per_turn_late"]))


def _cell_w5(r: Result) -> Cell:
    first = r["first_token_ms"]
    return Cell(f"{_ms(first['p50'])}/{_ms(first['p99'])} ms", first["p50"])


CELLS: dict[str, Callable[[Result], Cell]] = {
    "w1_turns": _cell_w1,
    "w2_concurrent": _cell_w2,
    "w3_fanout": _cell_w3,
    "w4_long": _cell_w4,
    "w5_first_token": _cell_w5,
}


def cell(workload: str, result: Result | None) -> Cell:
    if result is None:
        return Cell("not run")
    if "na" in result:
        return Cell(f"n/a: {result['na']}")
    if "error" in result:
        return Cell(f"failed: {result['error'][:160]}")
    return CELLS[workload](result)


def _targets(row: Row) -> None:
    ours, floor = row.ours.value, row.floor.value
    # Issue 17's targets. The floor ratios of the paired measurement (`paired_table`) are the
    # ones to trust: these compare processes run minutes apart.
    if row.workload == "w1_turns":
        row.target = "≤ 1.2x floor"
        if ours is not None and floor:
            row.met = "yes" if ours / floor <= 1.2 else f"no ({ours / floor:.2f}x)"
    elif row.workload == "w2_concurrent":
        row.target = "≥ 0.8x floor, ahead of both peers"
        best = max((c.value for c in row.peers.values() if c.value is not None), default=None)
        if ours is not None and floor:
            ahead = best is None or ours > best
            met = ours / floor >= 0.8 and ahead
            row.met = "yes" if met else f"no ({ours / floor:.2f}x floor)"
    elif row.workload == "w4_long":
        row.target = "flat bytes/turn"
    elif row.workload == "w5_first_token":
        row.target = "p50 ≤ 20 ms"
        if ours is not None:
            row.met = "yes" if ours <= 20 else "no"


def workload_rows(
    results: Mapping[str, Mapping[str, Result]], sizes: Sizes | None = None
) -> list[Row]:
    """One row per workload; contenders missing from ``results`` show as "not run"."""
    rows: list[Row] = []
    names = titles(sizes or Sizes())
    for workload in WORKLOAD_NAMES:
        found = {contender: by_workload.get(workload) for contender, by_workload in results.items()}
        row = Row(
            workload=workload,
            title=names[workload],
            metric=METRICS[workload],
            ours=cell(workload, found.get("ours")),
            floor=cell(workload, found.get("floor")) if workload in _FLOOR_WORKLOADS else Cell("—"),
            peers={peer: cell(workload, found.get(peer)) for peer in PEERS},
        )
        _targets(row)
        if workload == "w4_long" and row.ours.value is not None:
            growth = (results.get("ours", {}).get(workload) or {}).get("growth", 99)
            row.met = "yes" if growth <= 1.1 else f"no (x{growth})"
        rows.append(row)
    return rows


_FLOOR_WORKLOADS = {"w1_turns", "w2_concurrent", "w3_fanout"}


def _columns() -> list[str]:
    columns = ["Workload", "Metric", "Ours", "Floor", "ours÷floor"]
    for peer in PEERS:
        columns += [PEER_TITLES[peer], f"ours÷{PEER_TITLES[peer]}"]
    return [*columns, "Target", "Met"]


def _cells(row: Row) -> list[str]:
    values = [row.title, row.metric, row.ours.text, row.floor.text, row.ratio(row.floor)]
    for peer in PEERS:
        values += [row.peers[peer].text, row.ratio(row.peers[peer])]
    return [*values, row.target, row.met]


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(_columns()) + " |", "|" + " --- |" * len(_columns())]
    lines += ["| " + " | ".join(_cells(row)).replace("\n", " ") + " |" for row in rows]
    return "\n".join(lines)


def text_table(rows: list[Row]) -> str:
    """A terminal table: one block per workload, contenders one per line (long n/a reasons fit)."""
    out: list[str] = []
    for row in rows:
        out.append(
            f"{row.title}: {row.metric}   target: {row.target or '-'}  met: {row.met or '-'}"
        )
        lines = [("ours", row.ours, "")]
        if row.workload in _FLOOR_WORKLOADS:
            lines.append(("floor", row.floor, f"ours÷floor {row.ratio(row.floor)}"))
        for peer in PEERS:
            cell = row.peers[peer]
            lines.append((PEER_TITLES[peer], cell, f"ours÷peer {row.ratio(cell)}"))
        out += [f"    {name:<14}{cell.text}   {ratio}".rstrip() for name, cell, ratio in lines]
    return "\n".join(out)


def rows_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [
        {
            "workload": row.workload,
            "metric": row.metric,
            "ours": row.ours.text,
            "floor": row.floor.text,
            "ours_over_floor": row.ratio(row.floor),
            **{peer: row.peers[peer].text for peer in PEERS},
            **{f"ours_over_{peer}": row.ratio(row.peers[peer]) for peer in PEERS},
            "target": row.target,
            "met": row.met,
        }
        for row in rows
    ]


# --------------------------------------------------------------------------- paired (bench.paired)


def _per_round(values: list[float]) -> str:
    return " ".join(f"{value:.2f}" for value in values)


def _spread(values: list[float]) -> str:
    """Many rounds in brief: their range and the middle half's."""
    ordered = sorted(values)
    quarter = len(ordered) // 4
    middle = ordered[quarter : len(ordered) - quarter] or ordered
    return f"{ordered[0]:.2f}-{ordered[-1]:.2f} (middle half {middle[0]:.2f}-{middle[-1]:.2f})"


def _cpu_pair(r: Result) -> str:
    return f"{_ms(r['cpu_ms_per_run'])} / {_ms(r['server_cpu_ms_per_run'])} ms"


def paired_table(result: Result) -> str:
    """Markdown: the floor and ours in one process, runs alternating (issue 17's targets)."""
    if "error" in result:
        return f"paired measurement failed: {result['error']}"
    lines = [
        "| measure | floor | ours | ours÷floor (median of rounds) | per round | target | met |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    if "turns_1" in result:
        r = result["turns_1"]
        lines.append(
            f"| per run, 1 turn ({r['rounds']} rounds; no target: the per-run part) "
            f"| {_ms(r['floor']['per_turn_ms'])} ms | {_ms(r['ours']['per_turn_ms'])} ms "
            f"| {r['ratio']:.2f}x | {_spread(r['ratio_per_round'])} | | |"
        )
        lines.append(
            "| CPU per 1-turn run: worker+client / server "
            f"| {_cpu_pair(r['floor'])} | {_cpu_pair(r['ours'])} "
            f"| {r['ours']['cpu_ms_per_run'] / r['floor']['cpu_ms_per_run']:.2f}x "
            "(worker+client) | | | |"
        )
    for key in ("turns_10", "turns_60"):
        if key in result:
            r = result[key]
            ratio, met = r["ratio"], "yes" if r["ratio"] <= 1.2 else "no"
            lines.append(
                f"| per turn, {r['turns']} turns ({r['rounds']} rounds) "
                f"| {_ms(r['floor']['per_turn_ms'])} ms | {_ms(r['ours']['per_turn_ms'])} ms "
                f"| {ratio:.2f}x | {_per_round(r['ratio_per_round'])} | ≤ 1.2x | {met} |"
            )
            lines.append(
                f"| CPU per {r['turns']}-turn run: worker+client / server "
                f"| {_cpu_pair(r['floor'])} | {_cpu_pair(r['ours'])} "
                f"| {r['ours']['cpu_ms_per_run'] / r['floor']['cpu_ms_per_run']:.2f}x "
                "(worker+client) | | | |"
            )
    if "concurrent" in result:
        r = result["concurrent"]
        met = "yes" if r["ratio"] >= 0.8 else "no"
        lines.append(
            f"| {r['runs']} concurrent {r.get('turns', 10)}-turn runs, runs/s "
            f"({r['rounds']} rounds) "
            f"| {r['floor']['runs_per_second']:.2f}/s | {r['ours']['runs_per_second']:.2f}/s "
            f"| {r['ratio']:.2f}x | {_per_round(r['ratio_per_round'])} | ≥ 0.8x | {met} |"
        )
        lines.append(
            "| CPU per run, concurrent: worker+client / server "
            f"| {_cpu_pair(r['floor'])} | {_cpu_pair(r['ours'])} | | | | |"
        )
    if "history" in result:
        r = result["history"]
        met = "yes" if r["ratio"] <= 1.5 else "no"
        lines.append(
            f"| history of a {r['turns']}-turn run, protobuf bytes (events) "
            f"| {r['floor']['bytes'] / 1024:.1f} KB ({r['floor']['events']}) "
            f"| {r['ours']['bytes'] / 1024:.1f} KB ({r['ours']['events']}) "
            f"| {r['ratio']:.2f}x | | ≤ 1.5x | {met} |"
        )
    if "scale" in result:
        r = result["scale"]
        lines.append(
            f"| {r['runs']} one-turn runs at once on one worker process (ours only) "
            f"| | {r['completed']} completed in {r['wall_seconds']} s "
            f"({r['runs_per_second']:.1f}/s, CPU {_ms(r['cpu_ms_per_run'])} ms/run); RSS "
            f"{r['rss_mb_before']:.0f} MB before, peak {r['rss_mb_peak']:.0f} MB, "
            f"{r['rss_mb_after']:.0f} MB after | | | bounded memory | |"
        )
    if result.get("peers") or any(
        "floor_sandboxed" in result.get(key, {}) for key in ("turns_10", "concurrent")
    ):
        lines += ["", *_peers_table(result)]
    start, end = result.get("load_average_at_start"), result.get("load_average_at_end")
    lines.append("")
    lines.append(f"Load average (1/5/15 min) at the start {start}, at the end {end}.")
    return "\n".join(lines)


#: Column names of the contenders of a paired run with the peers.
PAIRED_NAMES = {
    "floor": "floor",
    "floor_sandboxed": "floor in the sandbox",
    "ours": "ours",
    "pydantic_ai": "Pydantic AI",
    "openai_agents": "OpenAI Agents",
}


def _peers_table(result: Result) -> list[str]:
    """Every contender of the same paired run, as a ratio to the floor's run of each round
    (per turn and history: lower is better; throughput: higher is better)."""
    parts = [
        result[key] for key in ("turns_1", "turns_10", "turns_60", "concurrent") if key in result
    ]
    optional = [
        name
        for name in ("floor_sandboxed", *result.get("peers", []))
        if any(name in part for part in parts)
    ]
    names = ["floor", "ours", *optional]
    lines = [
        "| measure (ratio to the floor, median of rounds) | "
        + " | ".join(PAIRED_NAMES.get(name, name) for name in names)
        + " |",
        "| --- |" + " --- |" * len(names),
    ]
    measures = (
        ("turns_1", "per run, 1 turn (lower is better)"),
        ("turns_10", "per turn, 10 turns (lower is better)"),
        ("turns_60", "per turn, 60 turns (lower is better)"),
        ("concurrent", "throughput, concurrent runs (higher is better)"),
        ("history", "history bytes at 60 turns (lower is better)"),
    )
    for key, label in measures:
        ratios = result.get(key, {}).get("ratios")
        if ratios:
            cells = " | ".join(_ratio_cell(ratios.get(name)) for name in names)
            lines.append(f"| {label} | {cells} |")
    for key in ("turns_10", "concurrent"):
        part = result.get(key)
        if part:
            cells = " | ".join(
                _ms(part[name]["cpu_ms_per_run"]) if name in part else "—" for name in names
            )
            lines.append(f"| CPU ms per run ({key}), worker+client | {cells} |")
    return lines


def _ratio_cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"
