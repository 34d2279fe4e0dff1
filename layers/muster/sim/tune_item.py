"""One run of a tuning: one setting on one seed of a scenario, JSON in and JSON out.

This is the unit `muster tune` hands to its process pool, and the unit a function
behind a distributed map can run: nothing in the item or its result is a Python
object, so either can be written to a file or a queue as JSON.

An item (`make_item` builds one):

    {"scenario": {"path": "week.yaml", "seed": 1},   # the file (and its trace) and seed
     "policy": "gang",                               # gang, gang+block or none
     "settings": {"timeout": "15m", ...},            # the whole settings document
     "index": 3,                                      # the run's place in the tuning
     "prune": {"objective": "wasted", "above": 812.4}}   # optional

With `prune`, the run stops as soon as its own objective so far exceeds `above`:
the objective (wasted GPU-hours, evictions) only ever grows as simulated time
passes, so a run past the bound ends past it. Whoever sets `above` makes it a
bound that cannot change the answer (`muster.sim.tune_pool` shows how: the best
finished mean times the seeds, less what the setting's other seeds reached). Its result then says how far it got
(`dominatedAt`, the fraction of the scenario's horizon) instead of its summary.

The result:

    {"index": 3, "seed": 1, "policy": "gang",
     "summary": {...} | null,             # the run's summary, null when it stopped early
     "deactivated": [...], "finished": [...],   # workloads, for the guard rail
     "dominatedAt": null | 0.23,          # where it passed the bound
     "objectiveSoFar": null | 951.2}      # the objective when it stopped
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from muster.core import parse_settings
from muster.sim.engine import Simulation, simulate
from muster.sim.scenario import Scenario, load_scenario


def _wasted_so_far(sim: Simulation) -> float:
    """Wasted GPU-hours as accounted so far: held minus useful never falls."""
    kube = sim.kube
    return (kube.held_gpu_seconds - kube.useful_gpu_seconds) / 3600.0


def _evictions_so_far(sim: Simulation) -> float:
    return float(sim.log.evictions)


# The objectives a run can be stopped on: each only grows over simulated time.
SO_FAR: dict[str, Callable[[Simulation], float]] = {
    "wasted": _wasted_so_far,
    "evictions": _evictions_so_far,
}


def make_item(
    path: str | Path | None,
    seed: int,
    policy: str,
    settings: Mapping[str, Any],
    index: int,
    prune: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "scenario": {"path": None if path is None else str(path), "seed": seed},
        "policy": policy,
        "settings": dict(settings),
        "index": index,
    }
    if prune is not None:
        item["prune"] = dict(prune)
    return item


def with_settings(scenario: Scenario, doc: Mapping[str, Any]) -> Scenario:
    """The same scenario (same workloads and draws) under another settings document."""
    settings = replace(parse_settings(doc), gpu_quota=scenario.gpu_quota)
    return replace(scenario, settings=settings, raw_settings=dict(doc))


_loaded: dict[tuple[str, int], Scenario] = {}  # each process's scenarios, read once


def item_scenario(item: Mapping[str, Any]) -> Scenario:
    """The item's scenario, read from its file under its seed (once per process)."""
    ref = item["scenario"]
    if ref.get("path") is None:
        raise ValueError("the item names no scenario file; pass the scenario itself")
    key = (str(ref["path"]), int(ref["seed"]))
    if key not in _loaded:
        _loaded[key] = load_scenario(key[0], seed=key[1])
    return _loaded[key]


def run_item(
    item: Mapping[str, Any],
    *,
    scenario: Scenario | None = None,
    bound: Callable[[float], float] | None = None,
) -> dict[str, Any]:
    """Run one item; `scenario` is the item's own when the caller holds it already,
    `bound` a live bound that replaces `prune.above`: given the run's figure so far,
    the bound it must stay under (a pool shares the figure and reads its bound)."""
    sc = scenario if scenario is not None else item_scenario(item)
    prune = item.get("prune")
    objective = str(prune["objective"]) if prune is not None else "wasted"
    so_far = SO_FAR[objective]
    if bound is None and prune is not None and "above" in prune:
        fixed = float(prune["above"])
        bound = lambda _so_far: fixed  # noqa: E731
    found: dict[str, Any] = {
        "index": int(item["index"]),
        "seed": sc.seed,
        "policy": str(item["policy"]),
        "summary": None,
        "deactivated": [],
        "finished": [],
        "dominatedAt": None,
        "objectiveSoFar": None,
    }
    stop = None
    if bound is not None:
        if bound(0.0) < 0:  # dominated already (by its other seeds): nothing to run
            found["dominatedAt"] = 0.0
            found["objectiveSoFar"] = 0.0
            return found
        limit = bound

        def stop(sim: Simulation) -> bool:
            figure = so_far(sim)
            return figure > limit(figure)

    # Only the summary and each workload's end are read: no event log, no samples.
    result = simulate(
        with_settings(sc, item["settings"]), str(item["policy"]), stop=stop, record=False
    )
    if result.stopped_at is not None:
        found["dominatedAt"] = round(result.stopped_at / sc.until, 4)
        summary = result.summary
        found["objectiveSoFar"] = (
            summary["wastedGpuHours"] if objective == "wasted" else float(summary["evictions"])
        )
        return found
    found["summary"] = result.summary
    tracking = result.tracking
    found["deactivated"] = sorted(key for key, t in tracking.items() if t.deactivated)
    found["finished"] = sorted(key for key, t in tracking.items() if t.finished is not None)
    return found
