"""A local run in the simulator's terms, so that it is reported as `muster simulate` reports."""

from __future__ import annotations

import copy
from typing import Any

from muster.local.run import LocalResult
from muster.sim.engine import RunResult
from muster.sim.kube import GpuSample, SimulatedCluster
from muster.sim.scenario import Scenario
from muster.sim.summary import Tracking, failure_summary, summarize


def as_run_result(scenario: Scenario, result: LocalResult) -> RunResult:
    """The local run in the simulator's terms (scenario time), for the same reports.

    Every figure is worked out by the simulator's own summary, from the event log
    (in scenario time) and the cluster's GPU accounting put in scenario time too:
    a ratio such as utilization needs both of its terms on one clock.
    """
    cluster = result.cluster
    assert cluster is not None
    scale = result.scale
    tracking, evictions, requeues, by_class = tally(scenario, result.events)
    cluster.kube.finish_accounting(result.end)
    kube = accounting_in_scenario_time(cluster.kube, scale)
    end = result.end * scale
    # The run ends, as the simulator's does, with its last workload's last event (the
    # loop saw it a hand-off later), or at the horizon.
    closed = all(t.finished is not None or t.deactivated for t in tracking.values())
    lifecycle = [e["t"] for e in result.events if "workload" in e]
    makespan = max(lifecycle) if closed and lifecycle else scenario.until
    # The core decides inside the functions here: the simulator's count of the events
    # it decided on has no counterpart (None), nor have their outcomes.
    summary = summarize(scenario, kube, tracking, makespan, evictions, requeues, 0, {}, 0.0)
    if scenario.models_failures:
        summary.update(failure_summary(scenario, kube, tracking, by_class))
    summary["simulatedEvents"] = None
    summary["wallSeconds"] = round(result.wall_seconds, 3)
    summary["policy"] = "local"
    summary["timeScale"] = scale
    samples = [GpuSample(s.t * scale, s.useful, s.held, s.available) for s in kube.samples]
    return RunResult(
        scenario.name, "local", scenario.seed, result.events, summary, samples, kube.total_gpus, end
    )


def tally(
    scenario: Scenario, events: list[dict[str, Any]]
) -> tuple[dict[str, Tracking], int, int, dict[str, int]]:
    """What the summary is made of, from the event log, as the simulator's run log
    counts it: each workload's times, every eviction, requeues, and evictions by class
    (those carried out)."""
    tracking = {w.name: Tracking(w.submit_at) for w in scenario.workloads}
    evictions = requeues = 0
    by_class: dict[str, int] = {}
    for e in events:
        track = tracking.get(e.get("workload", ""))  # node lines name no workload
        if track is None:
            continue
        if e["event"] == "PodsReady" and track.first_ready is None:
            track.first_ready = e["t"]
        elif e["event"] == "Finished":
            track.finished = e["t"]
        elif e["event"] == "Deactivated":
            track.deactivated = True
            track.deactivated_reason = e.get("reason")
        elif e["event"] == "Evicted":
            evictions += 1
            if "class" in e and not e.get("dryRun"):
                by_class[e["class"]] = by_class.get(e["class"], 0) + 1
        elif e["event"] == "Requeued":
            requeues += 1
    return tracking, evictions, requeues, by_class


def accounting_in_scenario_time(kube: SimulatedCluster, scale: float) -> SimulatedCluster:
    """The cluster's GPU-seconds, counted on the run's clock, in scenario time (a copy)."""
    view = copy.copy(kube)
    view.useful_gpu_seconds = kube.useful_gpu_seconds * scale
    view.held_gpu_seconds = kube.held_gpu_seconds * scale
    view.useful_by = {k: v * scale for k, v in kube.useful_by.items()}
    view.held_by = {k: v * scale for k, v in kube.held_by.items()}
    return view
