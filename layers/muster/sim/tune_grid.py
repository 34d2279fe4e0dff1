"""`muster tune`'s grid: every combination of the `--grid` values as a settings
document, each run through the simulator on the same scenario (the same draws:
common random numbers), in parallel, beside one run of plain Kubernetes."""

from __future__ import annotations

import copy
import itertools
import math
import multiprocessing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
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
        return ", ".join(f"{path}={show_value(value)}" for path, value in self.choice)

    @property
    def short_label(self) -> str:
        """The label with each setting's last name only, for the picture."""
        return ", ".join(f"{path.rsplit('.', 1)[-1]}={show_value(v)}" for path, v in self.choice)

    @property
    def wasted(self) -> float:
        return float(self.summary["wastedGpuHours"])

    @property
    def queue_delay_p95(self) -> float:
        return none_as_inf(self.summary["queueDelaySeconds"]["p95"])

    @property
    def jct_p95(self) -> float:
        return none_as_inf(self.summary["jctSeconds"]["p95"])

    @property
    def evictions(self) -> int:
        return int(self.summary["evictions"])

    @property
    def guarded(self) -> bool:
        """Passes the guard rail: no workload that finishes under `none` is deactivated."""
        return self.deactivated_healthy == 0


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
