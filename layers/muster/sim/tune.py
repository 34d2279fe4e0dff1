"""Tuning: try a grid of settings on a scenario and recommend one (`muster tune`).

Every combination of the `--grid` values runs the same scenario (the same
workloads, startup times, broken jobs, node faults and jitter draws, all from the
scenario's seed: common random numbers, so two runs differ by their settings
alone) through the simulator, in parallel across the machine's cores. Plain
Kubernetes (`none`) runs once beside them: a workload that finished there is
healthy, and settings that deactivate a healthy workload are never recommended.
The runs are ranked by the objective; the best one that passes the guard rail is
written as a settings document for `muster settings set --file` and the CDK
context. docs/simulator.md ("Tuning") describes the objectives and the guard rail.
"""

from __future__ import annotations

import copy
import csv
import itertools
import json
import math
import multiprocessing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from muster.core import SettingsError, parse_settings
from muster.sim.engine import simulate
from muster.sim.scenario import Scenario
from muster.sim.specs import ScenarioError

UNSET = "unset"


class _Unset:
    """A grid value that removes the setting (Kueue's "unset", e.g. no backoff limit)."""

    def __repr__(self) -> str:
        return UNSET


UNSET_VALUE = _Unset()


@dataclass(frozen=True, slots=True)
class Objective:
    name: str
    label: str
    key: Callable[[Run], float]


@dataclass(slots=True)
class Run:
    """One combination of the grid and what the simulator made of it."""

    index: int
    choice: tuple[tuple[str, Any], ...]  # (setting path, value) in grid order
    document: dict[str, Any]  # the whole settings document it ran with
    summary: dict[str, Any]
    deactivated: frozenset[str]
    deactivated_healthy: int = 0

    @property
    def label(self) -> str:
        return ", ".join(f"{path}={_show(value)}" for path, value in self.choice)

    @property
    def short_label(self) -> str:
        """The label with each setting's last name only, for the picture."""
        return ", ".join(f"{path.rsplit('.', 1)[-1]}={_show(v)}" for path, v in self.choice)

    @property
    def wasted(self) -> float:
        return float(self.summary["wastedGpuHours"])

    @property
    def queue_delay_p95(self) -> float:
        return _or_inf(self.summary["queueDelaySeconds"]["p95"])

    @property
    def jct_p95(self) -> float:
        return _or_inf(self.summary["jctSeconds"]["p95"])

    @property
    def evictions(self) -> int:
        return int(self.summary["evictions"])

    @property
    def guarded(self) -> bool:
        """Passes the guard rail: no workload that finishes under `none` is deactivated."""
        return self.deactivated_healthy == 0


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


# ---------------------------------------------------------------------- the grid


def parse_grid(items: Sequence[str]) -> list[tuple[str, list[Any]]]:
    """`key=v1,v2` items as (dotted setting path, values); `unset` removes the setting."""
    grid: list[tuple[str, list[Any]]] = []
    seen: set[str] = set()
    for item in items:
        key, sep, text = item.partition("=")
        path = key.strip()
        if not sep or not path or not all(path.split(".")) or not text.strip():
            raise ScenarioError(
                f"--grid {item!r}: expected SETTING=V1,V2,... "
                "(e.g. timeout=2m,5m,15m or requeuingStrategy.backoffLimitCount=unset,3,10)"
            )
        if path in seen:
            raise ScenarioError(f"--grid {path}: given twice")
        seen.add(path)
        values = [_value(v.strip()) for v in text.split(",") if v.strip()]
        grid.append((path, values))
    if not grid:
        raise ScenarioError("--grid: name at least one setting and its values")
    return grid


def _value(text: str) -> Any:
    if text == UNSET:
        return UNSET_VALUE
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def settings_document(base: Mapping[str, Any], choice: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """`base` with each (dotted path, value) of `choice` set, or removed for `unset`."""
    doc = copy.deepcopy(dict(base))
    for path, value in choice:
        parts = path.split(".")
        node = doc
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ScenarioError(
                    f"--grid {path}: {'.'.join(parts[: i + 1])} is a value, not a group of settings"
                )
            node = child
        if value is UNSET_VALUE:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return doc


def combinations(
    scenario: Scenario, grid: Sequence[tuple[str, list[Any]]]
) -> list[tuple[tuple[tuple[str, Any], ...], dict[str, Any]]]:
    """Every combination, with its settings document, checked before anything runs."""
    out = []
    paths = [path for path, _ in grid]
    for values in itertools.product(*(vs for _, vs in grid)):
        choice = tuple(zip(paths, values, strict=True))
        doc = settings_document(scenario.raw_settings, choice)
        try:
            parse_settings(doc)
        except SettingsError as exc:
            shown = ", ".join(f"{p}={_show(v)}" for p, v in choice)
            raise ScenarioError(f"--grid ({shown}): {exc}") from None
        out.append((choice, doc))
    return out


def with_settings(scenario: Scenario, doc: Mapping[str, Any]) -> Scenario:
    """The same scenario (same workloads and draws) under another settings document."""
    settings = replace(parse_settings(doc), gpu_quota=scenario.gpu_quota)
    return replace(scenario, settings=settings, raw_settings=dict(doc))


# ---------------------------------------------------------------------- running

_scenario: Scenario | None = None  # each worker's copy, set once by `_init`


def _init(scenario: Scenario) -> None:
    global _scenario
    _scenario = scenario


Outcome = tuple[int, dict[str, Any], list[str], list[str]]


def _run_one(task: tuple[int, str, dict[str, Any]]) -> Outcome:
    """(index, summary, workloads deactivated, workloads finished) of one run."""
    index, policy, doc = task
    assert _scenario is not None
    result = simulate(with_settings(_scenario, doc), policy)
    deactivated = sorted({e["workload"] for e in result.events if e["event"] == "Deactivated"})
    finished = sorted({e["workload"] for e in result.events if e["event"] == "Finished"})
    return index, result.summary, deactivated, finished


def run_grid(
    scenario: Scenario,
    grid: Sequence[tuple[str, list[Any]]],
    *,
    policy: str = "gang",
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[Run], dict[str, Any]]:
    """Every combination's run (in grid order) and the `none` baseline's summary."""
    combos = combinations(scenario, grid)
    tasks = [(i, policy, doc) for i, (_, doc) in enumerate(combos)]
    tasks.append((-1, "none", dict(scenario.raw_settings)))
    results: dict[int, tuple[dict[str, Any], list[str], list[str]]] = {}
    done = 0
    if jobs <= 1:
        _init(scenario)
        outcomes: Iterable[Outcome] = map(_run_one, tasks)
        pool = None
    else:
        pool = multiprocessing.get_context().Pool(
            min(jobs, len(tasks)), initializer=_init, initargs=(scenario,)
        )
        outcomes = pool.imap_unordered(_run_one, tasks)
    try:
        for index, summary, deactivated, finished in outcomes:
            results[index] = (summary, deactivated, finished)
            done += 1
            if progress is not None:
                progress(done, len(tasks))
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    baseline, _, healthy = results[-1]
    finished_under_none = frozenset(healthy)
    runs = []
    for i, (choice, doc) in enumerate(combos):
        summary, deactivated, _ = results[i]
        names = frozenset(deactivated)
        runs.append(Run(i, choice, doc, summary, names, len(names & finished_under_none)))
    return runs, baseline


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
                _seconds(r.queue_delay_p95),
                _seconds(r.jct_p95),
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


def format_baseline(baseline: Mapping[str, Any]) -> str:
    """The `none` run's line beside the ranking: what plain Kubernetes makes of the scenario."""
    return (
        f"plain Kubernetes (none): {baseline['wastedGpuHours']:.1f} wasted GPU-h, "
        f"queue p95 {_seconds(_or_inf(baseline['queueDelaySeconds']['p95']))}, "
        f"JCT p95 {_seconds(_or_inf(baseline['jctSeconds']['p95']))}"
    )


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
                    *(_show(v) for _, v in r.choice),
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
    none_delay = _or_inf(baseline["queueDelaySeconds"]["p95"])
    ax.set_title(
        "muster tune: every setting tried\n"
        f"(plain Kubernetes: {float(baseline['wastedGpuHours']):,.0f} wasted GPU-hours, "
        f"queue delay p95 {_seconds(none_delay)})",
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


def _show(value: Any) -> str:
    if value is UNSET_VALUE:
        return UNSET
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _or_inf(value: float | None) -> float:
    return math.inf if value is None else float(value)


def _seconds(value: float) -> str:
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
