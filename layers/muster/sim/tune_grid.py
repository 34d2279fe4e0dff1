"""`muster tune`'s grid: every combination of the `--grid` values as a settings
document, each run through the simulator on the same scenario (the same draws:
common random numbers) on one or more seeds, in parallel, beside the baselines
(today's settings, Muster's defaults) and plain Kubernetes on the same seeds."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from muster.core import Settings, SettingsError, parse_settings
from muster.sim.scenario import Scenario
from muster.sim.specs import ScenarioError
from muster.sim.tune_item import make_item
from muster.sim.tune_pool import NONE, PRUNABLE, Task, run_tasks

UNSET = "unset"


class _Unset:
    """A grid value that removes the setting (Kueue's "unset", e.g. no backoff limit)."""

    def __repr__(self) -> str:
        return UNSET


UNSET_VALUE = _Unset()


@dataclass(frozen=True, slots=True)
class Trial:
    """One seed's run of one setting, and the healthy workloads it lost.

    A workload is healthy when it finished under plain Kubernetes (`none`) on the
    same seed; lost when the setting deactivated it, or left it unfinished at the
    scenario's horizon (a timeout shorter than its start-up evicts it forever).
    """

    seed: int
    summary: dict[str, Any]
    deactivated_healthy: int = 0
    unfinished_healthy: int = 0

    @property
    def healthy_lost(self) -> int:
        return self.deactivated_healthy + self.unfinished_healthy


BASELINE_NAMES = {"today": "today's settings", "defaults": "Muster's defaults"}


@dataclass(slots=True)
class Run:
    """One setting (a combination of the grid, or a baseline) and its run on every seed."""

    index: int
    choice: tuple[tuple[str, Any], ...]  # (setting path, value) in grid order
    document: dict[str, Any]  # the whole settings document it ran with
    trials: tuple[Trial, ...]
    baselines: tuple[str, ...] = ()  # "today" (the scenario's settings), "defaults"
    in_grid: bool = True  # False: a baseline the grid does not contain, run beside it

    @property
    def label(self) -> str:
        return ", ".join(f"{path}={show_value(value)}" for path, value in self.choice)

    @property
    def short_label(self) -> str:
        """The label with each setting's last name only, for the picture."""
        return ", ".join(f"{path.rsplit('.', 1)[-1]}={show_value(v)}" for path, v in self.choice)

    @property
    def mark(self) -> str:
        """` [today, defaults]` for a baseline, "" otherwise."""
        return f" [{', '.join(self.baselines)}]" if self.baselines else ""

    @property
    def summary(self) -> dict[str, Any]:
        """The first seed's summary (the scenario's own seed)."""
        return self.trials[0].summary

    def values(self, figure: Callable[[Mapping[str, Any]], float]) -> list[float]:
        """One figure of every seed's summary."""
        return [figure(t.summary) for t in self.trials]

    def spread(self, figure: Callable[[Mapping[str, Any]], float]) -> tuple[float, float]:
        """(lowest, highest) of a figure over the seeds."""
        found = self.values(figure)
        return min(found), max(found)

    @property
    def wasted(self) -> float:
        return _mean(self.values(wasted_of))

    @property
    def queue_delay_p95(self) -> float:
        return _mean(self.values(queue_p95_of))

    @property
    def jct_p95(self) -> float:
        return _mean(self.values(jct_p95_of))

    @property
    def evictions(self) -> float:
        return _mean(self.values(lambda s: float(s["evictions"])))

    @property
    def finished(self) -> float:
        return _mean(self.values(lambda s: float(s["finished"])))

    @property
    def deactivated_healthy(self) -> int:
        """The most healthy workloads it deactivated on any seed."""
        return max(t.deactivated_healthy for t in self.trials)

    @property
    def unfinished_healthy(self) -> int:
        """The most healthy workloads it left unfinished on any seed."""
        return max(t.unfinished_healthy for t in self.trials)

    @property
    def healthy_lost(self) -> int:
        """The most healthy workloads it lost (deactivated or unfinished) on any seed."""
        return max(t.healthy_lost for t in self.trials)

    @property
    def guarded(self) -> bool:
        """Passes the guard rail: on every seed, every workload that finishes under
        `none` finishes under this setting too."""
        return self.healthy_lost == 0


def wasted_of(summary: Mapping[str, Any]) -> float:
    return float(summary["wastedGpuHours"])


def queue_p95_of(summary: Mapping[str, Any]) -> float:
    return none_as_inf(summary["queueDelaySeconds"]["p95"])


def jct_p95_of(summary: Mapping[str, Any]) -> float:
    return none_as_inf(summary["jctSeconds"]["p95"])


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


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
            shown = ", ".join(f"{p}={show_value(v)}" for p, v in choice)
            raise ScenarioError(f"--grid ({shown}): {exc}") from None
        out.append((choice, doc))
    return out


# ---------------------------------------------------------------------- baselines


@dataclass(frozen=True, slots=True)
class Baseline:
    """Settings every tuning is held against: the scenario's own (what runs today) and
    Muster's defaults; one entry when they are the same."""

    names: tuple[str, ...]
    document: dict[str, Any]


def baselines(scenario: Scenario) -> list[Baseline]:
    today = dict(scenario.raw_settings)
    if parse_settings(today) == parse_settings({}):
        return [Baseline(("today", "defaults"), today)]
    return [Baseline(("today",), today), Baseline(("defaults",), {})]


def _effective(doc: Mapping[str, Any], policy: str) -> Settings:
    settings = parse_settings(doc)
    return replace(settings, block_admission=True) if policy == "gang+block" else settings


def effective_choice(
    doc: Mapping[str, Any], grid: Sequence[tuple[str, list[Any]]]
) -> tuple[tuple[str, Any], ...]:
    """What each setting of the grid is under `doc` (defaults filled in; `unset` if none)."""
    written = parse_settings(doc).to_dict()
    choice = []
    for path, _ in grid:
        node: Any = written
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        choice.append((path, UNSET_VALUE if node is None else node))
    return tuple(choice)


# ---------------------------------------------------------------------- running


@dataclass(frozen=True, slots=True)
class Dominated:
    """A setting stopped once its objective passed the best finished setting's that
    passes the guard rail: it can only have ended worse, so it is never recommended."""

    index: int
    choice: tuple[tuple[str, Any], ...]
    document: dict[str, Any]
    at: float  # the fraction of the scenario's horizon its furthest run reached
    seeds: tuple[int, ...] = ()
    in_grid: bool = True

    @property
    def label(self) -> str:
        return ", ".join(f"{path}={show_value(value)}" for path, value in self.choice)


@dataclass(slots=True)
class Tuning:
    """Every setting's runs (the grid's in grid order, then baselines not in it), and
    plain Kubernetes' on the same seeds; the settings stopped as dominated apart."""

    runs: list[Run]
    none: Run
    seeds: tuple[int, ...]
    policy: str
    dominated: list[Dominated] = field(default_factory=list)

    @property
    def baseline_runs(self) -> list[Run]:
        return [r for r in self.runs if r.baselines]


Setting = tuple[tuple[tuple[str, Any], ...], dict[str, Any], str, tuple[str, ...]]


def _settings(
    first: Scenario, grid: Sequence[tuple[str, list[Any]]], policy: str, with_baselines: bool
) -> tuple[list[Setting], int]:
    """(choice, document, policy, baseline names) of every setting to run, and how
    many of them are the grid's (the first ones)."""
    combos = combinations(first, grid)
    settings: list[Setting] = [(choice, doc, policy, ()) for choice, doc in combos]
    effective = [_effective(doc, policy) for _, doc in combos]
    for base in baselines(first) if with_baselines else ():
        same = _effective(base.document, "gang")
        if same in effective:  # the grid has it: mark that combination
            i = effective.index(same)
            choice, doc, run_policy, names = settings[i]
            settings[i] = (choice, doc, run_policy, names + base.names)
        else:
            shown = effective_choice(base.document, grid)
            settings.append((shown, base.document, "gang", base.names))
    return settings, len(combos)


def run_order(settings: Sequence[Setting]) -> list[int]:
    """The settings' indexes in the order they run: the baselines first (what runs
    today is the first bound to beat), then the grid from its last combination to
    its first (grids are written from the tightest value to the loosest, and loose
    settings are the likeliest to pass the guard rail and so to bound the others)."""
    first = [i for i, s in enumerate(settings) if s[3]]
    return first + [i for i in reversed(range(len(settings))) if not settings[i][3]]


@dataclass(frozen=True, slots=True)
class GridPlan:
    """Every run of a tuning as items, before any runs: what a pool or a distributed
    map is handed, and what `assemble` turns their results into."""

    scenarios: list[Scenario]  # one per seed, in the seeds' order
    settings: list[Setting]
    in_grid: int  # the first `in_grid` settings are the grid's
    tasks: list[Task]
    policy: str


def plan_grid(
    scenarios: Scenario | Sequence[Scenario],
    grid: Sequence[tuple[str, list[Any]]],
    *,
    policy: str = "gang",
    with_baselines: bool = True,
    prune: str | None = None,
    source: str | Path | None = None,
) -> GridPlan:
    """Plain Kubernetes' run on each seed, then every setting's (in `run_order`) on
    each seed, as items naming `source`, the scenario file."""
    runs_on = [scenarios] if isinstance(scenarios, Scenario) else list(scenarios)
    settings, in_grid = _settings(runs_on[0], grid, policy, with_baselines)
    pruning = {"objective": prune} if prune in PRUNABLE else None
    tasks: list[Task] = [
        (at, make_item(source, sc.seed, "none", dict(sc.raw_settings), NONE))
        for at, sc in enumerate(runs_on)
    ]
    for i in run_order(settings):
        _, doc, run_policy, names = settings[i]
        for at, sc in enumerate(runs_on):
            item_prune = None if names else pruning
            tasks.append((at, make_item(source, sc.seed, run_policy, doc, i, item_prune)))
    return GridPlan(runs_on, settings, in_grid, tasks, policy)


def assemble(plan: GridPlan, results: Mapping[tuple[int, int], Mapping[str, Any]]) -> Tuning:
    """The tuning from every task's result by (seed's place, index): a workload that
    plain Kubernetes finishes on a seed is healthy on it."""
    runs_on, in_grid = plan.scenarios, plan.in_grid
    seeds = tuple(sc.seed for sc in runs_on)
    healthy = [frozenset(results[(at, NONE)]["finished"]) for at in range(len(runs_on))]
    runs, dominated = [], []
    for i, (choice, doc, _, names) in enumerate(plan.settings):
        outs = [results[(at, i)] for at in range(len(runs_on))]
        stopped = [o["dominatedAt"] for o in outs if o["summary"] is None]
        if stopped:
            at = max(stopped)
            dominated.append(Dominated(i, choice, doc, at, seeds, in_grid=i < in_grid))
            continue
        trials = []
        for at, (seed, out) in enumerate(zip(seeds, outs, strict=True)):
            lost_deactivated = healthy[at] & frozenset(out["deactivated"])
            unfinished = healthy[at] - frozenset(out["finished"]) - lost_deactivated
            trials.append(Trial(seed, out["summary"], len(lost_deactivated), len(unfinished)))
        runs.append(Run(i, choice, doc, tuple(trials), names, in_grid=i < in_grid))
    none_trials = tuple(
        Trial(seed, results[(at, NONE)]["summary"]) for at, seed in enumerate(seeds)
    )
    none = Run(NONE, (), dict(runs_on[0].raw_settings), none_trials, in_grid=False)
    return Tuning(runs, none, seeds, plan.policy, dominated)


def run_grid(
    scenarios: Scenario | Sequence[Scenario],
    grid: Sequence[tuple[str, list[Any]]],
    *,
    policy: str = "gang",
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    with_baselines: bool = True,
    prune: str | None = None,
    source: str | Path | None = None,
) -> Tuning:
    """Every combination's runs on every seed (the same scenario file expanded under
    each), the baselines beside them, and plain Kubernetes (`none`) on each seed, in
    a pool of `jobs` processes. With `prune` (an objective that only grows:
    `wasted`, `evictions`), a grid setting stops once it is worse than the best
    finished one that passes the guard rail (`muster.sim.tune_pool`).
    `source` is the scenario file, named in each item."""
    plan = plan_grid(
        scenarios, grid, policy=policy, with_baselines=with_baselines, prune=prune, source=source
    )
    results = run_tasks(
        plan.tasks,
        plan.scenarios,
        settings=len(plan.settings),
        jobs=jobs,
        objective=prune,
        progress=progress,
    )
    return assemble(plan, results)


def draws_from_seed(
    scenario: Scenario, other: Scenario, documents: Iterable[Mapping[str, Any]]
) -> bool:
    """Whether runs of the scenario depend on its seed: expanded under another seed
    (`other`) it has other workloads or node faults, or a setting jitters the backoff."""
    if other.workloads != scenario.workloads or other.faults != scenario.faults:
        return True
    for doc in documents:
        parsed = parse_settings(doc)
        if any(q.backoff_jitter > 0 for q in (parsed.defaults, *parsed.queues.values())):
            return True
    return False


# ---------------------------------------------------------------------- helpers


def show_value(value: Any) -> str:
    """A grid value as it is written on the command line."""
    if value is UNSET_VALUE:
        return UNSET
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def none_as_inf(value: float | None) -> float:
    """A percentile no workload reached (None) ranks below every figure."""
    return math.inf if value is None else float(value)
