"""`muster tune`'s picture: wasted GPU-hours against queue delay p95 for every setting
tried, the guard rail's failures sized by how many healthy workloads they lose, the
baselines marked, the spread over the seeds as bars, and no label over another."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muster.sim.figures import format_seconds
from muster.sim.tune_grid import BASELINE_NAMES, Run, Tuning, queue_p95_of, wasted_of
from muster.sim.tune_ranking import describe, pareto

HOUR = 3600.0


def plot_pareto(tuning: Tuning, best: Run | None, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = pareto_figure(tuning, best)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def pareto_figure(tuning: Tuning, best: Run | None) -> Any:
    """The figure (matplotlib, Agg backend), labels placed; the caller saves and closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(tuning.runs)
    fig, ax = plt.subplots(figsize=(10, 6.5), dpi=110)
    wasted = [r.wasted for r in runs if r.wasted > 0]
    log_x = bool(wasted) and max(wasted) / min(wasted) > 20
    if log_x:
        ax.set_xscale("log")
    at = _heights(runs)
    worst = max((r.healthy_lost for r in runs), default=0)
    for r in runs:
        _point(ax, r, at[r.index], worst, len(tuning.seeds) > 1)
    _front(ax, runs, at)
    _marks(ax, runs, best, at)
    ax.set_xlabel(
        "wasted GPU-hours (held by gangs not all Ready)" + (", log scale" if log_x else "")
    )
    ax.set_ylabel("queue delay p95 (hours, submission to first PodsReady)")
    ax.set_title(_title(tuning), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.12, y=0.12)
    _never_row(ax, runs, at)
    # Below the axes, where it covers neither a point nor a label.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    fig.tight_layout()
    labels = [
        Label(r.wasted, at[r.index], label_of(r), _clearance(r, best, worst, fig.dpi)) for r in runs
    ]
    place_labels(fig, ax, labels, _bars(runs, at) if len(tuning.seeds) > 1 else ())
    return fig


def _bars(runs: Sequence[Run], at: dict[int, float]) -> list[tuple[float, float, float, float]]:
    """The spread bars (data coordinates), which labels keep clear of as well."""
    found = []
    for r in runs:
        if not math.isfinite(r.queue_delay_p95):
            continue
        lo_x, hi_x = r.spread(wasted_of)
        lo_y, hi_y = r.spread(queue_p95_of)
        y = at[r.index]
        found += [(lo_x, y, hi_x, y), (r.wasted, lo_y / HOUR, r.wasted, hi_y / HOUR)]
    return found


def _front(ax: Any, runs: Sequence[Run], at: dict[int, float]) -> None:
    """The Pareto front of the runs that pass the guard rail, joined."""
    finite = [r for r in runs if math.isfinite(r.queue_delay_p95) and r.guarded]
    front = sorted(pareto(finite), key=lambda r: r.wasted)
    if len(front) > 1:  # one run alone is a point, not a front
        ax.plot(
            [r.wasted for r in front],
            [at[r.index] for r in front],
            color="tab:gray",
            linestyle="--",
            linewidth=1,
            zorder=2,
            label="Pareto front (guard rail passed)",
        )


def _never_row(ax: Any, runs: Sequence[Run], at: dict[int, float]) -> None:
    """The row of runs without a queue delay p95, named on the axis."""
    never = [at[r.index] for r in runs if not math.isfinite(r.queue_delay_p95)]
    if never:
        ax.axhline(never[0], color="0.7", linewidth=0.8, linestyle=":", zorder=1)
        ticks = [t for t in ax.get_yticks() if t < never[0] * 0.97]
        ax.set_yticks([*ticks, never[0]], [*(f"{t:g}" for t in ticks), "no p95"])


def _heights(runs: Sequence[Run]) -> dict[int, float]:
    """Each run's height: its queue delay p95 in hours, or a row above them all for
    runs in which too few workloads started to have one."""
    finite = [r.queue_delay_p95 / HOUR for r in runs if math.isfinite(r.queue_delay_p95)]
    top, bottom = (max(finite), min(finite)) if finite else (1.0, 0.0)
    never = top + max(top - bottom, top * 0.2, 0.01) * 0.25
    return {
        r.index: r.queue_delay_p95 / HOUR if math.isfinite(r.queue_delay_p95) else never
        for r in runs
    }


def _clearance(r: Run, best: Run | None, worst: int, dpi: float) -> float:
    """How far (pixels) from its point a label must keep: the widest marker drawn there."""
    sizes = [36.0 if r.guarded else _lost_size(r, worst)]
    if r.baselines:
        sizes.append(200.0)
    if best is not None and r is best:
        sizes.append(260.0)
    return math.sqrt(max(sizes)) / 2 * dpi / 72 + 2


def _lost_size(r: Run, worst: int) -> float:
    return 30 + 270 * math.sqrt(r.healthy_lost / worst) if worst else 30.0


def label_of(r: Run) -> str:
    lines = [r.short_label]
    if r.baselines:
        lines.append(" and ".join(BASELINE_NAMES[n] for n in r.baselines))
    if not r.guarded:
        lines.append(describe(r))
    return "\n".join(lines)


def _point(ax: Any, r: Run, y: float, worst: int, spread: bool) -> None:
    """One setting: a circle if it passes the guard rail, else an x as big as its loss."""
    x = r.wasted
    if spread and math.isfinite(r.queue_delay_p95):
        lo_x, hi_x = r.spread(wasted_of)
        lo_y, hi_y = r.spread(queue_p95_of)
        ax.errorbar(
            [x],
            [y],
            xerr=[[x - lo_x], [hi_x - x]],
            yerr=[[y - lo_y / HOUR], [hi_y / HOUR - y]],
            fmt="none",
            ecolor="0.55",
            elinewidth=0.8,
            capsize=2,
            zorder=2,
        )
    if r.guarded:
        ax.scatter([x], [y], s=36, zorder=3, marker="o", color="tab:blue")
    else:
        ax.scatter(
            [x], [y], s=_lost_size(r, worst), zorder=3, marker="x", color="tab:red", linewidths=1.5
        )


def _marks(ax: Any, runs: Sequence[Run], best: Run | None, at: dict[int, float]) -> None:
    """The recommendation, the baselines, and legend entries for what the points mean."""
    ax.scatter([], [], marker="o", color="tab:blue", s=36, label="passes the guard rail")
    ax.scatter(
        [],
        [],
        marker="x",
        color="tab:red",
        s=80,
        label="loses healthy workloads (size: how many)",
    )
    if best is not None:
        ax.scatter(
            [best.wasted],
            [at[best.index]],
            s=260,
            facecolors="none",
            edgecolors="tab:green",
            linewidths=2,
            zorder=4,
            label="recommended",
        )
    based = [r for r in runs if r.baselines]
    if based:
        names = sorted({n for r in based for n in r.baselines}, key=list(BASELINE_NAMES).index)
        ax.scatter(
            [r.wasted for r in based],
            [at[r.index] for r in based],
            s=200,
            marker="s",
            facecolors="none",
            edgecolors="black",
            linewidths=1.2,
            zorder=4,
            label="baseline: " + ", ".join(BASELINE_NAMES[n] for n in names),
        )


def _title(tuning: Tuning) -> str:
    none = tuning.none
    seeds = tuning.seeds
    spread = (
        f"; {len(seeds)} seeds ({', '.join(map(str, seeds))}): points are means, bars the "
        "lowest to highest"
        if len(seeds) > 1
        else f"; seed {seeds[0]}"
    )
    return (
        f"muster tune: every setting tried under {tuning.policy}{spread}\n"
        f"(plain Kubernetes: {none.wasted:,.0f} wasted GPU-hours, "
        f"queue delay p95 {format_seconds(none.queue_delay_p95)})"
    )


# ---------------------------------------------------------------------- labels


@dataclass(frozen=True, slots=True)
class _Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlap(self, other: _Box) -> float:
        w = min(self.x1, other.x1) - max(self.x0, other.x0)
        h = min(self.y1, other.y1) - max(self.y0, other.y0)
        return w * h if w > 0 and h > 0 else 0.0

    def outside(self, frame: _Box) -> float:
        area = (self.x1 - self.x0) * (self.y1 - self.y0)
        return area - self.overlap(frame)


@dataclass(frozen=True, slots=True)
class Label:
    """A point's label, and how far (pixels) from the point it must keep."""

    x: float
    y: float
    text: str
    clear: float = 6.0


# Where a label may go: how far beyond its point's marker (points), in which direction.
_DISTANCES = (2.0, 10.0, 22.0, 36.0, 54.0)
_DIRECTIONS = (0, 30, -30, 180, 150, -150, 90, -90, 60, -60, 120, -120)


def place_labels(
    fig: Any,
    ax: Any,
    items: Sequence[Label],
    lines: Sequence[tuple[float, float, float, float]] = (),
) -> None:
    """Each label placed where it overlaps no other label, no point's marker and none
    of `lines` (x0, y0, x1, y1 in data coordinates), and stays inside the axes; the nearest such place, joined to its point by a line
    when it is not beside it. Greedy, in the order given; a label with no free
    place takes the one that overlaps least."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    extent = ax.get_window_extent(renderer)
    frame = _Box(extent.x0, extent.y0, extent.x1, extent.y1)
    spots = ax.transData.transform([(i.x, i.y) for i in items]) if items else []
    points = [
        _Box(px - i.clear, py - i.clear, px + i.clear, py + i.clear)
        for (px, py), i in zip(spots, items, strict=True)
    ]
    for x0, y0, x1, y1 in lines:
        (a, b), (c, d) = ax.transData.transform([(x0, y0), (x1, y1)])
        points.append(_Box(min(a, c) - 1, min(b, d) - 1, max(a, c) + 1, max(b, d) + 1))
    placed: list[_Box] = []
    to_points = 72 / fig.dpi
    # The most crowded first: they have the fewest free places.
    crowd = [sum(1 for o in spots if math.dist(o, here) < 120) for here in spots]
    for _, item in sorted(zip(crowd, items, strict=True), key=lambda pair: -pair[0]):
        best: tuple[float, float, float] | None = None
        for beyond in _DISTANCES:
            distance = item.clear * to_points + beyond
            for angle in _DIRECTIONS:
                dx = distance * math.cos(math.radians(angle))
                dy = distance * math.sin(math.radians(angle))
                label = _annotate(ax, item, dx, dy, beyond > 5)
                box = _text_box(label, renderer)
                cost = sum(box.overlap(o) for o in (*placed, *points)) + 4 * box.outside(frame)
                label.remove()
                if best is None or cost < best[0]:
                    best = (cost, dx, dy)
                if cost == 0:
                    break
            if best is not None and best[0] == 0:
                break
        assert best is not None
        far = math.hypot(best[1], best[2]) > 5 + item.clear * to_points
        placed.append(_text_box(_annotate(ax, item, best[1], best[2], far), renderer))


def _text_box(label: Any, renderer: Any) -> _Box:
    """Where a label's text is drawn (pixels), without its leader line."""
    from matplotlib.text import Text

    label.update_positions(renderer)
    bb = Text.get_window_extent(label, renderer)
    return _Box(bb.x0, bb.y0, bb.x1, bb.y1)


def _annotate(ax: Any, item: Label, dx: float, dy: float, leader: bool) -> Any:
    ha = "left" if dx > 1e-6 else "right" if dx < -1e-6 else "center"
    va = "bottom" if dy > 1e-6 else "top" if dy < -1e-6 else "center"
    return ax.annotate(
        item.text,
        (item.x, item.y),
        textcoords="offset points",
        xytext=(dx, dy),
        ha=ha,
        va=va,
        fontsize=7,
        arrowprops={"arrowstyle": "-", "color": "0.25", "lw": 0.7, "shrinkA": 0}
        if leader
        else None,
        zorder=5,
    )
