"""`muster tune`'s ranking: the runs ordered by an objective behind the guard rail,
as a table, a CSV and the recommended settings document with where it came from.
The picture is `muster.sim.tune_picture`, which reads this module."""

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

from muster.core import parse_settings
from muster.sim.figures import format_seconds, format_spread
from muster.sim.tune_grid import (
    BASELINE_NAMES,
    UNSET_VALUE,
    Dominated,
    Run,
    Trial,
    Tuning,
    jct_p95_of,
    queue_p95_of,
    show_value,
    wasted_of,
)


@dataclass(frozen=True, slots=True)
class Objective:
    name: str
    label: str
    key: Callable[[Run], float]
    trial: Callable[[Trial], float]  # the figure on one seed


OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("wasted", "wasted GPU-hours", lambda r: r.wasted, lambda t: wasted_of(t.summary)),
        Objective(
            "queue-delay",
            "queue delay p95 (s)",
            lambda r: r.queue_delay_p95,
            lambda t: queue_p95_of(t.summary),
        ),
        Objective("jct", "JCT p95 (s)", lambda r: r.jct_p95, lambda t: jct_p95_of(t.summary)),
        Objective(
            "evictions",
            "evictions",
            lambda r: r.evictions,
            lambda t: float(t.summary["evictions"]),
        ),
        Objective(
            "deactivated-healthy",
            "deactivated healthy workloads",
            lambda r: float(r.deactivated_healthy),
            lambda t: float(t.deactivated_healthy),
        ),
    )
}
DEFAULT_OBJECTIVE = "wasted"


# ---------------------------------------------------------------------- ranking


def rank(runs: Sequence[Run], objective: Objective) -> list[Run]:
    """Guard-railed runs first; the others after them, fewest healthy workloads lost
    first (losing 1 is not losing 263); then the objective, queue delay, JCT, order."""
    return sorted(
        runs,
        key=lambda r: (
            not r.guarded,
            r.healthy_lost,
            objective.key(r),
            r.queue_delay_p95,
            r.jct_p95,
            r.index,
        ),
    )


def within_spread(best: Run, ranked: Sequence[Run], objective: Objective) -> list[Run]:
    """The other settings that pass the guard rail whose objective, from its lowest to
    its highest over the seeds, overlaps the recommendation's: the seeds do not tell
    them apart. Empty on one seed."""
    if len(best.trials) < 2:
        return []
    low, high = _range(best, objective)
    found = []
    for r in ranked:
        if r is best or not r.guarded:
            continue
        lo, hi = _range(r, objective)
        if lo <= high and low <= hi:
            found.append(r)
    return found


def _range(r: Run, objective: Objective) -> tuple[float, float]:
    values = [objective.trial(t) for t in r.trials]
    return min(values), max(values)


def format_within_spread(best: Run, close: Sequence[Run], objective: Objective) -> str:
    """The recommendation's caveat when other settings are within its spread."""
    shown = "; ".join(f"{r.label}{r.mark} ({_objective_range(r, objective)})" for r in close)
    return (
        f"within the spread of the recommendation ({_objective_range(best, objective)}), "
        f"the seeds do not tell it apart from: {shown}"
    )


def _objective_range(r: Run, objective: Objective) -> str:
    low, high = _range(r, objective)
    return f"{objective.label} {_number(low)} to {_number(high)}"


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
    "healthy deactivated",
    "healthy unfinished",
    "finished",
)


def table_rows(ranked: Sequence[Run]) -> list[list[str]]:
    rows = []
    for n, r in enumerate(ranked, start=1):
        rows.append(
            [
                f"{n}" if r.guarded else f"{n} (x)",
                r.label + r.mark,
                _with_spread(r, wasted_of, lambda v: f"{v:.1f}"),
                _with_spread(r, queue_p95_of, None),
                _with_spread(r, jct_p95_of, None),
                f"{r.evictions:.0f}",
                f"{r.deactivated_healthy}",
                f"{r.unfinished_healthy}",
                f"{r.finished:.0f}",
            ]
        )
    return rows


def format_table(ranked: Sequence[Run], dominated: Sequence[Dominated] = ()) -> str:
    """The ranking, then the settings stopped as dominated (listed, never ranked)."""
    rows = [list(_COLUMNS), *table_rows(ranked)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    widths[1] = max([widths[1], *(len(d.label) for d in dominated)])
    lines = []
    for row in rows:
        cells = [row[0].rjust(widths[0]), row[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(row[2:], widths[2:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    for d in dominated:
        lines.append(f"{'-'.rjust(widths[0])}  {d.label.ljust(widths[1])}  {format_dominated(d)}")
    return "\n".join(lines)


def format_dominated(d: Dominated) -> str:
    return f"dominated at {d.at * 100:.0f}% of the trace"


def _with_spread(
    r: Run, figure: Callable[[Mapping[str, Any]], float], fmt: Callable[[float], str] | None
) -> str:
    """The mean over the seeds, `±` half the distance between the lowest and highest."""
    values = r.values(figure)
    mean = math.fsum(values) / len(values)
    if fmt is None:
        return format_seconds(mean) if len(values) == 1 else format_spread(values)
    if len(values) == 1:
        return fmt(mean)
    return f"{fmt(mean)}±{fmt((max(values) - min(values)) / 2)}"


def describe(r: Run) -> str:
    """What one run lost of the healthy workloads, in words (empty when nothing)."""
    parts = []
    if r.deactivated_healthy:
        parts.append(f"{r.deactivated_healthy} healthy deactivated")
    if r.unfinished_healthy:
        parts.append(f"{r.unfinished_healthy} healthy never finished")
    return ", ".join(parts)


# ---------------------------------------------------------------------- files


def recommended_document(run: Run) -> dict[str, Any]:
    """The winning settings document; a setting the grid left `unset` is written null.

    null is what `muster settings set --file` reads as "back to the deployment's
    value" (which is unset unless the deployment sets it). Muster's defaults, when
    they win, are written out in full so that applying them sets them.
    """
    if run.in_grid or "today" in run.baselines:
        doc = copy.deepcopy(run.document)
    else:
        doc = parse_settings(run.document).to_dict()
    for path, value in run.choice:
        if value is UNSET_VALUE:
            node = doc
            parts = path.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = None
    return doc


def write_outputs(
    tuning: Tuning,
    ranked: Sequence[Run],
    objective: Objective,
    out: Path,
    *,
    provenance: Mapping[str, Any] | None = None,
) -> list[Path]:
    """ranking.csv, and for the best run that passes the guard rail its settings
    document (with where it came from) and its CDK context; the picture is
    `muster.sim.tune_picture`'s."""
    out.mkdir(parents=True, exist_ok=True)
    table = out / "ranking.csv"
    with table.open("w", newline="", encoding="utf-8") as handle:
        write_csv(ranked, handle, tuning.dominated)
    written = [table]
    best = next((r for r in ranked if r.guarded), None)
    if best is not None:
        doc = recommended_document(best)
        settings_file = out / "recommended-settings.yaml"
        where = dict(provenance or {})
        where["figures"] = figures(best, tuning)
        settings_file.write_text(
            settings_header(best, objective, settings_file.name, where)
            + yaml.safe_dump(doc, sort_keys=True),
            encoding="utf-8",
        )
        context = out / "cdk-context.json"
        clean = _without_nulls(doc)
        context.write_text(json.dumps({"muster:settings": clean}, indent=2) + "\n")
        written += [settings_file, context]
    return written


def write_csv(ranked: Sequence[Run], handle: Any, dominated: Sequence[Dominated] = ()) -> None:
    """One row per setting: means over the seeds, with their lowest and highest; a
    setting stopped as dominated has no figures, and the fraction of the horizon
    (`dominatedAt`) its furthest run reached."""
    writer = csv.writer(handle)
    choice = (ranked[0].choice if ranked else dominated[0].choice) if ranked or dominated else ()
    writer.writerow(
        [
            "rank",
            "guardRail",
            "baseline",
            *(path for path, _ in choice),
            "wastedGpuHours",
            "wastedGpuHoursMin",
            "wastedGpuHoursMax",
            "queueDelayP95Seconds",
            "queueDelayP95SecondsMin",
            "queueDelayP95SecondsMax",
            "jctP95Seconds",
            "jctP95SecondsMin",
            "jctP95SecondsMax",
            "evictions",
            "deactivatedHealthy",
            "unfinishedHealthy",
            "finished",
            "seeds",
            "dominatedAt",
        ]
    )
    for n, r in enumerate(ranked, start=1):
        writer.writerow(
            [
                n,
                "pass" if r.guarded else "fail",
                " ".join(r.baselines),
                *(show_value(v) for _, v in r.choice),
                *_csv_figure(r, wasted_of),
                *_csv_figure(r, queue_p95_of),
                *_csv_figure(r, jct_p95_of),
                _number(r.evictions),
                r.deactivated_healthy,
                r.unfinished_healthy,
                _number(r.finished),
                " ".join(str(t.seed) for t in r.trials),
                "",
            ]
        )
    blank = [""] * 13
    for d in dominated:
        seeds = " ".join(str(s) for s in d.seeds)
        writer.writerow(
            ["", "dominated", "", *(show_value(v) for _, v in d.choice), *blank, seeds, d.at]
        )


def _csv_figure(r: Run, figure: Callable[[Mapping[str, Any]], float]) -> list[Any]:
    values = r.values(figure)
    mean = math.fsum(values) / len(values)
    return [_number(mean), _number(min(values)), _number(max(values))]


def _number(value: float) -> Any:
    """A figure for the CSV: blank for never, whole numbers without a fraction."""
    if not math.isfinite(value):
        return ""
    rounded = round(value, 3)
    return int(rounded) if float(rounded).is_integer() else rounded


def figures(r: Run, tuning: Tuning) -> dict[str, Any]:
    """The recommendation's figures beside the baselines' and plain Kubernetes', for
    the provenance block of the settings file."""
    found: dict[str, Any] = {"recommended": _figures(r)}
    for b in tuning.baseline_runs:
        names = " and ".join(BASELINE_NAMES[n] for n in b.baselines)
        found[names] = _figures(b)
    found["plain Kubernetes (none)"] = _figures(tuning.none, settings=False)
    return found


def _figures(r: Run, *, settings: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {"settings": r.label} if settings else {}
    for key, figure in (
        ("wastedGpuHours", wasted_of),
        ("queueDelayP95Seconds", queue_p95_of),
        ("jctP95Seconds", jct_p95_of),
    ):
        values = r.values(figure)
        mean = _number(math.fsum(values) / len(values))
        if len(values) == 1:
            doc[key] = mean
        else:
            doc[key] = {"mean": mean, "min": _number(min(values)), "max": _number(max(values))}
    doc["evictions"] = _number(r.evictions)
    doc["finished"] = _number(r.finished)
    if settings:
        doc["healthyDeactivated"] = r.deactivated_healthy
        doc["healthyUnfinished"] = r.unfinished_healthy
    return doc


PROVENANCE_MARK = "# provenance (YAML below '# '):"


def settings_header(
    best: Run, objective: Objective, name: str, provenance: Mapping[str, Any]
) -> str:
    """What the settings file is, how to apply it, and (as commented YAML) where it came from."""
    lines = [
        f"muster tune: best by {objective.label} among settings that lose no workload",
        "that finished under plain Kubernetes (none deactivated, none left unfinished),",
        "on every seed. Apply with",
        f"  muster settings set --file {name}",
    ]
    if best.baselines:
        lines.append(
            "It is " + " and ".join(BASELINE_NAMES[n] for n in best.baselines) + ": nothing "
            "in the grid did better."
        )
    header = "".join(f"# {line}\n" for line in lines) + PROVENANCE_MARK + "\n"
    body = yaml.safe_dump(dict(provenance), sort_keys=False, allow_unicode=True, width=10_000)
    return header + "".join(f"#   {line}\n" for line in body.splitlines())


def read_provenance(text: str) -> dict[str, Any]:
    """The provenance block of a recommended-settings.yaml, as `settings_header` wrote it."""
    lines = text.splitlines()
    start = lines.index(PROVENANCE_MARK) + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("#   "):
            break
        block.append(line[4:])
    found = yaml.safe_load("\n".join(block))
    return dict(found) if isinstance(found, Mapping) else {}


# ---------------------------------------------------------------------- helpers


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
