"""`muster tune`'s runs across a pool of processes, and the bound that prunes them.

Each run is an item of `muster.sim.tune_item` (one setting on one seed). Items are
handed out in the order given (plain Kubernetes first, then the baselines, then the
grid), one at a time, so that good runs tend to finish early.

Pruning cannot change the answer. A setting whose objective (wasted GPU-hours or
evictions, which only grow as simulated time passes) is already above the best
finished setting's that passes the guard rail can only end above it, so it can
only rank below it: its runs stop there and it is reported as dominated. The
bound of each setting is its seeds' total, K times the best mean (with a margin
for the figures' rounding) less what its other seeds have already reached; the
pool's processes read it from shared memory as it falls, so a bound set by one
process's run stops another's. Plain Kubernetes and the baselines always run to
the end: the guard rail and the comparison with today's settings need them whole.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Iterable, Mapping, MutableSequence, Sequence
from typing import Any

from muster.sim.scenario import Scenario
from muster.sim.tune_item import run_item

PRUNABLE = ("wasted", "evictions")
NONE = -1  # the index of plain Kubernetes' run

# A margin on a setting's total over its seeds, so that a setting stopped past the
# bound ranks strictly below the best once its figures are rounded (wasted GPU-hours
# are rounded to 0.001 per seed; evictions are whole).
_MARGIN_PER_SEED = {"wasted": 0.001, "evictions": 0.0}
_MARGIN = {"wasted": 0.0, "evictions": 0.5}

Task = tuple[int, dict[str, Any]]  # (seed's place, item)

_scenarios: Sequence[Scenario] = ()  # each process's copy (one per seed), set by `_init`
_limits: MutableSequence[float] | None = None  # each setting's bound (shared memory)


def _init(scenarios: Sequence[Scenario], limits: MutableSequence[float] | None) -> None:
    global _scenarios, _limits
    _scenarios, _limits = scenarios, limits


def _work(task: Task) -> tuple[int, dict[str, Any]]:
    at, item = task
    index, limits = int(item["index"]), _limits
    bound = None
    if "prune" in item and limits is not None:

        def bound() -> float:
            return limits[index]

    return at, run_item(item, scenario=_scenarios[at], bound=bound)


class Bounds:
    """The best finished setting that passes the guard rail, and each prunable
    setting's bound from it, kept up to date as results come in."""

    def __init__(
        self,
        objective: str,
        seeds: int,
        settings: int,
        limits: MutableSequence[float] | None,
    ) -> None:
        self.objective, self.seeds, self.limits = objective, seeds, limits
        self.settings = settings
        self._done: dict[int, dict[int, float]] = {}  # setting -> seed's place -> figure
        self._outs: dict[tuple[int, int], dict[str, Any]] = {}
        self._best = math.inf

    def figure(self, summary: Mapping[str, Any]) -> float:
        return float(summary["wastedGpuHours" if self.objective == "wasted" else "evictions"])

    def record(self, at: int, out: Mapping[str, Any]) -> None:
        index = int(out["index"])
        self._outs[(at, index)] = dict(out)
        if index != NONE:
            done = self._done.setdefault(index, {})
            stopped = out["summary"] is None
            done[at] = float(out["objectiveSoFar"]) if stopped else self.figure(out["summary"])
        self._update_best()
        self._set_limits()

    def _update_best(self) -> None:
        for index, done in self._done.items():
            if len(done) == self.seeds and self._guarded(index):
                mean = math.fsum(done[at] for at in range(self.seeds)) / self.seeds
                self._best = min(self._best, mean)

    def _guarded(self, index: int) -> bool:
        """Finished on every seed, losing no workload plain Kubernetes finishes."""
        for at in range(self.seeds):
            out, none = self._outs.get((at, index)), self._outs.get((at, NONE))
            if out is None or none is None or out["summary"] is None:
                return False
            healthy = frozenset(none["finished"])
            if healthy - frozenset(out["finished"]) or healthy & frozenset(out["deactivated"]):
                return False
        return True

    def _set_limits(self) -> None:
        if self.limits is None or not math.isfinite(self._best):
            return
        total = self.seeds * (self._best + _MARGIN_PER_SEED[self.objective])
        total += _MARGIN[self.objective]
        for index in range(self.settings):
            reached = math.fsum(self._done.get(index, {}).values())
            self.limits[index] = total - reached


def run_tasks(
    tasks: Sequence[Task],
    scenarios: Sequence[Scenario],
    *,
    settings: int,
    jobs: int = 1,
    objective: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[tuple[int, int], dict[str, Any]]:
    """Every task's result by (seed's place, index), in `jobs` processes; with an
    `objective` of PRUNABLE, items that carry `prune` stop once dominated."""
    pruning = objective in PRUNABLE
    limits: MutableSequence[float] | None = None
    if pruning:
        context = multiprocessing.get_context()
        limits = (
            context.RawArray("d", [math.inf] * max(settings, 1))
            if jobs > 1
            else ([math.inf] * max(settings, 1))
        )
    bounds = Bounds(objective or "wasted", len(scenarios), settings, limits if pruning else None)
    results: dict[tuple[int, int], dict[str, Any]] = {}
    pool = None
    if jobs <= 1:
        _init(scenarios, limits)
        outcomes: Iterable[tuple[int, dict[str, Any]]] = map(_work, tasks)
    else:
        pool = multiprocessing.get_context().Pool(
            min(jobs, len(tasks)), initializer=_init, initargs=(scenarios, limits)
        )
        outcomes = pool.imap_unordered(_work, tasks)
    try:
        for at, out in outcomes:
            results[(at, int(out["index"]))] = out
            bounds.record(at, out)
            if progress is not None:
                progress(len(results), len(tasks))
    finally:
        if pool is not None:
            pool.close()
            pool.join()
        _init((), None)
    return results
