"""A local run in the simulator's terms, so that it is reported as `muster simulate` reports."""

from __future__ import annotations

from muster.local.run import LocalResult
from muster.sim.engine import RunResult
from muster.sim.kube import GpuSample
from muster.sim.scenario import Scenario
from muster.sim.summary import Tracking, summarize


def as_run_result(scenario: Scenario, result: LocalResult) -> RunResult:
    """The local run in the simulator's terms (scenario time), for the same reports."""
    cluster = result.cluster
    assert cluster is not None
    scale = result.scale
    tracking = {w.name: Tracking(w.submit_at / scale) for w in scenario.workloads}
    evictions = requeues = 0
    for e in result.events:
        t = e["t"] / scale
        track = tracking.get(e.get("workload", ""))  # node lines name no workload
        if track is None:
            continue
        if e["event"] == "PodsReady" and track.first_ready is None:
            track.first_ready = t
        elif e["event"] == "Finished":
            track.finished = t
        elif e["event"] == "Deactivated":
            track.deactivated = True
        elif e["event"] == "Evicted" and not e.get("dryRun"):
            evictions += 1
        elif e["event"] == "Requeued":
            requeues += 1
    end = result.end
    kube = cluster.kube
    kube.finish_accounting(end)
    summary = summarize(
        scenario,
        kube,
        tracking,
        end,
        evictions,
        requeues,
        len(result.events),
        {},
        result.wall_seconds,
    )
    for key in ("usefulGpuHours", "wastedGpuHours", "idleGpuHours"):
        summary[key] = round(summary[key] * scale, 3)
    for key in ("queueDelaySeconds", "jctSeconds"):
        summary[key] = {
            k: None if v is None else round(v * scale, 3) for k, v in summary[key].items()
        }
    summary["makespanSeconds"] = round(summary["makespanSeconds"] * scale, 3)
    summary["policy"] = "local"
    summary["timeScale"] = scale
    samples = [GpuSample(s.t * scale, s.useful, s.held, s.available) for s in kube.samples]
    return RunResult(
        scenario.name,
        "local",
        scenario.seed,
        result.events,
        summary,
        samples,
        kube.total_gpus,
        end * scale,
    )
