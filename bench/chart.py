"""Draw `bench/results/benchmarks.png` from `latest.json` (run with an interpreter that has
matplotlib: `make bench` uses `bench/.venv-peers`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

CONTENDERS = {
    "floor": ("Temporal floor", "#9e9e9e"),
    "ours": ("Otherone", "#1f77b4"),
    "pydantic_ai": ("Pydantic AI", "#e377c2"),
    "openai_agents": ("OpenAI Agents", "#2ca02c"),
}


def _bars(ax: Axes, title: str, values: dict[str, float], unit: str, notes: dict[str, str]) -> None:
    names = [c for c in CONTENDERS if c in values]
    bars = ax.bar(
        [CONTENDERS[c][0] for c in names],
        [values[c] for c in names],
        color=[CONTENDERS[c][1] for c in names],
    )
    for bar, name in zip(bars, names, strict=True):
        label = f"{values[name]:.1f}{notes.get(name, '')}"
        ax.annotate(
            label,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(unit, fontsize=9)
    ax.tick_params(axis="x", labelsize=8, rotation=15)


def _metric(results: dict[str, Any], workload: str, path: tuple[str, ...]) -> dict[str, float]:
    found: dict[str, float] = {}
    for contender, by_workload in results.items():
        value: Any = by_workload.get(workload, {})
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int | float):
            found[contender] = float(value)
    return found


def _history(ax: Axes, results: dict[str, Any]) -> None:
    for contender, (label, color) in CONTENDERS.items():
        series = results.get(contender, {}).get("w4_long", {}).get("bytes_per_turn_series")
        if series:
            ax.plot(range(1, len(series) + 1), [b / 1024 for b in series], label=label, color=color)
    ax.set_title("4. history bytes per turn (300-turn run)", fontsize=10)
    ax.set_xlabel("turn", fontsize=9)
    ax.set_ylabel("KB of history per turn", fontsize=9)
    ax.legend(fontsize=8)


def draw(report: dict[str, Any], out: Path) -> None:
    results = report["results"]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    w3_notes = {
        c: " (1 workflow)"
        for c, r in results.items()
        if r.get("w3_fanout", {}).get("child_workflows") is False
    }
    _bars(
        axes[0][0],
        "1. ms per turn (10 turns, 1 tool each)",
        _metric(results, "w1_turns", ("per_turn_ms",)),
        "ms",
        {},
    )
    _bars(
        axes[0][1],
        "2. runs/s, 100 concurrent runs",
        _metric(results, "w2_concurrent", ("runs_per_second",)),
        "runs/s",
        {},
    )
    _bars(
        axes[0][2],
        "3. ms per fan-out tree 1->8->16 (p50)",
        _metric(results, "w3_fanout", ("tree_ms", "p50")),
        "ms",
        w3_notes,
    )
    _history(axes[1][0], results)
    _bars(
        axes[1][1],
        "5. first-token latency p50",
        _metric(results, "w5_first_token", ("first_token_ms", "p50")),
        "ms",
        {},
    )
    _bars(
        axes[1][2],
        "5. first-token latency p99",
        _metric(results, "w5_first_token", ("first_token_ms", "p99")),
        "ms",
        {},
    )
    machine = report.get("machine", {})
    fig.suptitle(
        f"Otherone vs Temporal floor and peers: {machine.get('cpus')} cores, "
        f"one in-memory dev server, {report.get('generated_at', '')}",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    draw(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
