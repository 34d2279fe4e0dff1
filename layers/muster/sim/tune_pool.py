"""`muster tune`'s runs across a pool of processes, and the bound that prunes them.

Each run is an item of `muster.sim.tune_item` (one setting on one seed). Items are
handed out in the order given (plain Kubernetes first, then the baselines, then the
grid), one at a time, so that good runs tend to finish early.

Pruning cannot change the answer. A setting whose objective (wasted GPU-hours or
evictions, which only grow as simulated time passes) is already above the best
finished setting's that passes the guard rail can only end above it, so it can
only rank below it: its runs stop there and it is reported as dominated. The
bound on a setting's total over its K seeds is K times the best mean (with a
margin for the figures' rounding), and a run stops once its own figure passes
what is left of it after its other seeds' figures so far; the pool's processes
share both in memory as they go, so a bound set by one process's run stops
another's, and two seeds of one setting running at once stop together. Plain
Kubernetes and the baselines always run to the end: the guard rail and the
comparison with today's settings need them whole.

Runs that share nothing while they run (the items of a distributed map) are run
in two batches instead (`run_in_phases`): first plain Kubernetes and the
baselines, then the rest, each with the bound the first batch's results give
(the same `Bounds`), fixed for the batch.
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
Results = dict[tuple[int, int], dict[str, Any]]  # (seed's place, index) -> result
Batch = Sequence[tuple[int, Mapping[str, Any]]]  # items to run as one map's execution

_scenarios: Sequence[Scenario] = ()  # each process's copy (one per seed), set by `_init`
# Shared by the pool's processes: [the bound on a setting's total over its seeds,
# then what each (setting, seed) has reached so far, setting by setting].
_shared: MutableSequence[float] | None = None


def _init(scenarios: Sequence[Scenario], shared: MutableSequence[float] | None) -> None:
    global _scenarios, _shared
    _scenarios, _shared = scenarios, shared


def _work(task: Task) -> tuple[int, dict[str, Any]]:
    at, item = task
    shared, seeds = _shared, len(_scenarios)
    bound = None
    if "prune" in item and shared is not None:
        first = 1 + int(item["index"]) * seeds
        others = [first + j for j in range(seeds) if j != at]

        def bound(so_far: float) -> float:
            """This run's bound: what is left of the setting's total once its other
            seeds' figures so far are taken off (each only grows: the bound only falls)."""
            shared[first + at] = so_far
            return shared[0] - math.fsum(shared[j] for j in others)

    return at, run_item(item, scenario=_scenarios[at], bound=bound)


class Bounds:
    """The best finished setting that passes the guard rail, the bound on every
    other setting's total from it, and each run's figure, kept up to date in
    `shared` as results come in."""

    def __init__(self, objective: str, seeds: int, shared: MutableSequence[float] | None) -> None:
        self.objective, self.seeds, self.shared = objective, seeds, shared
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
            if self.shared is not None:
                self.shared[1 + index * self.seeds + at] = done[at]
        self._update_best()
        if self.shared is not None and math.isfinite(self._best):
            total = self.seeds * (self._best + _MARGIN_PER_SEED[self.objective])
            self.shared[0] = total + _MARGIN[self.objective]

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
    shared: MutableSequence[float] | None = None
    if objective in PRUNABLE:
        shared = [math.inf] + [0.0] * (settings * len(scenarios))
        if jobs > 1:
            shared = multiprocessing.get_context().RawArray("d", shared)
    bounds = Bounds(objective or "wasted", len(scenarios), shared)
    results: dict[tuple[int, int], dict[str, Any]] = {}
    pool = None
    if jobs <= 1:
        _init(scenarios, shared)
        outcomes: Iterable[tuple[int, dict[str, Any]]] = map(_work, tasks)
    else:
        pool = multiprocessing.get_context().Pool(
            min(jobs, len(tasks)), initializer=_init, initargs=(scenarios, shared)
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


def bound_of(
    results: Mapping[tuple[int, int], Mapping[str, Any]], objective: str, seeds: int
) -> float:
    """The bound on a setting's total over its `seeds` that `results` set, as the
    pool sets it (infinite when no setting among them finished every seed and
    passes the guard rail)."""
    settings = 1 + max((index for _, index in results), default=NONE)
    shared: list[float] = [math.inf] + [0.0] * (max(settings, 0) * seeds)
    bounds = Bounds(objective, seeds, shared)
    for (at, _), out in sorted(results.items()):
        bounds.record(at, out)
    return shared[0]


def with_bound(tasks: Batch, above: float) -> Batch:
    """The items with `prune.above` set to `above` (unless infinite: they run to the
    end). A run that runs on its own does not know its setting's other seeds'
    figures, which are at least 0: the setting's whole bound is its own."""
    if not math.isfinite(above):
        return list(tasks)
    return [(at, {**item, "prune": {**item["prune"], "above": above}}) for at, item in tasks]


def run_in_phases(
    tasks: Batch,
    run_batch: Callable[[Batch], Mapping[tuple[int, int], Mapping[str, Any]]],
    *,
    seeds: int,
) -> Results:
    """Every task's result, run as two batches by `run_batch` (which runs a batch's
    items without sharing anything between them, as a distributed map does): first
    the items that run to the end (plain Kubernetes and the baselines: no `prune`),
    then the others with the bound the first batch's results set. With no item to
    prune there is one batch."""
    first = [t for t in tasks if "prune" not in t[1]]
    rest = [t for t in tasks if "prune" in t[1]]
    results: Results = {k: dict(v) for k, v in run_batch(first).items()}
    if rest:
        objective = str(rest[0][1]["prune"]["objective"])
        above = bound_of(results, objective, seeds)
        results.update({k: dict(v) for k, v in run_batch(with_bound(rest, above)).items()})
    return results
