"""What a run leaves behind: events.jsonl, summary.json, a picture and a table."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muster.sim.engine import RunResult
from muster.sim.kube import NODE_FAILED, NODE_REPAIRED, GpuSample

_ROWS: tuple[tuple[str, str], ...] = (
    ("workloads", "workloads"),
    ("finished", "finished"),
    ("deactivated", "deactivated"),
    ("unfinished", "unfinished"),
    ("evictions", "evictions"),
    ("requeues", "requeues"),
    ("usefulGpuHours", "useful GPU-hours"),
    ("wastedGpuHours", "wasted GPU-hours"),
    ("utilization", "utilization"),
    ("queueDelaySeconds.p50", "queue delay p50"),
    ("queueDelaySeconds.p95", "queue delay p95"),
    ("queueDelaySeconds.max", "queue delay max"),
    ("jctSeconds.p50", "JCT p50"),
    ("jctSeconds.p95", "JCT p95"),
    ("jctSeconds.max", "JCT max"),
    ("makespanSeconds", "makespan"),
    ("simulatedEvents", "simulated events"),
    ("wallSeconds", "wall seconds"),
)


def write_outputs(results: Sequence[RunResult], out: Path, *, picture: bool = True) -> list[Path]:
    """events.jsonl, summary.json and gpu-use.png in `out`; returns the files written.

    With one policy summary.json is that run's summary; with several it maps each
    policy to its summary, and each line of events.jsonl says its policy.
    """
    out.mkdir(parents=True, exist_ok=True)
    many = len(results) > 1
    events_path = out / "events.jsonl"
    with events_path.open("w", encoding="utf-8") as handle:
        for r in results:
            for entry in r.events:
                line = {"policy": r.policy, **entry} if many else entry
                handle.write(json.dumps(line, separators=(",", ":")) + "\n")
    summary: dict[str, Any]
    if many:
        summary = {
            "scenario": results[0].scenario,
            "seed": results[0].seed,
            "policies": {r.policy: r.summary for r in results},
        }
    else:
        summary = results[0].summary
    summary_path = out / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    written = [events_path, summary_path]
    if picture:
        png = out / "gpu-use.png"
        plot_gpu_use(results, png)
        written.append(png)
    return written


def _failure_rows(results: Sequence[RunResult]) -> list[tuple[str, str]]:
    """Rows for runs that model failure modes: evictions by class, waste by failure mode."""
    rows: list[tuple[str, str]] = []
    for group, label in (
        ("evictionsByClass", "evictions {}"),
        ("wastedGpuHoursByFailure", "wasted GPU-h {}"),
        ("deactivatedByReason", "deactivated {}"),
    ):
        names = sorted({name for r in results for name in r.summary.get(group) or {}})
        rows += [(f"{group}.{name}", label.format(name)) for name in names]
    if any("deactivatedHealthy" in r.summary for r in results):
        rows.append(("deactivatedHealthy", "deactivated healthy"))
    return rows


def summary_table(results: Sequence[RunResult]) -> str:
    """One column per policy, one row per figure of the summary."""
    header = ["", *(r.policy for r in results)]
    rows = [header]
    for key, label in (*_ROWS, *_failure_rows(results)):
        rows.append([label, *(_cell(_lookup(r.summary, key), key) for r in results)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _lookup(summary: dict[str, Any], key: str) -> Any:
    value: Any = summary
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _cell(value: Any, key: str) -> str:
    if value is None:
        return "-"
    if key == "utilization":
        return f"{value * 100:.1f}%"
    if key.endswith("Seconds") or "Seconds." in key:
        return _human(float(value)) if key != "wallSeconds" else f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def binned(
    samples: Sequence[GpuSample], end: float, bins: int = 400
) -> list[tuple[float, float, float, float]]:
    """Time-averaged (start, useful, held by incomplete gangs, available) per bin up to `end`."""
    if end <= 0:
        return []
    width = end / bins
    acc = [[0.0, 0.0, 0.0] for _ in range(bins)]
    for i, s in enumerate(samples):
        lo = s.t
        hi = min(samples[i + 1].t if i + 1 < len(samples) else end, end)
        while lo < hi:
            k = min(int(lo / width), bins - 1)
            stop = min(hi, (k + 1) * width)
            if stop <= lo:  # rounding at a bin edge
                stop = min(hi, (k + 2) * width)
                k = min(k + 1, bins - 1)
            span = stop - lo
            acc[k][0] += s.useful * span
            acc[k][1] += (s.held - s.useful) * span
            acc[k][2] += s.available * span
            lo = stop
    return [(k * width, a / width, w / width, v / width) for k, (a, w, v) in enumerate(acc)]


@dataclass(frozen=True)
class Marks:
    """What the picture marks on top of GPU use: evictions and nodes down."""

    evictions: list[float]  # times of Evicted events
    nodes_down: list[tuple[str, float, float]]  # (node, failed at, repaired at or the end)


def marks(events: Sequence[Mapping[str, Any]], end: float) -> Marks:
    evictions = [float(e["t"]) for e in events if e.get("event") == "Evicted"]
    down: dict[str, float] = {}
    spans: list[tuple[str, float, float]] = []
    for e in events:
        node = e.get("node")
        if node is None or "workload" in e:
            continue
        if e["event"] == NODE_FAILED:
            down.setdefault(node, float(e["t"]))
        elif e["event"] == NODE_REPAIRED and node in down:
            spans.append((node, down.pop(node), float(e["t"])))
    spans += [(node, at, max(at, end)) for node, at in down.items()]
    return Marks(evictions, sorted(spans, key=lambda s: (s[1], s[0])))


def plot_gpu_use(results: Sequence[RunResult], path: Path) -> None:
    """Stacked GPU use over time, one panel per policy (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max(r.end for r in results) or 1.0
    scale, unit = (3600.0, "hours") if end > 7200 else (60.0, "minutes")
    fig, axes = plt.subplots(
        len(results), 1, figsize=(9, 2.4 * len(results) + 0.6), sharex=True, squeeze=False
    )
    for ax, r in zip(axes[:, 0], results, strict=True):
        rows = binned(r.samples, end)
        t = [x[0] / scale for x in rows]
        useful = [x[1] for x in rows]
        wasted = [x[2] for x in rows]
        idle = [max(x[3] - x[1] - x[2], 0.0) for x in rows]
        ax.stackplot(
            t,
            useful,
            wasted,
            idle,
            labels=["useful (gang whole)", "held by incomplete gangs", "idle"],
            colors=["#2a9d8f", "#e76f51", "#e9ecef"],
            step="post",
        )
        shown = marks(r.events, r.end)
        for n, (_, start, stop) in enumerate(shown.nodes_down):
            ax.axvspan(
                start / scale,
                stop / scale,
                color="#343a40",
                alpha=0.18,
                lw=0,
                label="node down" if n == 0 else None,
            )
        if shown.evictions:
            ax.plot(
                [t / scale for t in shown.evictions],
                [r.total_gpus * 0.97] * len(shown.evictions),
                linestyle="none",
                marker="|",
                markersize=7,
                color="#9d0208",
                alpha=0.6,
                label=f"eviction ({len(shown.evictions):,})",
            )
        s = r.summary
        ax.set_title(
            f"{r.policy}: utilization {s['utilization'] * 100:.1f}%, "
            f"wasted {s['wastedGpuHours']:,.1f} GPU-h, finished {s['finished']}/{s['workloads']}",
            fontsize=9,
            loc="left",
        )
        ax.set_ylabel("GPUs")
        ax.set_ylim(0, r.total_gpus)
        ax.set_xlim(0, end / scale)
    for ax in axes[:, 0]:
        ax.legend(loc="upper right", fontsize=7, ncol=5)
    axes[-1, 0].set_xlabel(f"simulated time ({unit})")
    fig.suptitle(f"GPU use: {results[0].scenario}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
