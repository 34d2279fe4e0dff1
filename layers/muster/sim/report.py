"""What a run leaves behind: events.jsonl, summary.json, a picture and a table."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muster.sim.engine import RunResult
from muster.sim.figures import format_seconds
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
        return format_seconds(float(value)) if key != "wallSeconds" else f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


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


def shown_span(results: Sequence[RunResult]) -> tuple[float, float, float]:
    """(the time the picture shows, the last change, the runs' end): up to a little
    after the last change in any run (an event, or a change of GPU use), not to a
    horizon after which nothing happens."""
    end = max(r.end for r in results) or 1.0
    last = 0.0
    for r in results:
        if r.events:  # in the order published; a shell's log need not be in time order
            last = max(last, max(float(e["t"]) for e in r.events))
        if r.samples and r.samples[-1].t < r.end:
            last = max(last, r.samples[-1].t)
    if last <= 0 or last * 1.25 >= end:
        return end, last, end
    return min(end, last * 1.06), last, end


# Widths of the eviction strip's intervals, the first that gives at most this many.
EVICTION_BARS = 150
_WIDTHS = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
)


def eviction_interval(span: float) -> float:
    """A round interval (seconds) that cuts `span` into at most EVICTION_BARS bars."""
    return float(next((w for w in _WIDTHS if span / w <= EVICTION_BARS), _WIDTHS[-1]))


def plot_gpu_use(results: Sequence[RunResult], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = gpu_use_figure(results)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def gpu_use_figure(results: Sequence[RunResult]) -> Any:
    """Stacked GPU use over time, one panel per policy, each with a strip of its
    evictions per interval below it (matplotlib, Agg backend); one legend above the
    panels, where it covers no data. The caller saves and closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    span, last, end = shown_span(results)
    scale, unit = (3600.0, "hours") if span > 7200 else (60.0, "minutes")
    height = 3.0 * len(results) + 1.1
    fig = plt.figure(figsize=(9, height))
    outer = fig.add_gridspec(len(results), 1, hspace=0.32)
    handles: dict[str, Any] = {}
    axes: list[Any] = []
    for n, r in enumerate(results):
        inner = outer[n].subgridspec(2, 1, height_ratios=[4, 1], hspace=0.06)
        ax = fig.add_subplot(inner[0], sharex=axes[0] if axes else None)
        strip = fig.add_subplot(inner[1], sharex=ax)
        _use_panel(ax, r, span, scale, handles)
        _eviction_strip(strip, marks(r.events, r.end).evictions, span, scale, handles)
        ax.tick_params(labelbottom=False)
        if n < len(results) - 1:
            strip.tick_params(labelbottom=False)
        ax.set_xlim(0, span / scale)
        axes += [ax, strip]
    label = f"simulated time ({unit})"
    if span < end:
        label += (
            f", the first {span / scale:.1f} of {end / scale:.0f}: "
            f"nothing changes after {last / scale:.1f}"
        )
    axes[-1].set_xlabel(label)
    fig.suptitle(f"GPU use: {results[0].scenario}", fontsize=10, y=1 - 0.12 / height)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - 0.3 / height),
        ncol=len(handles),
        fontsize=7,
        frameon=False,
    )
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.75 / height, bottom=0.55 / height)
    return fig


def _use_panel(ax: Any, r: RunResult, span: float, scale: float, handles: dict[str, Any]) -> None:
    rows = binned(r.samples, span)
    if rows:  # the last bin drawn to the end of the span, not only to where it starts
        rows.append((span, *rows[-1][1:]))
    t = [x[0] / scale for x in rows]
    useful = [x[1] for x in rows]
    wasted = [x[2] for x in rows]
    idle = [max(x[3] - x[1] - x[2], 0.0) for x in rows]
    names = ["useful (gang whole)", "held by incomplete gangs", "idle"]
    layers = ax.stackplot(
        t,
        useful,
        wasted,
        idle,
        labels=names,
        colors=["#2a9d8f", "#e76f51", "#e9ecef"],
        step="post",
    )
    for name, layer in zip(names, layers, strict=True):
        handles.setdefault(name, layer)
    shown = marks(r.events, r.end)
    for start, stop in [(a, b) for _, a, b in shown.nodes_down]:
        shade = ax.axvspan(start / scale, stop / scale, color="#343a40", alpha=0.18, lw=0)
        handles.setdefault("node down", shade)
    s = r.summary
    count = len(shown.evictions)
    ax.set_title(
        f"{r.policy}: utilization {s['utilization'] * 100:.1f}%, "
        f"wasted {s['wastedGpuHours']:,.1f} GPU-h, finished {s['finished']}/{s['workloads']}, "
        f"{count:,} eviction{'' if count == 1 else 's'}",
        fontsize=9,
        loc="left",
    )
    ax.set_ylabel("GPUs")
    ax.set_ylim(0, r.total_gpus)


def _eviction_strip(
    ax: Any, evictions: Sequence[float], span: float, scale: float, handles: dict[str, Any]
) -> None:
    """Evictions per interval as bars, so one eviction shows as plainly as thousands."""
    width = eviction_interval(span)
    bars = math.ceil(span / width)
    counts = [0] * bars
    for t in evictions:
        if t <= span:
            counts[min(int(t / width), bars - 1)] += 1
    drawn = ax.bar(
        [k * width / scale for k in range(bars)],
        counts,
        width=width / scale,
        align="edge",
        color="#9d0208",
        linewidth=0,
    )
    handles.setdefault(f"evictions per {format_seconds(width)}", drawn)
    top = max(counts)
    ax.set_ylim(0, max(top, 1) * 1.25)
    ax.set_yticks([0, top] if top else [0])
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylabel("evictions", fontsize=7)
    if not top:
        ax.text(
            0.5,
            0.5,
            "no evictions",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=7,
            color="0.4",
        )
