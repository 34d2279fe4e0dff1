"""The pictures show the data: no legend or label over it, every eviction visible, the
time axis fitted to where things happen."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import matplotlib.pyplot as plt
import pytest
from muster.sim.engine import simulate
from muster.sim.report import gpu_use_figure, shown_span
from muster.sim.scenario import load_builtin
from muster.sim.tune_grid import NONE, UNSET_VALUE, Run, Trial, Tuning
from muster.sim.tune_picture import pareto_figure


def _box(artist: Any, fig: Any) -> Any:
    return artist.get_window_extent(fig.canvas.get_renderer())


def _overlap(a: Any, b: Any) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


@pytest.fixture(scope="module")
def deadlock() -> Any:
    sc = load_builtin("deadlock")
    results = [simulate(sc, p) for p in ("none", "gang", "gang+block")]
    fig = gpu_use_figure(results)
    fig.canvas.draw()
    yield results, fig
    plt.close(fig)


def test_gpu_use_spans_the_time_where_things_happen_not_the_horizon(deadlock: Any) -> None:
    results, fig = deadlock
    # GIVEN a one-hour horizon in which the last eviction is at 5.2 minutes
    last = max(float(e["t"]) for r in results for e in r.events)
    assert max(r.end for r in results) == 3600 and last < 330
    # THEN the picture shows those minutes, not the hour
    top = fig.axes[0].get_xlim()[1]
    assert last / 60 <= top <= last / 60 * 1.1
    assert "nothing changes after" in fig.axes[-1].get_xlabel()
    # AND a run busy until its end is shown whole
    node_fault = [simulate(load_builtin("node-fault"), "gang")]
    assert shown_span(node_fault)[0] == node_fault[0].end


def test_gpu_use_legend_covers_no_panel_and_every_eviction_shows(deadlock: Any) -> None:
    results, fig = deadlock
    # THEN the one legend sits outside every panel
    assert len(fig.legends) == 1
    legend = _box(fig.legends[0], fig)
    assert all(_overlap(legend, _box(ax, fig)) == 0 for ax in fig.axes)
    # AND under each panel a strip holds its evictions, as bars that add up to them
    panels, strips = fig.axes[0::2], fig.axes[1::2]
    assert len(panels) == len(strips) == len(results)
    for r, strip in zip(results, strips, strict=True):
        evicted = sum(1 for e in r.events if e["event"] == "Evicted")
        heights = [p.get_height() for p in strip.patches]
        assert sum(heights) == evicted, r.policy
        # a single eviction is a bar of at least half the strip's height
        strip_height = _box(strip, fig).height
        for bar in strip.patches:
            if bar.get_height():
                assert _box(bar, fig).height >= strip_height * 0.5 / max(heights)
    assert [sum(p.get_height() for p in s.patches) for s in strips] == [0, 8, 1]


def _markers(ax: Any, fig: Any) -> list[Any]:
    """The box (pixels) of every marker drawn on the axes."""
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import Bbox

    found = []
    for c in ax.collections:
        if not isinstance(c, PathCollection):
            continue
        sizes = c.get_sizes()
        for n, (x, y) in enumerate(ax.transData.transform(c.get_offsets())):
            half = (sizes[n % len(sizes)] ** 0.5) / 2 * fig.dpi / 72
            found.append(Bbox.from_extents(x - half, y - half, x + half, y + half))
    return found


def _run(index: int, timeout: str, limit: Any, figures: tuple[float, ...]) -> Run:
    wasted, queue_hours, jct_hours, evictions, deactivated, unfinished = figures
    summary = {
        "wastedGpuHours": wasted,
        "queueDelaySeconds": {"p95": queue_hours * 3600},
        "jctSeconds": {"p95": jct_hours * 3600},
        "evictions": evictions,
        "finished": 11151 - deactivated - unfinished,
    }
    choice = (("timeout", timeout), ("requeuingStrategy.backoffLimitCount", limit))
    trial = Trial(1, summary, int(deactivated), int(unfinished))
    return Run(index, choice, {}, (trial,), ("today", "defaults") if index == 3 else ())


def test_pareto_labels_overlap_no_other_label_no_point_and_stay_inside() -> None:
    # GIVEN the Philly week's nine settings, several close together (5m/3 and 5m/10)
    unset = UNSET_VALUE
    runs = [
        _run(0, "2m", unset, (4859.4, 4.5, 13.7, 114792, 0, 245)),
        _run(1, "2m", 3, (260.6, 3.9, 14.4, 2871, 263, 0)),
        _run(2, "2m", 10, (396.7, 4.3, 14.7, 6239, 249, 0)),
        _run(3, "5m", unset, (5322.9, 6.7, 17.0, 51946, 0, 1)),
        _run(4, "5m", 3, (286.4, 5.6, 16.8, 1328, 8, 0)),
        _run(5, "5m", 10, (444.0, 5.6, 17.0, 2936, 1, 0)),
        _run(6, "15m", unset, (13462.8, 8.4, 14.6, 44415, 0, 0)),
        _run(7, "15m", 3, (466.8, 7.9, 14.5, 972, 0, 0)),
        _run(8, "15m", 10, (945.3, 7.9, 14.5, 2568, 0, 0)),
    ]
    none = _run(NONE, "", None, (71925.4, 55.1, 59.2, 0, 0, 0))
    fig = pareto_figure(Tuning(runs, none, (1,), "gang"), runs[7])
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_text()]
    assert len(labels) == len(runs)
    # label boxes of the text alone (a leader line may cross)
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    boxes = {t.get_text(): Text.get_window_extent(t, renderer) for t in labels}
    # THEN no two labels overlap
    for (a, ba), (b, bb) in combinations(boxes.items(), 2):
        assert _overlap(ba, bb) == 0, (a, b)
    # AND each stays inside the axes and off every marker (points, rings, squares)
    frame = _box(ax, fig)
    markers = _markers(ax, fig)
    assert len(markers) >= len(runs)
    for text, box in boxes.items():
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1, text
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1, text
        for marker in markers:
            assert _overlap(box, marker) == 0, text
    # AND the legend is outside the axes, the counts and baselines are written
    assert _overlap(_box(ax.get_legend(), fig), frame) == 0
    assert "timeout=2m, backoffLimitCount=3\n263 healthy deactivated" in boxes
    assert "timeout=2m, backoffLimitCount=unset\n245 healthy never finished" in boxes
    assert any("today's settings and Muster's defaults" in t for t in boxes)
    plt.close(fig)
