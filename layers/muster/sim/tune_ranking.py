"""`muster tune`'s ranking: the runs ordered by an objective behind the guard rail,
as a table, a CSV, the recommended settings document and a Pareto picture."""

from __future__ import annotations

import copy
import csv
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from muster.sim.tune_grid import UNSET_VALUE, Run, none_as_inf, show_value


@dataclass(frozen=True, slots=True)
class Objective:
    name: str
    label: str
    key: Callable[[Run], float]


OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("wasted", "wasted GPU-hours", lambda r: r.wasted),
        Objective("queue-delay", "queue delay p95 (s)", lambda r: r.queue_delay_p95),
        Objective("jct", "JCT p95 (s)", lambda r: r.jct_p95),
        Objective("evictions", "evictions", lambda r: float(r.evictions)),
        Objective(
            "deactivated-healthy",
            "deactivated healthy workloads",
            lambda r: float(r.deactivated_healthy),
        ),
    )
}
DEFAULT_OBJECTIVE = "wasted"


# ---------------------------------------------------------------------- ranking


def rank(runs: Sequence[Run], objective: Objective) -> list[Run]:
    """Guard-railed runs first, then by the objective, queue delay, JCT, grid order."""
    return sorted(
        runs,
        key=lambda r: (
            not r.guarded,
            objective.key(r),
            r.queue_delay_p95,
            r.jct_p95,
            r.index,
        ),
    )


def pareto(runs: Sequence[Run]) -> list[Run]:
    """Runs no other run beats on both wasted GPU-hours and queue delay p95."""
    front = []
    for r in runs:
        dominated = any(
            o.wasted <= r.wasted
            and o.queue_delay_p95 <= r.queue_delay_p95
            and (o.wasted < r.wasted or o.queue_delay_p95 < r.queue_delay_p95)
            for o in runs
        )
        if not dominated:
            front.append(r)
    return front


_COLUMNS = (
    "rank",
    "settings",
    "wasted GPU-h",
    "queue p95",
    "JCT p95",
    "evictions",
    "deactivated healthy",
    "finished",
)


def table_rows(ranked: Sequence[Run]) -> list[list[str]]:
    rows = []
    for n, r in enumerate(ranked, start=1):
        rows.append(
            [
                f"{n}" if r.guarded else f"{n} (x)",
                r.label,
                f"{r.wasted:.1f}",
                format_seconds(r.queue_delay_p95),
                format_seconds(r.jct_p95),
                f"{r.evictions}",
                f"{r.deactivated_healthy}",
                f"{r.summary['finished']}",
            ]
        )
    return rows


def format_table(ranked: Sequence[Run]) -> str:
    rows = [list(_COLUMNS), *table_rows(ranked)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = []
    for row in rows:
        cells = [row[0].rjust(widths[0]), row[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(row[2:], widths[2:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def recommended_document(run: Run) -> dict[str, Any]:
    """The winning settings document; a setting the grid left `unset` is written null.

    null is what `muster settings set --file` reads as "back to the deployment's
    value" (which is unset unless the deployment sets it).
    """
    doc = copy.deepcopy(run.document)
    for path, value in run.choice:
        if value is UNSET_VALUE:
            node = doc
            parts = path.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = None
    return doc


def write_outputs(
    ranked: Sequence[Run],
    baseline: Mapping[str, Any],
    objective: Objective,
    out: Path,
    *,
    picture: bool = True,
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    table = out / "ranking.csv"
    with table.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "rank",
                "guardRail",
                *(path for path, _ in ranked[0].choice),
                "wastedGpuHours",
                "queueDelayP95Seconds",
                "jctP95Seconds",
                "evictions",
                "deactivatedHealthy",
                "finished",
                "deactivated",
                "unfinished",
            ]
        )
        for n, r in enumerate(ranked, start=1):
            writer.writerow(
                [
                    n,
                    "pass" if r.guarded else "fail",
                    *(show_value(v) for _, v in r.choice),
                    r.summary["wastedGpuHours"],
                    r.summary["queueDelaySeconds"]["p95"],
                    r.summary["jctSeconds"]["p95"],
                    r.evictions,
                    r.deactivated_healthy,
                    r.summary["finished"],
                    r.summary["deactivated"],
                    r.summary["unfinished"],
                ]
            )
    written.append(table)
    best = next((r for r in ranked if r.guarded), None)
    if best is not None:
        doc = recommended_document(best)
        settings_file = out / "recommended-settings.yaml"
        settings_file.write_text(
            f"# muster tune: best by {objective.label} among settings that deactivate no\n"
            "# workload that finished under plain Kubernetes. Apply with\n"
            f"#   muster settings set --file {settings_file.name}\n"
            + yaml.safe_dump(doc, sort_keys=True),
            encoding="utf-8",
        )
        context = out / "cdk-context.json"
        clean = _without_nulls(doc)
        context.write_text(json.dumps({"muster:settings": clean}, indent=2) + "\n")
        written += [settings_file, context]
    if picture:
        png = out / "pareto.png"
        plot_pareto(ranked, best, baseline, png)
        written.append(png)
    return written


def plot_pareto(
    runs: Sequence[Run], best: Run | None, baseline: Mapping[str, Any], path: Path
) -> None:
    """Wasted GPU-hours against queue delay p95, every run labelled, the front joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
    front = sorted(pareto([r for r in runs if r.guarded]), key=lambda r: r.wasted)
    wasted = [r.wasted for r in runs if r.wasted > 0]
    log_x = bool(wasted) and max(wasted) / min(wasted) > 20
    if log_x:
        ax.set_xscale("log")
    placed: list[tuple[float, float]] = []
    for r in runs:
        y = r.queue_delay_p95 / 3600.0 if math.isfinite(r.queue_delay_p95) else float("nan")
        ax.scatter(
            [r.wasted],
            [y],
            s=36,
            zorder=3,
            marker="o" if r.guarded else "x",
            color="tab:blue" if r.guarded else "tab:red",
        )
        # Stagger the labels of points that sit close together so each stays legible.
        here = (_spot(r.wasted, log_x), y)
        near = sum(1 for p in placed if _close(p, here, runs, log_x))
        placed.append(here)
        ax.annotate(
            r.short_label,
            (r.wasted, y),
            textcoords="offset points",
            xytext=(6, 4 - 11 * near),
            fontsize=7,
        )
    if front:
        ax.plot(
            [r.wasted for r in front],
            [r.queue_delay_p95 / 3600.0 for r in front],
            color="tab:gray",
            linestyle="--",
            linewidth=1,
            zorder=2,
            label="Pareto front (guard rail passed)",
        )
    if best is not None:
        ax.scatter(
            [best.wasted],
            [best.queue_delay_p95 / 3600.0],
            s=220,
            facecolors="none",
            edgecolors="tab:green",
            linewidths=2,
            zorder=4,
            label="recommended",
        )
    ax.scatter([], [], marker="x", color="tab:red", label="deactivates healthy workloads")
    ax.set_xlabel(
        "wasted GPU-hours (held by gangs not all Ready)" + (", log scale" if log_x else "")
    )
    ax.set_ylabel("queue delay p95 (hours, submission to first PodsReady)")
    none_delay = none_as_inf(baseline["queueDelaySeconds"]["p95"])
    ax.set_title(
        "muster tune: every setting tried\n"
        f"(plain Kubernetes: {float(baseline['wastedGpuHours']):,.0f} wasted GPU-hours, "
        f"queue delay p95 {format_seconds(none_delay)})",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------- helpers


def _spot(x: float, log_x: bool) -> float:
    return math.log10(x) if log_x and x > 0 else x


def _close(
    a: tuple[float, float], b: tuple[float, float], runs: Sequence[Run], log_x: bool
) -> bool:
    """Near enough that their labels (a third of the width, one line high) would overlap."""
    xs = [_spot(r.wasted, log_x) for r in runs]
    ys = [r.queue_delay_p95 / 3600.0 for r in runs if math.isfinite(r.queue_delay_p95)]
    span_x = (max(xs) - min(xs)) or 1.0
    span_y = ((max(ys) - min(ys)) if ys else 0.0) or 1.0
    return abs(a[0] - b[0]) / span_x < 0.35 and abs(a[1] - b[1]) / span_y < 0.04


def format_seconds(value: float) -> str:
    """Seconds in the unit a reader takes in at a glance ("-" for never)."""
    if not math.isfinite(value):
        return "-"
    if value >= 3600:
        return f"{value / 3600:.1f}h"
    if value >= 60:
        return f"{value / 60:.1f}m"
    return f"{value:.0f}s"


def _without_nulls(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document without unset settings (nulls, and groups left empty)."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, Mapping):
            inner = _without_nulls(value)
            if inner:
                out[key] = inner
        elif value is not None:
            out[key] = value
    return out
